"""The failure-signature table against realistic log excerpts (from real reports)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm5svc.serve.diagnosis import SIGNATURES, diagnose, exit_status_for

EXCERPTS = {
    "grpc-port-out-of-range": [
        # sglang 0.5.11 on the H200 (tests/fixtures/real_engine/sglang-0.5.11-h200-tune-before)
        "ValueError: SGLANG_GRPC_PORT (70011) must be between 1 and 65535",
    ],
    "engine-port-in-use": [
        # uvicorn (sglang's HTTP server) and aiohttp when the port is taken
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
        "address already in use",
        "OSError: [Errno 98] Address already in use",
    ],
    "cuda-init-uvm-hmm": [
        "[64689.125237] nvidia-uvm: uvm_pmm_gpu.c:3176 devmem_alloc_pagemap[pid:92821] "
        "request_free_mem_region() err -34",
        "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
        "cu->cuInit(0) failed -> CUDA_ERROR_NOT_INITIALIZED: initialization error",
    ],
    "nsa-prefill-metadata": [
        "AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'",
    ],
    "allreduce-fusion-sm120": [
        "Exception: Capture cuda graph failed: No supported CUDA architectures found for major "
        "versions [9, 10].",
        "RuntimeError: TRT-LLM allreduce fusion kernels are only supported on SM90 and SM100",
    ],
    "nan-in-decode": [
        "[2026-01-10 10:01:02 TP0] Detected errors during sampling! NaN in the logits.",
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ],
    "cuda-oom": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
        "total capacity of 94.97 GiB of which 1.12 GiB is free.",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ],
    "nvml-version-mismatch": ["Failed to initialize NVML: Driver/library version mismatch"],
    "shared-experts-fusion": [
        "RuntimeError: The size of tensor a (3072) must match the size of tensor b (6144) at "
        "non-singleton dimension 1",
    ],
    "nccl-timeout": [
        "[rank3]:[E1129 21:40:02.123456 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=7168, "
        "NumelOut=7168, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.",
    ],
    "nccl-error": [
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:317, unhandled cuda error, NCCL version 2.27.3",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
    ],
    # sglang 0.5.11 on an H200, scheduler killed with kill -9 (tests/fixtures/real_engine/)
    "engine-child-killed": [
        "[2026-12-01 03:02:07] Subprocess scheduler_0 (pid=2157) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup...",
    ],
}


def test_every_signature_has_excerpts():
    assert {sig.id for sig in SIGNATURES} == set(EXCERPTS)


@pytest.mark.parametrize(
    ("signature", "line"), [(sig, line) for sig, lines in EXCERPTS.items() for line in lines]
)
def test_excerpt_is_diagnosed(signature, line):
    log = [
        "[2026-01-10 10:00:00 TP0] Load weight begin. avail mem=94.12 GB",
        line,
        "[2026-01-10 10:01:03] SIGQUIT received. signum=None, frame=None. It usually means one "
        "child failed.",
    ]
    found = diagnose(log)
    assert [d.signature.id for d in found][:1] == [signature]
    assert found[0].evidence == line.strip()
    rendered = found[0].render()
    assert "cause:" in rendered and "fix:" in rendered


def test_healthy_log_has_no_diagnosis():
    log = [
        "[2026-01-10 10:00:00] server_args=ServerArgs(enable_nan_detection=False, "
        "disable_shared_experts_fusion=True, nccl_port=None)",
        "Loading safetensors checkpoint shards:  45% Completed | 36/80 [01:02<01:16,  1.70s/it]",
        "[2026-01-10 10:05:00 TP0] Load weight end. type=GlmMoeDsaForCausalLM, "
        "dtype=torch.bfloat16, avail mem=40.87 GB, mem usage=53.25 GB.",
        "NVML library version: 580.95",
        "[2026-01-10 10:09:00] The server is fired up and ready to roll!",
    ]
    assert diagnose(log) == []


def test_exit_status_stops_restart_loops_only_when_restarting_cannot_help():
    assert exit_status_for(diagnose(["Driver/library version mismatch"])) == 78
    assert exit_status_for(diagnose(["CUDA out of memory"])) == 1
    assert exit_status_for([]) == 1


def test_the_grpc_port_past_65535_recorded_on_the_h200_is_diagnosed():
    """A tune trial on the H200 got engine port 60011; sglang 0.5.11 refused at start."""
    log = (
        Path(__file__).resolve().parents[1]
        / "fixtures/real_engine/sglang-0.5.11-h200-tune-before/serve-grpc-port.log"
    )
    found = diagnose(log.read_text().splitlines())
    assert [d.signature.id for d in found][:1] == ["grpc-port-out-of-range"]
    assert found[0].signature.needs_operator
