"""The real target's figures for the tune's cost model (glm5svc/tune/estimate.py): GLM-5-NVFP4
on 8x RTX PRO 6000 Blackwell (SM120) in a Proxmox container. One place for them:
bench/tune_plan.py prints the plan they give, and glm5svc/doc_figures.py renders every
time and size figure the docs quote from them (docs/operations.md, docs/performance-tune.md,
docs/tuning.md), so no page types a figure of its own.

What is assumed, not measured here (nothing here has the target): the weights' size
(GLM-5-NVFP4's safetensors, about 430 GB), the disk's read speed (2 GB/s: measure yours,
`glm5svc tune run --plan` does with a short read), FlashInfer's MoE autotune without its
cache file (the estimate's AUTOTUNE_COLD_S).
"""

from __future__ import annotations

from dataclasses import replace

from glm5svc.config import Config
from glm5svc.tune.estimate import GB, GIB, EstimateInputs, KnobCount
from glm5svc.tune.settings import SearchSettings

GLM5_WEIGHTS_BYTES = 430 * 10**9  # GLM-5-NVFP4's checkpoint, about
TARGET_DISK_READ_BPS = 2 * GB  # an assumption: measure yours
# The container's memory limit as the host play sets it by default
# (glm5_host_lxc_resources_memory_mb: 262144 MiB; tests/common/test_doc_figures.py checks it).
CONTAINER_MEMORY_BYTES = 256 * GIB
# glm5svc's space for GLM-5 on sm120 (glm5svc/data/tune-space.yaml), in its order, at the
# tune's concurrency of 256: the cap's values at or above it are one (64, and 256+ alike).
TARGET_KNOBS = (
    KnobCount("tuning.max_running_requests", 2, restart=False),
    KnobCount("tuning.cuda_graph", 2),
    KnobCount("tuning.moe_runner_backend", 3),
    KnobCount("tuning.attention_backend", 2),
    KnobCount("tuning.chunked_prefill_size", 3),
    KnobCount("tuning.mem_fraction_static", 3),
)


def target_inputs(budget_s: float) -> EstimateInputs:
    """The tune of the real target with the default configuration and search settings, the
    container's default memory limit (no page cache between starts), autotune uncached."""
    bench = Config().benchmark
    settings = SearchSettings()
    return EstimateInputs(
        knobs=TARGET_KNOBS,
        budget_s=budget_s,
        window_s=bench.window_s,
        repeats=settings.min_repeats,
        weights_bytes=GLM5_WEIGHTS_BYTES,
        disk_read_bps=TARGET_DISK_READ_BPS,
        memory_limit_bytes=CONTAINER_MEMORY_BYTES,
        moe_autotune=True,
        settle_s=settings.settle_s,
        warmup_max_s=bench.warmup_max_s,
    )


def with_cached_weights(inputs: EstimateInputs) -> EstimateInputs:
    """The same with no memory limit in the way: the weights stay in the page cache."""
    return replace(inputs, memory_limit_bytes=None)
