"""The dataset file one bench_serving run of a recorded workload reads (benchmark.request_file).

bench_serving's random datasets give every request one input and one output length, so a
recorded workload is sent through its `custom` dataset instead: a JSONL file of prompt and
completion texts that bench_serving tokenizes to count each request's input and output
(sglang 0.5.9, 0.5.10.post1 and 0.5.11 alike, `sample_custom_requests`). The file is written
before each run by glm5svc/data/request_prompts.py in the interpreter that runs bench_serving
(it has the tokenizer's library): random tokens from the run's seed, so every run sends new
prompts, as random-ids does for fixed lengths, and the cache is flushed before it all the same.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from glm5svc.bench.plan import BenchPlan
from glm5svc.child_group import spawn

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "request_prompts.py"
START_S = 120.0  # the interpreter, transformers and the tokenizer
PER_REQUEST_S = 0.05


class RequestPromptsError(RuntimeError):
    """The run's prompts could not be written: the message names the cause and the fix."""


def dataset_arguments(dataset: Path) -> list[str]:
    """bench_serving's options for a dataset file written by write_dataset."""
    return ["--dataset-name", "custom", "--dataset-path", str(dataset)]


def write_dataset(plan: BenchPlan, prompts: int, dataset: Path, env: dict[str, str]) -> Path:
    """Write the prompts of a run of `prompts` requests (the request file cycled, the plan's
    seed) to `dataset`; RequestPromptsError when the interpreter cannot."""
    if plan.request_file is None:
        raise ValueError("the plan has no request file")
    lengths = dataset.with_name(dataset.stem + "-lengths.json")
    lengths.write_text(json.dumps(plan.request_file.for_run(prompts)), encoding="utf-8")
    command = [plan.python, str(SCRIPT), plan.tokenizer, str(plan.seed), str(lengths), str(dataset)]
    try:
        group = spawn(
            command,
            death_signal=signal.SIGTERM,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
        )
    except OSError as exc:
        raise RequestPromptsError(f"cannot run {plan.python}: {exc}") from None
    limit = START_S + PER_REQUEST_S * prompts
    try:
        out, err = group.popen.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        group.kill()
        raise RequestPromptsError(
            f"writing the prompts of {prompts} requests took over {limit:.0f} s with "
            f"{plan.python}; a smaller run or a faster tokenizer"
        ) from None
    except BaseException:
        group.kill()
        raise
    if group.returncode != 0:
        last = (err.strip().splitlines() or ["(no output)"])[-1][:300]
        raise RequestPromptsError(
            f"cannot write the request file's prompts with {plan.python} (benchmark.python, "
            f"else server.python; it needs transformers, as bench_serving does) and the "
            f"tokenizer {plan.tokenizer}: {last}"
        )
    return dataset
