"""The tune's estimate, a pure function of its inputs: one cost model for every start (to
READY, the warm-up, rounds of the live values with their settle, the stop), the first
start's deciding rounds and the winner's confirming start; what a budget that is too small
drops (the least influential knobs, the space's order, and only when the screen itself
does not fit); the memory advice; a stand-in engine never planned with sglang's figures;
and a resumed run's measured figures in place of the estimates."""

from __future__ import annotations

import math
import re

import pytest

from glm5svc.tune.decision import FUTILE_AFTER
from glm5svc.tune.estimate import (
    AUTOTUNE_COLD_S,
    CONFIRMATION_STARTS,
    ENGINE_HOST_MEMORY_BYTES,
    FIRST_START_ROUNDS,
    GIB,
    STAND_IN_START_S,
    STOP_S,
    WARMUP_WINDOWS,
    EstimateInputs,
    KnobCount,
    estimate,
    first_pass,
    with_measurements,
)

# glm5svc's space for GLM-5 on sm120 (glm5svc/data/tune-space.yaml), in its order.
GLM5_SPACE = (
    KnobCount("tuning.max_running_requests", 4),
    KnobCount("tuning.cuda_graph", 2),
    KnobCount("tuning.moe_runner_backend", 3),
    KnobCount("tuning.attention_backend", 2),
    KnobCount("tuning.chunked_prefill_size", 3),
    KnobCount("tuning.mem_fraction_static", 3),
)
GLM5 = EstimateInputs(
    knobs=GLM5_SPACE,
    budget_s=4 * 3600,
    window_s=300,
    repeats=3,
    weights_bytes=430 * 10**9,
    disk_read_bps=3e9,
    memory_limit_bytes=256 * GIB,
    moe_autotune=True,
)
LIVE_CAP = KnobCount("tuning.max_running_requests", 4, restart=False)


def with_(inputs: EstimateInputs, **changes) -> EstimateInputs:
    return EstimateInputs(**{**inputs.__dict__, **changes})


def seconds_of(clock: str) -> int:
    """A printed clock (`45 s`, `3 min 01 s`, `2 h 05 min`) back in seconds."""
    found = re.fullmatch(r"(?:(\d+) h )?(?:(\d+) min)?(?: ?(\d+) s)?", clock.strip())
    assert found and any(found.groups()), clock
    hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return hours * 3600 + minutes * 60 + seconds


def to_the_printed(seconds: int) -> int:
    """Seconds as precise as the plan prints them: an hour or more, to the minute."""
    return seconds if seconds < 3600 else seconds // 60 * 60


HEAD = re.compile(
    r"plan: (\d+) engine start\(s\) .*: the first (.+?)(?: \+ (\d+) x (.+?))? = (.+?); "
    r"the budget is (.+)$"
)


def test_starts_and_windows_of_the_first_pass():
    # The start, one more of the incumbent, FUTILE_AFTER starts per restart value.
    assert first_pass(GLM5_SPACE) == (2 + 11 * FUTILE_AFTER, 12)
    live_cap = (LIVE_CAP, *GLM5_SPACE[1:])
    # the cap's values share the start's engine
    assert first_pass(live_cap) == (2 + 8 * FUTILE_AFTER, 12)
    assert first_pass((LIVE_CAP,)) == (1, 4)  # live values only: one start
    small = EstimateInputs(knobs=GLM5_SPACE[:2], budget_s=10**6, window_s=10, repeats=3,
                           measured_start_s=100)  # fmt: skip
    found = estimate(small)
    # The screen's starts and the confirmation's; one live value each.
    starts, settings = 2 + 4 * FUTILE_AFTER + CONFIRMATION_STARTS, 5
    warmup = WARMUP_WINDOWS * 10
    first = 100 + warmup + FIRST_START_ROUNDS * 1 * 10 + STOP_S
    other = 100 + warmup + 3 * 1 * 10 + STOP_S
    assert (found.starts, found.settings) == (starts, settings)
    assert found.windows == FIRST_START_ROUNDS + (starts - 1) * 3
    assert found.first_start_s == pytest.approx(first)
    assert found.other_start_s == pytest.approx(other)
    assert found.total_s == pytest.approx(first + (starts - 1) * other)
    assert dict(found.parts) == pytest.approx(
        {
            "to READY": 100,
            "warm-up": warmup,
            "3 round(s) x 1 value(s) x (window + settle)": 30,
            "stop": STOP_S,
        }  # fmt: skip
    )
    assert found.fits and not found.dropped


def test_live_values_share_a_start_each_with_its_settle_and_the_warmup_is_bounded():
    inputs = EstimateInputs(knobs=(LIVE_CAP, GLM5_SPACE[1]), budget_s=10**6, window_s=10,
                            repeats=2, measured_start_s=100, settle_s=4,
                            warmup_max_s=30)  # fmt: skip
    found = estimate(inputs)
    starts = 2 + FUTILE_AFTER + CONFIRMATION_STARTS
    assert (found.starts, found.settings) == (starts, 5)
    rounds_first = max(FIRST_START_ROUNDS, 2)
    first = 100 + 30 + rounds_first * 4 * (10 + 4) + STOP_S  # warm-up: min(6 x 10, 30)
    other = 100 + 30 + 2 * 4 * (10 + 4) + STOP_S
    assert found.first_start_s == pytest.approx(first)
    assert found.other_start_s == pytest.approx(other)
    assert found.total_s == pytest.approx(first + (starts - 1) * other)
    assert found.windows == rounds_first * 4 + (starts - 1) * 2 * 4
    # More repeats than the first start's deciding rounds: every start measures them.
    many = estimate(with_(inputs, repeats=FIRST_START_ROUNDS + 2))
    assert many.first_start_s == pytest.approx(many.other_start_s)
    # Without a bound the warm-up is its windows.
    unbounded = estimate(with_(inputs, warmup_max_s=None))
    assert dict(unbounded.parts)["warm-up"] == WARMUP_WINDOWS * 10


def test_a_budget_too_small_drops_the_last_knobs_and_says_why():
    full = estimate(with_(GLM5, budget_s=10**7))
    assert full.fits and not full.dropped
    found = estimate(GLM5)
    assert found.dropped
    assert [d.knob for d in found.dropped] == [k.name for k in GLM5_SPACE[len(found.kept) :]][::-1]
    assert found.kept[0] == "tuning.max_running_requests"  # the most influential stays
    assert all(d.starts > 0 and d.seconds > 0 for d in found.dropped)
    # What was dropped is what the plan lost: the totals add up.
    assert sum(d.starts for d in found.dropped) == full.starts - found.starts
    assert sum(d.seconds for d in found.dropped) == pytest.approx(full.total_s - found.total_s)
    # Knobs are dropped until the screen and its confirmation fit (nothing unconfirmed is
    # written), or one knob is left.
    assert found.total_s <= GLM5.budget_s or found.kept == ("tuning.max_running_requests",)
    text = "\n".join(found.lines())
    assert "least influential" in text and found.dropped[0].knob in text
    hopeless = estimate(with_(GLM5, budget_s=60))
    assert not hopeless.fits and "--budget" in hopeless.lines()[-2]
    assert f"--budget {math.ceil(hopeless.total_s)}" in hopeless.lines()[-2]
    assert hopeless.kept == ("tuning.max_running_requests",)


def test_knobs_are_dropped_until_the_confirmation_fits_too():
    full = estimate(with_(GLM5, budget_s=10**7))
    # Exactly the screen and its confirmation fit; a second less drops the last knob.
    assert not estimate(with_(GLM5, budget_s=full.total_s)).dropped
    short = estimate(with_(GLM5, budget_s=full.total_s - 1))
    assert [d.knob for d in short.dropped][0] == GLM5_SPACE[-1].name
    # One knob left whose screen fits but not its confirmation: said, with what it costs.
    one = estimate(with_(GLM5, knobs=GLM5_SPACE[:1], budget_s=10**7))
    between = estimate(with_(GLM5, knobs=GLM5_SPACE[:1],
                             budget_s=one.total_s - one.other_start_s))  # fmt: skip
    assert not between.fits
    assert (
        "its confirmation" in between.lines()[-2] and "no change is written" in between.lines()[-2]
    )


def test_memory_below_the_weights_is_said_with_the_memory_that_would_keep_them():
    found = estimate(GLM5)
    warning = next(w for w in found.warnings if "memory limit" in w)
    needed = -(-(430 * 10**9 + ENGINE_HOST_MEMORY_BYTES) // GIB)
    assert "256 GiB" in warning and f"{needed:,} GiB" in warning
    assert "disk at 3.00 GB/s" in found.start_basis
    roomy = estimate(with_(GLM5, memory_limit_bytes=1024 * GIB))
    assert not roomy.warnings and "page cache" in roomy.start_basis
    assert roomy.start_s < found.start_s


def test_a_stand_in_engine_is_never_planned_with_sglang_figures():
    # The figures of GLM-5 on the target (weights from disk, MoE autotune), but the engine
    # is a stand-in (server.command): its start is a placeholder until one is measured.
    stand_in = with_(GLM5, stand_in="a stand-in engine, server.command engine.py")
    found = estimate(stand_in)
    assert found.start_s == STAND_IN_START_S
    assert dict(found.parts)["to READY"] == STAND_IN_START_S
    for sglang_figure in ("graphs", "autotune", "weights", "process start"):
        assert sglang_figure not in found.start_basis.lower(), found.start_basis
    assert "server.command engine.py" in found.start_basis
    assert "graphs" in estimate(GLM5).start_basis  # the real target's are its parts
    measured = estimate(with_measurements(stand_in, starts=[7.0], windows=[300.0],
                                          done_starts=1, done_settings=1))  # fmt: skip
    assert measured.start_s == 7.0 and "as measured" in measured.start_basis


@pytest.mark.parametrize(
    "inputs",
    [
        GLM5,
        with_(GLM5, budget_s=10**7),
        with_(GLM5, window_s=7.3, settle_s=3.3, warmup_max_s=40, budget_s=10**7),
        with_(
            GLM5,
            knobs=(LIVE_CAP, *GLM5_SPACE[1:3]),
            window_s=5,
            settle_s=4,
            measured_start_s=80.4,
            repeats=2,
            warmup_max_s=30,
        ),  # fmt: skip
        with_(GLM5, stand_in="a stand-in engine", window_s=0.5, settle_s=0.25, repeats=2),
        with_measurements(
            with_(GLM5, window_s=10.6, settle_s=1.7, budget_s=10**7),
            starts=[61.3, 70.2],
            windows=[10.4],
            done_starts=2,
            done_settings=2,
        ),  # fmt: skip
    ],
    ids=["glm5-trimmed", "glm5", "fractions", "live-cap", "stand-in", "resumed"],
)
def test_the_plan_head_line_adds_up_in_its_printed_clocks(inputs):
    found = estimate(inputs)
    head = found.lines()[0]
    match = HEAD.match(head)
    assert match, head
    starts, first, others, other, total, budget = match.groups()
    assert int(starts) == found.starts
    assert int(others or 0) == found.starts - 1
    printed_first, printed_other = seconds_of(first), seconds_of(other) if other else 0
    assert max(printed_first, printed_other) < 3600  # a start is printed to the second
    added = printed_first + int(others or 0) * printed_other
    assert seconds_of(total) == to_the_printed(added), head
    assert seconds_of(budget) == to_the_printed(int(inputs.budget_s))


def test_measured_figures_replace_the_estimates_and_what_is_done_is_not_counted_again():
    resumed = with_measurements(GLM5, starts=[400.0, 420.0], windows=[290.0, 310.0],
                                done_starts=2, done_settings=2)  # fmt: skip
    found = estimate(resumed)
    assert found.start_s == 410.0 and found.window_s == 300.0
    assert dict(found.parts)["to READY"] == 410.0
    assert "as measured" in found.start_basis
    fresh = estimate(with_(GLM5, budget_s=10**7))
    later = estimate(with_(resumed, budget_s=10**7))
    assert later.starts == fresh.starts - 2 and later.settings == fresh.settings - 2
    # The deciding rounds were the first start's, measured already: the next has repeats.
    assert later.first_start_s == pytest.approx(later.other_start_s)
    assert fresh.first_start_s > fresh.other_start_s
    cached = estimate(with_(GLM5, autotune_cached=True))
    assert cached.start_s == pytest.approx(estimate(GLM5).start_s - AUTOTUNE_COLD_S)
    everything = estimate(with_measurements(GLM5, starts=[400.0], windows=[300.0],
                                            done_starts=99, done_settings=99))  # fmt: skip
    assert (everything.starts, everything.total_s) == (0, 0)
    assert everything.lines()[0].startswith("plan: nothing left to measure")


def test_a_restart_knob_that_does_not_fit_leaves_the_live_knob_confirmed_in_its_start():
    # The GPU lab's space from `before`: the cap live, CUDA graphs a restart.
    cap = KnobCount("tuning.max_running_requests", 2, restart=False)
    lab = EstimateInputs(knobs=(cap, KnobCount("tuning.cuda_graph", 2)), budget_s=555,
                         window_s=10, repeats=2, settle_s=4, warmup_max_s=20, max_repeats=8,
                         measured_start_s=130)  # fmt: skip
    found = estimate(lab)
    assert found.fits and found.kept == ("tuning.max_running_requests",)
    # One start: the screen's rounds and the confirmation's fresh ones, no confirming start.
    assert found.starts == 1 and found.confirmation_starts == 0
    assert found.first_start_s == pytest.approx(
        130 + 20 + 2 * FIRST_START_ROUNDS * 2 * (10 + 4) + STOP_S
    )
    text = "\n".join(found.lines())
    assert "a live +10% effect is called better" in text
    # A budget it cannot fit is answered with the budget that fits, and a shorter window.
    short = estimate(with_(lab, budget_s=found.total_s - 60))
    answer = short.lines()[-1] if not short.warnings else short.lines()[-2]
    assert not short.fits and f"--budget {math.ceil(short.total_s)}" in answer
    window = float(answer.split("--window ")[1].split(")")[0])
    assert window < 10 and estimate(with_(lab, window_s=window)).total_s <= short.budget_s
    assert estimate(with_(lab, window_s=window + 0.1)).total_s > short.budget_s


def test_the_plan_s_power_follows_the_spreads():
    lab = EstimateInputs(knobs=(LIVE_CAP, KnobCount("tuning.cuda_graph", 2)), budget_s=10**6,
                         window_s=10, repeats=2)  # fmt: skip
    quiet, noisy = (estimate(with_(lab, pair_spread=s, start_spread=s)) for s in (0.02, 0.20))

    def shares(found):
        return [int(x) for line in found.power for x in re.findall(r"(\d+)% of the time", line)]

    assert shares(quiet)[0] > shares(noisy)[0]
    assert all("restart" in line for line in quiet.power[1:])
    assert quiet.to_dict()["power"] == list(quiet.power)
