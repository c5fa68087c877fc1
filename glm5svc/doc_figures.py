"""Every time and size figure the docs quote, computed by the code that computes it for the
commands: the weights' size and the memory limit that keeps them cached (the tune's cost
model, glm5svc/tune/estimate.py), the length of a start, a tune's plan and the night's split
of its budget (glm5svc/night/plan.py), all for the real target's figures
(glm5svc/tune/reference.py).

A page quotes one as `<!-- figure:NAME -->...<!-- /figure -->`; `python -m glm5svc.docgen`
writes the figure between the markers and its --check (tests/common/test_docgen.py) fails
while a page holds another text. A marker naming no figure is an error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from glm5svc.commands.night import DEFAULT_VERDICT_STARTS, DEFAULT_WINDOWS, NIGHT_BUDGET_S
from glm5svc.config import Config
from glm5svc.night.plan import bench_estimate_s, split
from glm5svc.night.plan import clock as night_clock
from glm5svc.tune import estimate as model
from glm5svc.tune.decision import FUTILE_AFTER
from glm5svc.tune.estimate import GB, GIB, Estimate, cache_limit_gib, estimate
from glm5svc.tune.estimate import clock as tune_clock
from glm5svc.tune.reference import (
    CONTAINER_MEMORY_BYTES,
    GLM5_WEIGHTS_BYTES,
    TARGET_DISK_READ_BPS,
    target_inputs,
    with_cached_weights,
)
from glm5svc.tune.settings import SearchSettings
from glm5svc.unit_file import TUNE_TEMPLATE

MARKER = re.compile(r"(<!-- figure:([a-z0-9_]+) -->)(.*?)(<!-- /figure -->)", re.S)


class UnknownFigure(ValueError):
    """A page's marker names no figure."""


@functools.cache
def _night() -> dict[str, Any]:
    """The night's split of its default budget on the real target, as `night plan` makes it."""
    bench_s = bench_estimate_s(Config(), DEFAULT_WINDOWS)

    def tune_plan_for(budget_s: float) -> dict[str, Any]:
        return estimate(target_inputs(budget_s)).to_dict()

    return split(NIGHT_BUDGET_S, bench_s, tune_plan_for, DEFAULT_VERDICT_STARTS)


def _count(n: int, what: str) -> str:
    """2 starts, 1 start."""
    return f"{n} {what}" + ("" if n == 1 else "s")


def _start(plan: Estimate) -> str:
    """A later start, part by part, as the plan counts it."""
    parts = ", ".join(f"{what} {tune_clock(seconds)}" for what, seconds in plan.parts)
    return f"{tune_clock(plan.other_start_s)} ({parts})"


def _plan_sum(plan: Estimate) -> str:
    """The sum on the plan's first line, as `tune run --plan` prints it."""
    head = plan.lines()[0]
    return "the first " + head.split(": the first ", 1)[1].split("; the budget", 1)[0]


def _unit_setting(template: Path, key: str) -> str:
    """A directive's value in a unit template (`TimeoutStopSec=45min` -> `45min`)."""
    for line in template.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip()
    raise UnknownFigure(f"{template.name} has no {key}=")


def _dropped(plan: Estimate) -> str:
    if not plan.dropped:
        return "nothing dropped"
    names = ", ".join(d.knob.removeprefix("tuning.") for d in plan.dropped)
    return f"{names} dropped"


def _tune_table() -> str:
    """The tune's plan for the real target at the default budget, three ways of holding the
    weights and the cap."""
    budget = SearchSettings().budget_s
    live = target_inputs(budget)
    cases = (
        ("every knob a restart, the cap too",
         replace(live, knobs=(replace(live.knobs[0], restart=True), *live.knobs[1:]))),
        ("the cap as a live knob (the default)", live),
        ("the cap live, the weights in the page cache, autotune cached",
         replace(with_cached_weights(live), autotune_cached=True)),
    )  # fmt: skip
    rows = [
        f"| case | a start (to READY) | the first pass over every knob | what fits "
        f"{tune_clock(budget)} |",
        "|---|---|---|---|",
    ]
    for name, inputs in cases:
        whole = estimate(replace(inputs, budget_s=float("inf")))
        plan = estimate(inputs)
        over = "" if plan.fits else "; even that is over the budget"
        rows.append(
            f"| {name} | {tune_clock(plan.start_s)} | {_count(whole.starts, 'start')}, "
            f"{_count(whole.windows, 'window')}: {tune_clock(whole.total_s)} | "
            f"{_count(plan.starts, 'start')}, {_count(plan.windows, 'window')} "
            f"({tune_clock(plan.total_s)}): {_dropped(plan)}{over} |"
        )
    return "\n".join(rows)


def figures() -> dict[str, Callable[[], str]]:
    """Each figure by the name a page's marker gives."""
    night = _night
    target = target_inputs(NIGHT_BUDGET_S)
    config = Config()
    return {
        # The cost model's own figures (glm5svc/tune/estimate.py), as docs/tuning.md gives them.
        "stop_s": lambda: tune_clock(model.STOP_S),
        "process_start_s": lambda: tune_clock(model.PROCESS_START_S),
        "graphs_s": lambda: tune_clock(model.GRAPHS_WARM_S),
        "autotune_s": lambda: tune_clock(model.AUTOTUNE_COLD_S),
        "stand_in_start_s": lambda: tune_clock(model.STAND_IN_START_S),
        "first_start_rounds": lambda: str(model.FIRST_START_ROUNDS),
        "warmup_windows": lambda: str(model.WARMUP_WINDOWS),
        "futile_after": lambda: str(FUTILE_AFTER),
        "confirmation_starts": lambda: str(model.CONFIRMATION_STARTS),
        "window_s_default": lambda: f"{config.benchmark.window_s:g} s",
        "tune_unit_stop_timeout": lambda: (
            f"`TimeoutStopSec={_unit_setting(TUNE_TEMPLATE, 'TimeoutStopSec')}`"
        ),
        "target_plan_sum": lambda: f"`{_plan_sum(estimate(target))}`",
        "pct_set_memory": lambda: (
            f"`pct set <id> --memory {cache_limit_gib(GLM5_WEIGHTS_BYTES) * 1024}`"
        ),
        "weights_gb": lambda: f"{GLM5_WEIGHTS_BYTES / GB:,.0f} GB",
        "weights_gib": lambda: f"{GLM5_WEIGHTS_BYTES / GIB:,.0f} GiB",
        "cache_limit_gib": lambda: f"{cache_limit_gib(GLM5_WEIGHTS_BYTES):,} GiB",
        "container_memory_gib": lambda: f"{CONTAINER_MEMORY_BYTES / GIB:,.0f} GiB",
        "disk_read": lambda: f"{TARGET_DISK_READ_BPS / GB:g} GB/s",
        "target_start_basis": lambda: estimate(target).start_basis,
        "target_start": lambda: _start(estimate(target)),
        "target_first_start": lambda: tune_clock(estimate(target).first_start_s),
        "target_cached_saves": lambda: tune_clock(
            estimate(target).start_s - estimate(with_cached_weights(target)).start_s
        ),
        "target_tune_plan": lambda: (
            f"{_count(estimate(target).starts, 'engine start')} in "
            f"{tune_clock(estimate(target).total_s)}"
        ),
        "target_tune_kept": lambda: ", ".join(
            f"`{k.removeprefix('tuning.')}`" for k in estimate(target).kept
        ),
        "target_tune_dropped": lambda: (
            ", ".join(
                f"`{d.knob.removeprefix('tuning.')}` ({_count(d.starts, 'start')}, "
                f"{tune_clock(d.seconds)})"
                for d in estimate(target).dropped
            )
            or "nothing"
        ),
        "night_budget": lambda: night_clock(NIGHT_BUDGET_S),
        "night_bench": lambda: (
            f"about {night_clock(night()['bench_s'])} (up to "
            f"{night_clock(config.benchmark.warmup_max_s)} of warm-up, {DEFAULT_WINDOWS} "
            f"windows of {night_clock(config.benchmark.window_s)} with their ramps)"
        ),
        "night_restart": lambda: night_clock(night()["restart_s"]),
        "night_tune_budget": lambda: night_clock(night()["tune_budget_s"]),
        "night_tune_plan": lambda: (
            f"{_count(night()['tune']['starts'], 'engine start')} in "
            f"{night_clock(night()['tune']['total_s'])}"
        ),
        "night_dropped": lambda: (
            ", ".join(f"`{d['knob'].removeprefix('tuning.')}`" for d in night()["dropped"])
            or "nothing"
        ),
        "target_tune_power": lambda: "; ".join(estimate(target).power),
        "night_tune_power": lambda: "; ".join(night()["tune"]["power"]),
        "tune_table": _tune_table,
    }


def render(text: str) -> str:
    """The page with every figure between its markers made anew."""
    known = figures()
    cache: dict[str, str] = {}

    def filled(match: re.Match) -> str:
        name = match.group(2)
        if name not in known:
            raise UnknownFigure(
                f"<!-- figure:{name} -->: no such figure in glm5svc/doc_figures.py; "
                f"known: {', '.join(sorted(known))}"
            )
        if name not in cache:
            cache[name] = known[name]()
        body = cache[name]
        if "\n" in body:  # a block: on lines of its own between the markers
            body = f"\n{body}\n"
        return f"{match.group(1)}{body}{match.group(4)}"

    return MARKER.sub(filled, text)


def names_in(text: str) -> list[str]:
    return [match.group(2) for match in MARKER.finditer(text)]
