"""The tune's estimate, a pure function of its inputs: the first pass's starts and windows,
what a budget that is too small drops (the least influential knobs, the space's order), the
memory advice, and a resumed run's measured figures in place of the estimates."""

from __future__ import annotations

from glm5svc.tune.estimate import (
    ENGINE_HOST_MEMORY_BYTES,
    GIB,
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


def test_starts_and_windows_of_the_first_pass():
    assert first_pass(GLM5_SPACE) == (12, 12)
    live_cap = (KnobCount("tuning.max_running_requests", 4, restart=False), *GLM5_SPACE[1:])
    assert first_pass(live_cap) == (9, 12)  # the cap's values share the start's engine
    small = EstimateInputs(knobs=GLM5_SPACE[:2], budget_s=10**6, window_s=10, repeats=3,
                           measured_start_s=100)  # fmt: skip
    found = estimate(small)
    starts, settings = 5, 5
    windows = starts * WARMUP_WINDOWS + settings * 3
    assert (found.starts, found.settings, found.windows) == (starts, settings, windows)
    assert found.total_s == starts * (100 + STOP_S) + windows * 10
    assert found.fits and not found.dropped


def test_a_budget_too_small_drops_the_last_knobs_and_says_why():
    found = estimate(GLM5)
    assert not estimate(EstimateInputs(**{**GLM5.__dict__, "budget_s": 10**7})).dropped
    assert found.fits
    assert [d.knob for d in found.dropped] == [k.name for k in GLM5_SPACE[len(found.kept) :]][::-1]
    assert found.kept[0] == "tuning.max_running_requests"  # the most influential stays
    assert all(d.starts > 0 and d.seconds > 0 for d in found.dropped)
    text = "\n".join(found.lines())
    assert "least influential" in text and found.dropped[0].knob in text
    hopeless = estimate(EstimateInputs(**{**GLM5.__dict__, "budget_s": 60}))
    assert not hopeless.fits and "raise --budget" in hopeless.lines()[-2]


def test_memory_below_the_weights_is_said_with_the_memory_that_would_keep_them():
    found = estimate(GLM5)
    warning = next(w for w in found.warnings if "memory limit" in w)
    needed = -(-(430 * 10**9 + ENGINE_HOST_MEMORY_BYTES) // GIB)
    assert "256 GiB" in warning and f"{needed:,} GiB" in warning
    assert "disk at 3.00 GB/s" in found.start_basis
    roomy = estimate(EstimateInputs(**{**GLM5.__dict__, "memory_limit_bytes": 1024 * GIB}))
    assert not roomy.warnings and "page cache" in roomy.start_basis
    assert roomy.start_s < found.start_s


def test_measured_figures_replace_the_estimates_and_what_is_done_is_not_counted_again():
    resumed = with_measurements(GLM5, starts=[400.0, 420.0], windows=[290.0, 310.0],
                                done_starts=2, done_settings=2)  # fmt: skip
    found = estimate(resumed)
    assert found.start_s == 410.0 and found.window_s == 300.0
    assert "as measured" in found.start_basis
    fresh = estimate(EstimateInputs(**{**GLM5.__dict__, "budget_s": 10**7}))
    later = estimate(EstimateInputs(**{**resumed.__dict__, "budget_s": 10**7}))
    assert later.starts == fresh.starts - 2 and later.settings == fresh.settings - 2
    cached = estimate(EstimateInputs(**{**GLM5.__dict__, "autotune_cached": True}))
    assert cached.start_s < estimate(GLM5).start_s
