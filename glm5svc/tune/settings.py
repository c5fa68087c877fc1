"""The tune's settings, declared once: each field's type, bounds, default and help are the
command line's (`glm5svc tune run`'s options are built from these models through
glm5svc/cli_options.py) and the search's (glm5svc/tune/search.py reads SearchSettings).
A resumed tune reads them back from its tune.json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from glm5svc.cli_options import Option
from glm5svc.config import ENGINE_READ_INTERVAL_S, MAX_COUNT, MAX_SECONDS, MAX_WINDOW_S
from glm5svc.tune.start_model import PAIR_SPREAD_PRIOR, PRIOR_START_SPREAD
from glm5svc.tune.stats import CONFIDENCE_LEVELS

WORKLOAD, LIMITS, SEARCH = "workload", "limits", "search"
MAX_REPEATS = 1000
# Given again on --resume, these replace the saved ones; the rest is what the study measures.
RESUME_OVERRIDES = ("budget_s", "max_trials", "trial_timeout_s")

Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
WindowSeconds = Annotated[float, Field(ge=ENGINE_READ_INTERVAL_S, le=MAX_WINDOW_S)]
Share = Annotated[float, Field(ge=0, lt=1)]
Repeats = Annotated[int, Field(ge=2, le=MAX_REPEATS)]  # one run has no interval
LatencyMs = Annotated[float, Field(gt=0, le=MAX_SECONDS * 1000)]


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


class SearchSettings(_Settings):
    """How the search spends its time and decides."""

    budget_s: Annotated[Seconds, Option("--budget", SEARCH, duration=True)] = Field(
        4 * 3600.0,
        description="time for the whole tune, a bound: no trial starts that cannot finish, "
        "and the running one is cut at the deadline",
    )
    max_trials: Annotated[Count | None, Option("--max-trials", SEARCH)] = Field(
        None, description="at most this many trials: engine starts, and candidates refused"
    )
    trial_timeout_s: Annotated[Seconds, Option("--trial-timeout", SEARCH, duration=True)] = Field(
        3600.0, description="time one trial may take"
    )
    min_repeats: Annotated[Repeats, Option("--min-repeats", SEARCH)] = Field(
        2,
        description="measured rounds per engine start (a round: one window of each live "
        "value; the decider looks after every two, an A B B A block), at least",
    )
    max_repeats: Annotated[Repeats, Option("--max-repeats", SEARCH)] = Field(
        16,
        description="measured rounds per engine start, at most: more than --min-repeats "
        "only while a live value is undecided against the best's in the same start",
    )
    confidence: Annotated[
        float,
        Field(gt=0, lt=1),
        Option("--confidence", SEARCH, metavar="LEVEL", choices=CONFIDENCE_LEVELS),
    ] = Field(0.95, description="confidence of the intervals")
    prune_below: Annotated[Share, Option("--prune-below", SEARCH, metavar="SHARE")] = Field(
        0.7,
        description="a first run under this share of the best's mean ends the trial, 0 never "
        "prunes",
    )
    min_effect: Annotated[Share, Option("--min-effect", SEARCH, metavar="SHARE")] = Field(
        0.03,
        description="a candidate wins only when the lower bound of its gain exceeds this "
        "(relative: 0.03 is 3 %)",
    )
    start_spread_prior: Annotated[
        float, Field(gt=0, lt=1), Option("--start-spread-prior", SEARCH, metavar="SHARE")
    ] = Field(
        PRIOR_START_SPREAD,
        description="the spread of throughput from engine start to engine start assumed "
        "until the tune's own replicated starts show theirs (relative; the default is what "
        "the H200 testbed showed): lower it only with starts of your machine measured",
    )
    pair_spread_prior: Annotated[
        float, Field(gt=0, lt=1), Option("--pair-spread-prior", SEARCH, metavar="SHARE")
    ] = Field(
        PAIR_SPREAD_PRIOR,
        description="the spread of one window pair's ratio (two live values, one window "
        "each) assumed beside the tune's own pairs, which replace it wherever they are "
        "wider (relative; the default is what the H100 testbed's 10 s windows showed)",
    )
    window_s: Annotated[WindowSeconds | None, Option("--window", SEARCH, duration=True)] = Field(
        None,
        description="length of one measurement window under the start's load (default: the "
        "configuration's benchmark.window_s)",
    )
    settle_s: Annotated[
        float, Field(ge=0, le=MAX_WINDOW_S), Option("--settle", SEARCH, duration=True)
    ] = Field(
        4.0,
        description="after a live value changes, the time left out before its window (the "
        "running requests adjust to the new cap)",
    )
    target_half_width: float = Field(
        0.05, gt=0, lt=1, description="the first trial repeats until its interval is this tight"
    )
    ttft_p99_ms: Annotated[LatencyMs | None, Option("--ttft-p99-ms", LIMITS, unit="ms",
                                                    metavar="MS")] = Field(
        None, description="time to first token, p99"
    )  # fmt: skip
    itl_p99_ms: Annotated[LatencyMs | None, Option("--itl-p99-ms", LIMITS, unit="ms",
                                                   metavar="MS")] = Field(
        None, description="inter-token latency, p99"
    )  # fmt: skip
    seed: Annotated[int, Field(ge=0, le=MAX_COUNT), Option("--seed", SEARCH)] = Field(
        0, description="the sampler's seed"
    )

    @model_validator(mode="after")
    def _repeats_in_order(self) -> SearchSettings:
        if self.max_repeats < self.min_repeats:
            raise ValueError(
                f"--max-repeats {self.max_repeats} is below --min-repeats {self.min_repeats}; "
                "raise --max-repeats or lower --min-repeats"
            )
        return self

    def resumed(self, saved: dict[str, Any]) -> SearchSettings:
        """A saved study's settings, with this run's budget and trial limits."""
        given = self.model_dump(include=set(RESUME_OVERRIDES))
        return SearchSettings.model_validate({**saved, **given})


class WorkloadOptions(_Settings):
    """What the objective is measured on; unset values come from the configuration."""

    concurrency: Annotated[Count, Option("--concurrency", WORKLOAD)] = Field(
        256, description="target concurrency"
    )
    input_len: Annotated[
        Count | None, Option("--input-len", WORKLOAD, config="benchmark.input_len")
    ] = Field(None, description="input tokens per prompt")
    output_len: Annotated[
        Count | None, Option("--output-len", WORKLOAD, config="benchmark.output_len")
    ] = Field(None, description="output tokens per request")
    length_ratio: Annotated[
        float, Field(gt=0, le=1), Option("--length-ratio", WORKLOAD, metavar="RATIO")
    ] = Field(
        0.5,
        description="each request's input and output lengths are drawn uniformly in "
        "[RATIO x length, length] (1: fixed lengths, whose requests move in waves)",
    )
    # `--request-file` (glm5svc/commands/tune.py adds it: a path, not a number).
    request_file: str | None = Field(
        None,
        description="a recorded workload instead of the fixed lengths (default: "
        "benchmark.request_file)",
    )

    def resolved(self, benchmark: Any) -> dict[str, Any]:
        """Every value, the unset ones from the configuration's benchmark section."""
        request_file = self.request_file or benchmark.request_file
        return {
            "concurrency": self.concurrency,
            "input_len": self.input_len or benchmark.input_len,
            "output_len": self.output_len or benchmark.output_len,
            "length_ratio": self.length_ratio,
            "request_file": str(Path(request_file).absolute()) if request_file else None,
            "objective": benchmark.objective,
        }


def window_problems(settings: SearchSettings, benchmark: Any) -> list[str]:
    """The steady window the trials use (--window, else benchmark.window_s) against the
    time one trial may take and, for --window, the configuration's warm-up bound (which
    the configuration itself checks against benchmark.window_s)."""
    window = settings.window_s or benchmark.window_s
    named = f"--window {window:g} s" if settings.window_s else f"benchmark.window_s ({window:g} s)"
    shorten = "shorten --window" if settings.window_s else "give a shorter --window"
    problems = []
    needed = settings.min_repeats * window
    if needed > settings.trial_timeout_s:
        problems.append(
            f"--min-repeats {settings.min_repeats} windows of {named} ({needed:g} s) do not fit "
            f"in --trial-timeout {settings.trial_timeout_s:g} s: no trial could measure them; "
            f"raise --trial-timeout to at least {needed:g} s, or {shorten} or lower "
            "--min-repeats"
        )
    warmup = benchmark.warmup_max_s
    if settings.window_s and 0 < warmup < 2 * window:
        problems.append(
            f"{named}: benchmark.warmup_max_s ({warmup:g} s) holds fewer than two such windows, "
            "so the warm-up could never see two agree; set benchmark.warmup_max_s to 0 (no "
            f"warm-up) or at least {2 * window:g}, or shorten --window"
        )
    return problems
