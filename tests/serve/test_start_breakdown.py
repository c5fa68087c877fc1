"""A start broken down from the engine's own log: the lines recorded from sglang 0.5.11 on
the H200 (tests/fixtures/real_engine/), and the autotune lines sglang logs around it."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm5svc.serve.phases import StartBreakdown, start_breakdown

RECORDED = Path(__file__).parents[1] / "fixtures" / "real_engine"


def lines(name: str) -> list[str]:
    return (RECORDED / name).read_text(encoding="utf-8", errors="replace").splitlines()


@pytest.mark.parametrize(
    ("log", "weights", "graphs", "fired_up", "ready"),
    [
        ("sglang-0.5.11-h200-service/serve.log", 0.16, 45.77, 81.0, 101.4),
        ("sglang-0.5.11-h200-service/bare.log", 0.09, 45.07, 81.0, None),
        ("sglang-0.5.11-h200-service-new-drain/serve.log", None, None, None, 108.3),
        # The split supervisor (2026-12-03): serve started once bare's KV pool was allocated.
        ("sglang-0.5.11-h200-service-split-supervisor/serve.log", 0.08, 30.09, 61.0, 101.9),
        ("sglang-0.5.11-h200-service-split-supervisor/bare.log", 0.18, 60.34, 87.0, None),
    ],
)
def test_the_recorded_starts(log, weights, graphs, fired_up, ready):
    """The figures are the ones the lines state: sglang's own elapsed times for the weights
    and the graphs, the timestamps for "fired up", serve's own line for READY."""
    found = start_breakdown(lines(log))
    if weights is not None:
        assert found.weights_s == weights
        assert found.graphs_s == graphs
        assert found.fired_up_s == fired_up
    assert found.ready_s == ready
    assert found.autotune_s is None  # the recordings ran the triton MoE runner: no autotune


def test_autotune_decode_graphs_and_ranks():
    log = [
        "[2026-12-01 10:00:00 TP0] Init torch distributed begin.",
        "[2026-12-01 10:00:30 TP0] Load weight end. elapsed=28.50 s, type=GlmMoeDsaForCausalLM",
        "[2026-12-01 10:00:31 TP1] Load weight end. elapsed=29.75 s, type=GlmMoeDsaForCausalLM",
        "[2026-12-01 10:00:32 TP0] Running FlashInfer autotune...",
        "[2026-12-01 10:02:05 TP0] FlashInfer autotune completed.",
        "[2026-12-01 10:02:40 TP0] Capture piecewise CUDA graph end. Time elapsed: 30.00 s.",
        "[2026-12-01 10:02:41 TP1] Capture piecewise CUDA graph end. Time elapsed: 31.00 s.",
        "[2026-12-01 10:03:00 TP0] Capture cuda graph end. Time elapsed: 12.50 s. mem usage=1 GB",
        "[2026-12-01 10:03:10] The server is fired up and ready to roll!",
        "glm5svc: ready after 200.5 s: port 30000 held by the engine's process group",
    ]
    found = start_breakdown(log)
    assert found == StartBreakdown(29.75, 93.0, 43.5, 190.0, 200.5)
    assert StartBreakdown.from_dict(found.to_dict()) == found
    assert found.describe().startswith("weights 29.8 s, autotune 93.0 s, graphs 43.5 s")
    assert start_breakdown([]).describe() == "no start lines in the log"
