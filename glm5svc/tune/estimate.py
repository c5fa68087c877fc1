"""How long a tune will take, before it runs, and (fed with what its starts measured) how
long the rest will take: one cost model for `tune run --plan`, the plan every run prints
and a resumed run's plan.

Pure: every figure is an input (glm5svc/tune/host_figures.py reads them from the host, the
model folder and a resumed run's trials), so the estimate is tested with the numbers of any
machine, the real target's included (docs/performance-tune.md).

A start is one engine start. At a start-to-start spread like the H200's (decision.py's
prior), one start a side decides only effects of about 2x: the screen plans FUTILE_AFTER
starts per value of a knob that needs a restart (one knob at a time from the start) and one
more of the incumbent, after which a candidate with no gain in sight stops; the confirmation
plans CONFIRMATION_STARTS fresh starts (the start and the overlay, each as written; one
when only the live cap is searched, the start's cap measured beside the overlay). The
values of a live knob share each start's load. One start costs
  its start (to READY) + the warm-up + rounds x live values x (window + settle) + its stop,
where the first start measures `FIRST_START_ROUNDS` rounds (it decides the live values)
and the others `repeats`. When the plan does not fit the budget, the knobs at the end of
the space's order (the least influential, glm5svc/data/tune-space.yaml) are dropped until
it does.

Longer than 400 lines: the cost model, its answer where the budget is short (which asks the
model again) and the lines the plan prints read the same figures and stay together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from glm5svc.tune.decision import FUTILE_AFTER
from glm5svc.tune.power import plan_power
from glm5svc.tune.start_model import PAIR_SPREAD_PRIOR, PRIOR_START_SPREAD

GB = 1e9
GIB = 2**30
# Until a run has measured its own: what a start costs besides reading the weights, from
# the H200 recordings (sglang 0.5.11: 34 s process start and imports, piecewise CUDA graphs
# 49 s compiling on first use, 45 s warm) and the real target's autotune ("several minutes"
# of a start, docs/performance-tune.md).
PROCESS_START_S = 35.0
GRAPHS_COLD_S = 50.0
GRAPHS_WARM_S = 45.0
AUTOTUNE_COLD_S = 120.0  # FlashInfer's MoE autotune, profiled; with its cache file: loaded
STOP_S = 15.0  # the drain of an engine under load and the GPU memory freed
# The warm-up until two windows agree took 47-124 s of 5 s windows on the H200 testbed:
# about 6 windows, bounded by benchmark.warmup_max_s.
WARMUP_WINDOWS = 6
FIRST_START_ROUNDS = 4  # two A B B A blocks: a large live effect is decided in 4 pairs
CONFIRMATION_STARTS = 2  # the start and the overlay, each as written
STAND_IN_START_S = 5.0  # a stand-in engine (server.command) until a start is measured
# The page cache keeps the weights only with room beside the engine's own host memory.
ENGINE_HOST_MEMORY_BYTES = 32 * GIB
# Weights read again from the page cache instead of the disk.
PAGE_CACHE_READ_BPS = 10 * GB


@dataclass(frozen=True)
class KnobCount:
    name: str
    values: int
    restart: bool = True  # False: a live knob, measured within a start


@dataclass(frozen=True)
class EstimateInputs:
    knobs: tuple[KnobCount, ...]
    budget_s: float
    window_s: float
    repeats: int  # measured windows per setting
    weights_bytes: int | None = None  # the checkpoint's size; None: not read (dummy weights)
    weights_note: str = "their size is not known"  # why weights_bytes is None, if it is
    disk_read_bps: float | None = None  # bytes/s
    memory_limit_bytes: int | None = None  # the container's (cgroup memory.max); None: none
    moe_autotune: bool = False  # does this engine run FlashInfer's MoE autotune at start?
    autotune_cached: bool = False  # and is its cache file kept (patch or upstream)?
    measured_start_s: float | None = None  # mean start (to READY) of a resumed run's trials
    measured_window_s: float | None = None  # mean measured window of a resumed run
    done_starts: int = 0  # already measured by a resumed run
    done_settings: int = 0
    settle_s: float = 0.0  # after each live change
    warmup_max_s: float | None = None  # benchmark.warmup_max_s; None: WARMUP_WINDOWS always
    stand_in: str | None = None  # the engine is not sglang (server.command): what it is
    confirm: bool = True  # the winner's confirming start
    max_repeats: int | None = None  # --max-repeats: the first start's rounds stop there
    min_effect: float = 0.03  # --min-effect: the bar a gain's lower bound must clear
    confidence: float = 0.95
    pair_spread: float = PAIR_SPREAD_PRIOR  # a window pair's, until the machine shows its own
    start_spread: float = PRIOR_START_SPREAD  # from engine start to engine start


@dataclass(frozen=True)
class Dropped:
    knob: str
    starts: int
    seconds: float


@dataclass(frozen=True)
class Estimate:
    starts: int
    settings: int
    windows: int
    start_s: float
    window_s: float
    total_s: float
    budget_s: float
    start_basis: str
    first_start_s: float = 0.0  # the first start, all its parts
    other_start_s: float = 0.0  # each later one
    parts: tuple[tuple[str, float], ...] = ()  # a later start's parts
    dropped: tuple[Dropped, ...] = ()
    warnings: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    confirmation_starts: int = CONFIRMATION_STARTS  # of `starts`
    live_only: bool = False  # the restart knobs dropped so that the live knob fits
    power: tuple[str, ...] = ()  # what the plan can find (power_lines)
    fitting: tuple[str, ...] = ()  # what would make it fit, where it does not

    @property
    def fits(self) -> bool:
        return self.total_s <= self.budget_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "starts": self.starts,
            "settings": self.settings,
            "windows": self.windows,
            "start_s": round(self.start_s, 1),
            "window_s": round(self.window_s, 1),
            "total_s": round(self.total_s, 1),
            "budget_s": self.budget_s,
            "fits": self.fits,
            "start_basis": self.start_basis,
            "first_start_s": round(self.first_start_s, 1),
            "other_start_s": round(self.other_start_s, 1),
            "parts": {name: round(seconds, 1) for name, seconds in self.parts},
            "dropped": [d.__dict__ for d in self.dropped],
            "kept": list(self.kept),
            "live_only": self.live_only,
            "power": list(self.power),
            "fitting": list(self.fitting),
            "warnings": list(self.warnings),
        }

    def lines(self) -> list[str]:
        others = max(0, self.starts - 1)
        if self.starts == 0:
            head = f"plan: nothing left to measure; the budget is {_clock(self.budget_s)}"
        else:
            head = (
                f"plan: {self.starts} engine start(s) for {self.settings} setting(s) "
                f"({self.windows} window(s) of {_fine(self.window_s)}): the first "
                f"{_clock(self.first_start_s)}"
                + (f" + {others} x {_clock(self.other_start_s)}" if others else "")
                + f" = {_clock(self.total_s)}; the budget is {_clock(self.budget_s)}"
            )
        detail = ", ".join(f"{name} {_fine(seconds)}" for name, seconds in self.parts)
        lines = [head, f"plan: a start is {detail}", f"plan: its start is {self.start_basis}"]
        if self.dropped:
            names = ", ".join(f"{d.knob} ({d.starts} start(s), {_clock(d.seconds)})"
                              for d in self.dropped)  # fmt: skip
            lines.append(
                f"plan: the first pass over every knob does not fit; dropped, the least "
                f"influential first (the space's order): {names}"
            )
        if self.live_only:
            lines.append(
                "plan: instead of a restart knob it does not fit, it measures the live knob "
                "alone, in one start of the start's settings, and confirms its pick there"
            )
        lines += [f"plan: {line}" for line in self.power]
        if self.fits:
            lines.append("plan: it fits the budget")
        elif self.total_s - self.confirmation_starts * self.other_start_s <= self.budget_s:
            confirmation = _clock(self.confirmation_starts * self.other_start_s)
            lines.append(
                f"plan: the screen fits the budget; its confirmation ({self.confirmation_starts}"
                f" start(s), {confirmation}) does not: no change is written without one "
                "(raise --budget)"
            )
        else:
            lines.append(
                "plan: even one knob does not fit the budget: it measures what the budget "
                "allows and writes no change that is not confirmed; "
                + ("; ".join(self.fitting) or "raise --budget")
            )
        return lines + [f"plan: WARNING: {w}" for w in self.warnings]


def start_seconds(inputs: EstimateInputs) -> tuple[float, str]:
    """One start's seconds to READY, and how they were found: measured, else a stand-in
    engine's placeholder (never the real target's figures), else the target's parts."""
    if inputs.measured_start_s is not None:
        return inputs.measured_start_s, f"{_clock(inputs.measured_start_s)} as measured"
    if inputs.stand_in is not None:
        return STAND_IN_START_S, (
            f"{_clock(STAND_IN_START_S)} until one is measured ({inputs.stand_in}: no sglang "
            "start figures apply)"
        )
    parts = [("process start and imports", PROCESS_START_S)]
    left_out = None
    if inputs.weights_bytes and inputs.disk_read_bps:
        cached = keeps_weights_cached(inputs)
        speed = PAGE_CACHE_READ_BPS if cached else inputs.disk_read_bps
        where = "page cache" if cached else f"disk at {inputs.disk_read_bps / GB:.2f} GB/s"
        parts.append((f"{inputs.weights_bytes / GB:,.0f} GB of weights from the {where}",
                      inputs.weights_bytes / speed))  # fmt: skip
    elif inputs.weights_bytes:
        left_out = "the disk's read speed is not known"
    else:
        left_out = inputs.weights_note
    if inputs.moe_autotune:
        if inputs.autotune_cached:
            parts.append(("MoE autotune loaded from its cache file", 0.0))
        else:
            parts.append(("MoE autotune", AUTOTUNE_COLD_S))
    parts.append(("graphs", GRAPHS_WARM_S))
    total = sum(seconds for _, seconds in parts)
    detail = ", ".join(f"{what} {_clock(seconds)}" for what, seconds in parts)
    if left_out:  # said, not silently missing from the sum
        detail += f"; the weights' load left out: {left_out}"
    return total, f"{_clock(total)} estimated ({detail})"


def keeps_weights_cached(inputs: EstimateInputs) -> bool:
    if inputs.weights_bytes is None:
        return True
    limit = inputs.memory_limit_bytes
    return limit is None or limit >= inputs.weights_bytes + ENGINE_HOST_MEMORY_BYTES


def cache_limit_gib(weights_bytes: int) -> int:
    """The smallest memory limit (GiB) that keeps the weights in the page cache beside the
    engine's own host memory."""
    return math.ceil((weights_bytes + ENGINE_HOST_MEMORY_BYTES) / GIB)


def memory_warning(inputs: EstimateInputs) -> str | None:
    if keeps_weights_cached(inputs) or inputs.weights_bytes is None:
        return None
    needed = cache_limit_gib(inputs.weights_bytes)
    return (
        f"the container's memory limit ({inputs.memory_limit_bytes / GIB:,.0f} GiB) is below "
        f"the weights' size ({inputs.weights_bytes / GIB:,.0f} GiB) and the engine's own "
        f"memory: every start reads the weights from disk again. A limit of at least "
        f"{needed:,} GiB keeps them in the page cache between starts (on Proxmox: "
        f"pct set <id> --memory {needed * 1024})"
    )


def first_pass(knobs: tuple[KnobCount, ...]) -> tuple[int, int]:
    """(starts, settings) of a pass that changes one knob at a time from the start."""
    candidates = sum(k.values - 1 for k in knobs if k.restart)
    starts = 1 + (1 + FUTILE_AFTER * candidates if candidates else 0)
    settings = 1 + sum(k.values - 1 for k in knobs)
    return starts, settings


def estimate(inputs: EstimateInputs, answer: bool = True) -> Estimate:
    """The plan; `answer`: with its power and, where it does not fit, what would."""
    start_s, basis = start_seconds(inputs)
    window_s = inputs.measured_window_s or inputs.window_s
    warnings = [w for w in (memory_warning(inputs),) if w]
    warmup_s = WARMUP_WINDOWS * window_s
    if inputs.warmup_max_s is not None:
        warmup_s = min(warmup_s, inputs.warmup_max_s)

    def live_values(knobs: tuple[KnobCount, ...]) -> int:
        return max([k.values for k in knobs if not k.restart] or [1])

    def per_start(rounds: int, knobs: tuple[KnobCount, ...]) -> tuple[tuple[str, float], ...]:
        values = live_values(knobs)
        measured = rounds * values * (window_s + inputs.settle_s)
        return (
            ("to READY", start_s),
            ("warm-up", warmup_s),
            (f"{rounds} round(s) x {values} value(s) x (window + settle)", measured),
            ("stop", STOP_S),
        )

    def cost(knobs: tuple[KnobCount, ...]) -> tuple[int, int, int, float, float, float]:
        starts, settings = first_pass(knobs)
        starts += confirmation_starts(knobs)
        starts = max(0, starts - inputs.done_starts)
        settings = max(0, settings - inputs.done_settings)
        first_rounds = FIRST_START_ROUNDS if inputs.done_starts == 0 else inputs.repeats
        if inputs.max_repeats is not None:
            first_rounds = min(first_rounds, inputs.max_repeats)
        if inputs.confirm and not any(k.restart for k in knobs) and inputs.done_starts == 0:
            first_rounds += FIRST_START_ROUNDS  # the confirmation's fresh rounds
        # Whole seconds, as the plan prints them: its "first + n x other = total" adds up.
        first = round(sum(s for _, s in per_start(max(first_rounds, inputs.repeats), knobs)))
        other = round(sum(s for _, s in per_start(inputs.repeats, knobs)))
        values = live_values(knobs)
        windows = (
            max(first_rounds, inputs.repeats) * values + (starts - 1) * inputs.repeats * values
            if starts
            else 0
        )
        total = (first + (starts - 1) * other) if starts else 0.0
        return starts, settings, windows, total, first, other

    def confirmation_starts(knobs: tuple[KnobCount, ...]) -> int:
        """Only the cap searched: the first start confirms it on fresh rounds (in_start.py),
        which FIRST_START_ROUNDS more rounds of that start stand for."""
        if not inputs.confirm:
            return 0
        return CONFIRMATION_STARTS if any(k.restart for k in knobs) else 0

    def screen_s(total: float, other: float) -> float:
        """The screen with its confirmation: no overlay is written unconfirmed, so knobs
        are dropped until both fit."""
        return total

    knobs = tuple(inputs.knobs)
    dropped: list[Dropped] = []
    starts, settings, windows, total, first, other = cost(knobs)
    while screen_s(total, other) > inputs.budget_s and len(knobs) > 1:
        last, knobs = knobs[-1], knobs[:-1]
        smaller = cost(knobs)
        dropped.append(Dropped(last.name, starts - smaller[0], total - smaller[3]))
        starts, settings, windows, total, first, other = smaller
    live = tuple(k for k in inputs.knobs if not k.restart)
    live_only = False
    if total > inputs.budget_s and live and any(k.restart for k in knobs):
        alone = cost(live)
        if alone[3] <= inputs.budget_s:  # the answer: the live knob alone, confirmed in-start
            dropped += [Dropped(k.name, starts - alone[0], total - alone[3])
                        for k in knobs if k.restart]  # fmt: skip
            knobs, live_only = live, True
            starts, settings, windows, total, first, other = alone
    fitting = () if total <= inputs.budget_s or not answer else _what_fits(inputs, knobs, total)
    return Estimate(
        starts=starts,
        settings=settings,
        windows=windows,
        start_s=start_s,
        window_s=window_s,
        total_s=total,
        budget_s=inputs.budget_s,
        start_basis=basis,
        first_start_s=first,
        other_start_s=other,
        parts=per_start(inputs.repeats, knobs),
        dropped=tuple(dropped),
        warnings=tuple(warnings),
        kept=tuple(k.name for k in knobs),
        confirmation_starts=confirmation_starts(knobs),
        live_only=live_only,
        power=plan_power(
            live=any(not k.restart for k in knobs),
            restart=any(k.restart for k in knobs),
            pairs=max(FIRST_START_ROUNDS, inputs.repeats),
            looks=inputs.max_repeats,
            pair_spread=inputs.pair_spread,
            start_spread=inputs.start_spread,
            min_effect=inputs.min_effect,
            confidence=inputs.confidence,
        )
        if answer
        else (),  # fmt: skip
        fitting=fitting,
    )


def _what_fits(inputs: EstimateInputs, knobs, total: float) -> tuple[str, ...]:
    """The budget that fits these knobs, and the longest window (in tenths of a second,
    at least one second) that would fit the budget."""
    said = [f"a budget of {_clock(total)} fits it (--budget {math.ceil(total)})"]

    def fits(tenths: int) -> bool:
        shorter = replace(inputs, knobs=knobs, window_s=tenths / 10, measured_window_s=None,
                          budget_s=math.inf)  # fmt: skip
        return estimate(shorter, answer=False).total_s <= inputs.budget_s

    low, high = 10, int((inputs.measured_window_s or inputs.window_s) * 10) - 1
    if high >= low and fits(low):
        while low < high:  # the cost grows with the window: the longest that fits
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(middle) else (low, middle - 1)
        said.append(f"or windows of {low / 10:g} s (--window {low / 10:g}), wider apart")
    return tuple(said)


def with_measurements(inputs: EstimateInputs, starts: list[float], windows: list[float],
                      done_starts: int, done_settings: int) -> EstimateInputs:  # fmt: skip
    """The inputs with a resumed run's figures: its mean start and window replace the
    estimates, and what it measured is not counted again."""
    return replace(
        inputs,
        measured_start_s=sum(starts) / len(starts) if starts else inputs.measured_start_s,
        measured_window_s=sum(windows) / len(windows) if windows else inputs.measured_window_s,
        done_starts=done_starts,
        done_settings=done_settings,
    )


def _fine(seconds: float) -> str:
    """Seconds as they are when under a minute (0.5 s stays 0.5 s), else a clock."""
    return f"{seconds:.3g} s" if seconds < 60 else _clock(seconds)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    if hours:
        return f"{hours} h {rest // 60:02d} min"
    return f"{rest // 60} min {rest % 60:02d} s"


# The plan's way of printing a duration, for what renders its figures elsewhere (the docs).
clock = _clock
