"""sglang's own tuner on the tune's testbed: `python -m sglang.auto_benchmark run`, the peer a
user would run instead of `glm5svc tune`, on the same start, space, workload and machine.

- Tier 3: every combination of the space (cap 64 / 1024 x CUDA graphs on / off), one engine
  start and one bench_serving run each, ranked by its own rule (SLA met, rate, output
  tokens/s); the engine is sglang.launch_server with the argv glm5svc's plan gives the
  tune's trials (lab/gpu/tune_scenario.py's configuration).
- A fresh dataset: its `custom` JSONL of `{"prompt": [token ids], "output_len": N}` rows,
  independent random ids of the testbed's vocabulary with the tune's length distribution
  (input uniform in [ratio x 512, 512], output in [ratio x 128, 128]); `kind: random`
  wants the ShareGPT file, which the GPU machine cannot download.
- `flush_cache: true`, concurrency 256, every request sent at once (rate inf).
Its output folder (live_results.jsonl, SUMMARY.md, the server logs cut to their ends)
comes back under recorded/peer/, and results.json gets its wall time and pick.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import yaml

from glm5svc.child_group import spawn
from lab.gpu.common import BENCH_PYTHON, ENGINE_COMMAND, LAB, REPO, STARTED_GROUPS, Deadline, log
from lab.gpu.tune_scenario import (
    CONCURRENCY,
    INPUT_LEN,
    LENGTH_RATIO,
    MEM_FRACTION,
    OUTPUT_LEN,
    STARTS,
    copy_run_dir,
)

PROMPTS = 512  # the tuning-facts run: 512 fresh prompts per candidate, two waves at 256
PORT = 30950
RESERVE_S = 30.0


def write_dataset(path: Path, vocab: int, seed: int) -> Path:
    rng = random.Random(seed)
    low_in, low_out = int(INPUT_LEN * LENGTH_RATIO), int(OUTPUT_LEN * LENGTH_RATIO)
    with path.open("w") as handle:
        for _ in range(PROMPTS):
            ids = [rng.randrange(vocab) for _ in range(rng.randint(low_in, INPUT_LEN))]
            handle.write(
                json.dumps({"prompt": ids, "output_len": rng.randint(low_out, OUTPUT_LEN)})
            )
            handle.write("\n")
    return path


def peer_config(model_dir: Path, dataset: Path, output_dir: Path, start: str) -> dict:
    settings = STARTS[start]
    return {
        "server": {
            # The engine glm5svc's trials run (a CPU rehearsal swaps in the test engine).
            "command_prefix": ENGINE_COMMAND,
            "host": "127.0.0.1",
            "port": PORT,
            "base_flags": {
                "model_path": str(model_dir),
                "served_model_name": model_dir.name,
                "load_format": "dummy",
                "tp_size": 1,
                "mem_fraction_static": MEM_FRACTION,
                "attention_backend": "triton",
                "sampling_backend": "pytorch",
                "grammar_backend": "none",
                "disable_piecewise_cuda_graph": True,
                "max_running_requests": settings["max_running_requests"],
                "disable_cuda_graph": not settings["cuda_graph"],
            },
            "search_space": {
                "max_running_requests": [64, 1024],
                "disable_cuda_graph": [False, True],
            },
        },
        "benchmark": {
            "backend": "sglang",
            "tokenizer": str(model_dir),
            "output_dir": str(output_dir),
            "max_concurrency": [CONCURRENCY],
            "qps": [float("inf")],
            "flush_cache": True,
            "ready_check_timeout_sec": 400,
        },
        "dataset": {"kind": "custom", "path": str(dataset), "num_prompts": PROMPTS},
        "search": {"tier": 3, "resume": False},
    }


def pick_of(output_dir: Path) -> tuple[dict | None, list[dict]]:
    """Every candidate's record and the one the peer ranks first (its own rule)."""
    rows = []
    for path in sorted(output_dir.rglob("live_results.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    measured = [r for r in rows if r.get("metrics")]

    def rank(record: dict) -> tuple:
        metrics = record["metrics"]
        return (
            1 if record.get("sla_passed") else 0,
            record.get("requested_qps", 0.0),
            metrics.get("output_throughput", 0.0),
            -metrics.get("mean_ttft_ms", float("inf")),
        )

    return (max(measured, key=rank) if measured else None), rows


def run(out: Path, env: dict[str, str], deadline: Deadline, results: dict, model_dir: Path,
        start: str) -> None:  # fmt: skip
    work = LAB / "work" / f"peer-{start}"
    work.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    dataset = write_dataset(work / "prompts.jsonl", vocab, seed=time.time_ns() % 2**31)
    output_dir = work / "results"
    config = work / "auto-benchmark.yaml"
    config.write_text(yaml.safe_dump(peer_config(model_dir, dataset, output_dir, start)))
    recorded = out / "recorded" / "peer"
    recorded.mkdir(parents=True, exist_ok=True)
    (recorded / "auto-benchmark.yaml").write_text(config.read_text())
    argv = [BENCH_PYTHON, "-m", "sglang.auto_benchmark", "run", "--config", str(config)]
    results.update(start=start, argv=argv[1:], prompts=PROMPTS, vocab=vocab)
    t0 = time.monotonic()
    with (recorded / "auto-benchmark.log").open("w") as stdout:
        peer = spawn(argv, die_with_parent=False, env=env, cwd=REPO, stdout=stdout,
                     stderr=stdout)  # fmt: skip
        STARTED_GROUPS.add(peer.pid)
        code = peer.wait(max(5, deadline.left() - RESERVE_S))
        if code is None:
            stopped = peer.stop(10, first_signal_to="group")
            code = "past the deadline: " + stopped.describe()
    results["exit"] = code
    results["wall_s"] = round(time.monotonic() - t0, 1)
    pick, rows = pick_of(output_dir)
    results["candidates"] = [
        {
            "flags": {
                k: r.get("server_flags", {}).get(k)
                for k in ("max_running_requests", "disable_cuda_graph")
            },  # fmt: skip
            "total_throughput": (r.get("metrics") or {}).get("total_throughput"),
            "output_throughput": (r.get("metrics") or {}).get("output_throughput"),
            "error": r.get("error"),
        }
        for r in rows
    ]
    if pick is not None:
        flags = pick.get("server_flags", {})
        results["pick"] = {
            "max_running_requests": flags.get("max_running_requests"),
            "cuda_graph": not flags.get("disable_cuda_graph", False),
        }
    if output_dir.exists():
        results["copy_notes"] = copy_run_dir(output_dir, recorded / "results")
    log(f"peer: exit {code} in {results['wall_s']} s, pick {results.get('pick')}")
