"""What one benchmark run does: server, interpreter, tokenizer, ladder, lengths, prompts."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from glm5svc.bench.request_file import RequestFile, load_request_file
from glm5svc.config import READ_KEY_FILE, BenchmarkSection, connect_host, read_api_key
from glm5svc.errors import ConfigError
from glm5svc.model_info import context_length

# A level's default time limit, from its workload, for slow but working servers: bench_serving
# itself waits up to 6 hours per request (aiohttp ClientTimeout(total=6 * 60 * 60)), so a
# server that stops generating would hold the run that long. Per round of requests (one
# request per concurrency slot): a floor, prefill at >= 500 tokens/s, decode at >= 2
# tokens/s per stream; plus the start (imports, tokenizer) of bench_serving.
LEVEL_START_S = 300.0
REQUEST_FLOOR_S = 30.0
PREFILL_S_PER_TOKEN = 0.002
DECODE_S_PER_TOKEN = 0.5
_DEFAULTS = BenchmarkSection()  # the configuration's defaults are the plan's


@dataclass(frozen=True)
class BenchPlan:
    base_url: str
    python: str  # interpreter with sglang: runs `python -m sglang.bench_serving`
    tokenizer: str
    model: str  # the served model name
    ladder: tuple[int, ...]
    input_len: int
    output_len: int
    prompts_per_concurrency: int = _DEFAULTS.prompts_per_concurrency
    min_prompts: int = _DEFAULTS.min_prompts
    num_prompts: int | None = None  # fixed prompts per level; overrides the two above
    warmup_requests: int = _DEFAULTS.warmup_requests
    seed: int = _DEFAULTS.seed
    api_key: str | None = None  # never written to results
    level_timeout_s: float | None = None
    steady: bool = _DEFAULTS.steady
    window_s: float = _DEFAULTS.window_s
    windows: int = _DEFAULTS.windows
    warmup_tolerance_pct: float = _DEFAULTS.warmup_tolerance_pct
    warmup_max_s: float = _DEFAULTS.warmup_max_s
    prefix_sharing: float = _DEFAULTS.prefix_sharing
    # A recorded workload (glm5svc/bench/request_file.py): its lengths replace the fixed
    # input_len and output_len.
    request_file: RequestFile | None = None

    def lengths(self) -> tuple[int, int]:
        """The longest input and output of a request (the fixed ones, or the file's)."""
        if self.request_file is not None:
            return self.request_file.max_input_len, self.request_file.max_output_len
        return self.input_len, self.output_len

    def prompts_for(self, concurrency: int) -> int:
        if self.num_prompts is not None:
            return self.num_prompts
        return max(self.min_prompts, self.prompts_per_concurrency * concurrency)

    def timeout_for(self, concurrency: int) -> float:
        """--level-timeout, else a bound derived from the level's workload (see above)."""
        if self.level_timeout_s is not None:
            return self.level_timeout_s
        rounds = math.ceil(self.prompts_for(concurrency) / concurrency) + math.ceil(
            self.warmup_requests / concurrency
        )
        input_len, output_len = self.lengths()
        per_request = (
            REQUEST_FLOOR_S + input_len * PREFILL_S_PER_TOKEN + output_len * DECODE_S_PER_TOKEN
        )
        return LEVEL_START_S + rounds * per_request

    def with_overrides(self, **overrides: Any) -> BenchPlan:
        given = {k: v for k, v in overrides.items() if v is not None}
        if "ladder" in given:
            given["ladder"] = tuple(given["ladder"])
        plan = replace(self, **given)
        plan.validate()
        return plan

    def validate(self) -> None:
        problems = []
        if not self.ladder:
            problems.append("ladder: give at least one concurrency level")
        elif list(self.ladder) != sorted(set(self.ladder)) or min(self.ladder) < 1:
            problems.append(f"ladder: must be positive and strictly increasing (got {self.ladder})")
        for name in ("input_len", "output_len"):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be at least 1 (got {getattr(self, name)})")
        if self.num_prompts is not None and self.num_prompts < 1:
            problems.append(f"num_prompts: must be at least 1 (got {self.num_prompts})")
        timeout = self.level_timeout_s
        if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 30 * 86400):
            problems.append(f"level_timeout_s: must be 0 < seconds <= 30 days (got {timeout})")
        if problems:
            raise ConfigError("the benchmark plan is not valid", problems=problems)

    def describe(self) -> dict[str, Any]:
        """The plan as recorded in results: everything but the API key; of a request file,
        its identity (not its requests)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["api_key"] = "(set)" if self.api_key else None
        data["request_file"] = self.request_file.identity() if self.request_file else None
        data["ladder"] = list(self.ladder)
        data["prompts"] = {str(c): self.prompts_for(c) for c in self.ladder}
        data["level_timeouts_s"] = {str(c): round(self.timeout_for(c)) for c in self.ladder}
        return data


def plan_from_config(
    config,
    ladder: list[int] | None = None,
    *,
    api_key: str | None | object = READ_KEY_FILE,
    **overrides: Any,
) -> BenchPlan:
    """The plan the config describes (benchmark, server, model sections), then overrides.
    `api_key`: the key already read (serve's post-start run has it from the host facts);
    by default server.api_key_file is read here."""
    bench = config.benchmark
    server = config.server
    given = overrides.pop("request_file", None)
    source = given if given is not None else bench.request_file
    request_file = source if isinstance(source, RequestFile) else None
    if source is not None and request_file is None:
        limit, where = context_length(config.model.path, server.extra_args)
        key = "--request-file" if given is not None else "benchmark.request_file"
        request_file = load_request_file(Path(source), limit, where, key=key)
    host = connect_host(server.host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    plan = BenchPlan(
        base_url=f"http://{host}:{server.port}",
        python=str(bench.python or server.python),
        tokenizer=str(config.model.tokenizer_path or config.model.path),
        model=config.model.served_name,
        ladder=tuple(ladder or bench.ladder),
        input_len=bench.input_len,
        output_len=bench.output_len,
        prompts_per_concurrency=bench.prompts_per_concurrency,
        min_prompts=bench.min_prompts,
        warmup_requests=bench.warmup_requests,
        seed=bench.seed,
        steady=bench.steady,
        window_s=bench.window_s,
        windows=bench.windows,
        warmup_tolerance_pct=bench.warmup_tolerance_pct,
        warmup_max_s=bench.warmup_max_s,
        prefix_sharing=bench.prefix_sharing,
        request_file=request_file,
        api_key=read_api_key(server.api_key_file) if api_key is READ_KEY_FILE else api_key,
    )
    return plan.with_overrides(**overrides)
