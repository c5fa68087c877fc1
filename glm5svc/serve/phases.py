"""What the SGLang server's log reveals: the start-up phase, loading progress, rank, level.

Line shapes come from SGLang 0.5.x: `[2026-01-01 12:00:00 TP3] Load weight begin. ...`
(also `DP0 TP3 EP0`), tqdm bars such as
`Loading safetensors checkpoint shards:  45% Completed | 36/80 [01:02<01:16, ...]`
(written with carriage returns), uvicorn's `INFO:     ...`, torch's `[rank3]:[E1129 ...]`.
The KV pool each rank got: `KV Cache is allocated. #tokens: 18214696, K size: 34.74 GB, V
size: 34.74 GB` (0.5.11; older and NSA models: `..., KV size: 0.35 GB`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Phase(StrEnum):
    STARTING = "starting"
    LOADING = "loading weights"
    AUTOTUNE = "autotune"
    WARMUP = "warm-up"
    CHECKING = "checking generation"
    SERVING = "serving"
    BENCHMARKING = "benchmarking"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"


# Start-up phases in order; the log never moves a phase backwards.
STARTUP_ORDER = [Phase.STARTING, Phase.LOADING, Phase.AUTOTUNE, Phase.WARMUP, Phase.CHECKING]

# syslog priorities for journald's PRIORITY field.
PRIORITY_ERR, PRIORITY_WARNING, PRIORITY_INFO, PRIORITY_DEBUG = 3, 4, 6, 7

_PHASE_MARKERS: list[tuple[re.Pattern[str], Phase]] = [
    (
        re.compile(r"Load weight begin|Loading safetensors checkpoint shards|loading shards"),
        Phase.LOADING,
    ),
    (re.compile(r"FlashInfer autotune|[Aa]utotun(e|ing)"), Phase.AUTOTUNE),
    (
        re.compile(
            # sglang <= 0.5.10: "Capture cuda graph begin"; 0.5.11+ also captures
            # piecewise graphs for prefill: "Capture piecewise CUDA graph begin".
            r"(?i:Capture (piecewise )?cuda graph)|Capturing batches|Uvicorn running on"
            r"|Application startup complete"
            r"|Start of (pd disaggregation )?warmup|warm[- ]?up"
        ),
        Phase.WARMUP,
    ),
]
FIRED_UP = re.compile(r"The server is fired up and ready to roll")

# A step that shows start-up is moving even when the phase does not change.
_STARTUP_STEPS = re.compile(
    r"Init torch distributed|Load weight (begin|end)|KV Cache is allocated|Memory pool end"
    r"|(?i:Capture (piecewise )?cuda graph (begin|end))|Compiling num tokens"
    r"|FlashInfer autotune|max_total_num_tokens="
    r"|Application startup complete|Uvicorn running on|Prefill batch|Decode batch"
)
# A scheduler batch: sglang's own warm-up before its ready line, a request after it.
_BATCH = re.compile(r"Prefill batch|Decode batch")
_KV_POOL = re.compile(r"KV Cache is allocated\. #tokens: (\d+)")
_PERCENT = re.compile(r"^\s*(?P<label>[^:\r\n]{3,80}):\s*(?P<pct>\d{1,3})%")
_LOAD_LABEL = re.compile(r"checkpoint shards|loading shards|weights", re.IGNORECASE)
_RANK = re.compile(r"^\[[^\]]*?\b(?:TP|rank)(\d+)\b[^\]]*\]|^\[rank(\d+)\]")

# sglang 0.5.11's launcher, as recorded (tests/fixtures/real_engine/): its subprocess watchdog
# logs "Subprocess scheduler_0 (pid=N) crashed with exit code C. Triggering SIGQUIT for
# cleanup...", its SIGQUIT handler "SIGQUIT received. signum=None, frame=None. It usually
# means one child failed." (older releases: "Received sigquit from a child process").
_ERROR = re.compile(
    r"Traceback \(most recent call last\)|^\s*\w*(Error|Exception)\b|\bERROR\b|^\[rank\d+\]:\[E"
    r"|^E\d{4} |Scheduler hit an exception|Received sigquit|SIGQUIT received"
    r"|crashed with exit code|\bFATAL\b|CRITICAL"
)
_WARNING = re.compile(r"\bWARNING\b|\bWarning\b|^\[rank\d+\]:\[W|^W\d{4} ")
_DEBUG = re.compile(r"\bDEBUG\b")


@dataclass(frozen=True)
class LineInfo:
    text: str
    rank: int | None
    priority: int
    phase: Phase | None  # the phase this line opens, if any
    load_percent: int | None  # loading progress bar value
    progress_label: str | None  # any other progress bar (cuda graph capture, autotune)
    progress_percent: int | None
    startup_step: bool
    fired_up: bool
    kv_pool_tokens: int | None = None  # the KV pool this rank allocated
    batch: bool = False  # a scheduler batch line (prefill or decode)


# The argument dump names flags such as skip_server_warmup: it opens no phase.
_ARGS_DUMP = re.compile(r"server_args=|ServerArgs\(")


def parse_line(text: str) -> LineInfo:
    phase = None
    if not _ARGS_DUMP.search(text):
        phase = next((p for pattern, p in _PHASE_MARKERS if pattern.search(text)), None)
    load_percent = progress_label = progress_percent = None
    bar = _PERCENT.match(text)
    if bar:
        label, pct = bar.group("label").strip(), min(int(bar.group("pct")), 100)
        if _LOAD_LABEL.search(label):
            load_percent, phase = pct, Phase.LOADING
        else:
            progress_label, progress_percent = label, pct
    kv_pool = _KV_POOL.search(text)
    return LineInfo(
        text=text,
        rank=_rank(text),
        priority=_priority(text),
        phase=phase,
        load_percent=load_percent,
        progress_label=progress_label,
        progress_percent=progress_percent,
        startup_step=bool(_STARTUP_STEPS.search(text)),
        fired_up=bool(FIRED_UP.search(text)),
        kv_pool_tokens=int(kv_pool.group(1)) if kv_pool else None,
        batch=bool(_BATCH.search(text)),
    )


def _rank(text: str) -> int | None:
    match = _RANK.match(text)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _priority(text: str) -> int:
    if _ERROR.search(text):
        return PRIORITY_ERR
    if _WARNING.search(text):
        return PRIORITY_WARNING
    if _DEBUG.search(text):
        return PRIORITY_DEBUG
    return PRIORITY_INFO


def later_startup_phase(current: Phase, candidate: Phase) -> bool:
    """True when `candidate` moves start-up forward from `current`."""
    if current not in STARTUP_ORDER or candidate not in STARTUP_ORDER:
        return False
    return STARTUP_ORDER.index(candidate) > STARTUP_ORDER.index(current)


# A start broken down from the engine's log (sglang 0.5.11's lines, recorded on the H200 in
# tests/fixtures/real_engine/): its timestamps are whole seconds, so the steps that log their
# own elapsed time (weights, graphs) are read from that; autotune from its two lines.
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\]")
_WEIGHTS_END = re.compile(r"Load weight end\. elapsed=(\d+(?:\.\d+)?) s")
_GRAPHS_END = re.compile(r"Capture (piecewise )?cuda graph end\. Time elapsed: (\d+(?:\.\d+)?) s",
                         re.IGNORECASE)  # fmt: skip
_AUTOTUNE_BEGIN = re.compile(r"Running FlashInfer autotune")
_AUTOTUNE_END = re.compile(r"FlashInfer autotune completed")
_SERVE_READY = re.compile(r"^glm5svc: ready after (\d+(?:\.\d+)?) s")


@dataclass(frozen=True)
class StartBreakdown:
    """Where one start's time went, in seconds (None: the log did not say)."""

    weights_s: float | None = None  # weights loaded (the slowest rank)
    autotune_s: float | None = None  # FlashInfer's MoE autotune
    graphs_s: float | None = None  # CUDA graphs captured, piecewise and decode
    fired_up_s: float | None = None  # the engine's first log line to "fired up"
    ready_s: float | None = None  # serve started to READY (its own line)

    def to_dict(self) -> dict[str, float | None]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> StartBreakdown:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})

    def describe(self) -> str:
        parts = [
            f"{label} {value:.1f} s"
            for label, value in (
                ("weights", self.weights_s),
                ("autotune", self.autotune_s),
                ("graphs", self.graphs_s),
                ("fired up at", self.fired_up_s),
                ("READY at", self.ready_s),
            )
            if value is not None
        ]
        return ", ".join(parts) or "no start lines in the log"


def start_breakdown(lines: list[str]) -> StartBreakdown:
    def stamp(text: str) -> float | None:
        match = _STAMP.match(text)
        if not match:
            return None
        return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()

    first = autotune_begin = autotune_end = fired = None
    weights: list[float] = []
    graphs: dict[str, float] = {}
    ready = None
    for line in lines:
        at = stamp(line)
        if at is not None and first is None:
            first = at
        if found := _WEIGHTS_END.search(line):
            weights.append(float(found.group(1)))
        elif found := _GRAPHS_END.search(line):
            kind = "piecewise" if found.group(1) else "decode"
            graphs[kind] = max(graphs.get(kind, 0.0), float(found.group(2)))
        elif _AUTOTUNE_BEGIN.search(line) and autotune_begin is None:
            autotune_begin = at
        elif _AUTOTUNE_END.search(line):
            autotune_end = at
        elif FIRED_UP.search(line) and fired is None:
            fired = at
        elif found := _SERVE_READY.match(line):
            ready = float(found.group(1))
    autotune = None
    if autotune_begin is not None and autotune_end is not None:
        autotune = max(0.0, autotune_end - autotune_begin)
    return StartBreakdown(
        weights_s=max(weights) if weights else None,
        autotune_s=autotune,
        graphs_s=round(sum(graphs.values()), 2) if graphs else None,
        fired_up_s=fired - first if fired is not None and first is not None else None,
        ready_s=ready,
    )
