"""Log-line parsing (phases, progress, ranks, priorities) and the wedge rule."""

from __future__ import annotations

from glm5svc.serve.notify import child_environment
from glm5svc.serve.phases import (
    PRIORITY_ERR,
    PRIORITY_INFO,
    PRIORITY_WARNING,
    Phase,
    later_startup_phase,
    parse_line,
)
from glm5svc.serve.probes import parse_progress_counters
from glm5svc.serve.state import EngineHealth, SupervisorState


def test_loading_progress_bar():
    info = parse_line(
        "Loading safetensors checkpoint shards:  45% Completed | 36/80 [01:02<01:16,  1.70s/it]"
    )
    assert info.phase is Phase.LOADING and info.load_percent == 45


def test_each_rank_prints_its_kv_pool_and_the_smallest_counts():
    lines = [
        "[2026-12-01 02:55:21 TP0] KV Cache is allocated. #tokens: 18214696, K size: 34.74 GB, "
        "V size: 34.74 GB",
        "[2026-12-01 02:55:21 TP1] KV Cache is allocated. #tokens: 18210000, K size: 34.73 GB, "
        "V size: 34.73 GB",
        "[2026-12-01 02:55:21 TP2] KV Cache is allocated. #tokens: 18214696, KV size: 69.48 GB",
    ]
    state = SupervisorState(wedge_window_s=1)
    assert state.snapshot().kv_pool_tokens is None
    for line in lines:
        state.record_kv_pool(parse_line(line).kv_pool_tokens)
    assert state.kv_pool_tokens == 18210000
    assert parse_line("[2026-12-01 TP0] Memory pool end. avail mem=8 GB").kv_pool_tokens is None


def test_phase_markers_and_ranks():
    assert parse_line("[2026-01-10 10:00:00 TP3] Load weight begin. avail mem=94 GB").rank == 3
    assert parse_line("[2026-01-10 10:00:00 DP0 TP5 EP5] Load weight end. type=X").rank == 5
    assert parse_line("[rank6]:[E1129 21:40:02.1 ProcessGroupNCCL.cpp:632] timeout").rank == 6
    assert parse_line("[2026-01-10 10:00:00] The server is fired up and ready to roll!").fired_up
    assert parse_line("[2026-01-10 TP0] Running FlashInfer autotune...").phase is Phase.AUTOTUNE
    graph = parse_line("[2026-01-10 TP0] Capture cuda graph begin. This can take up to several")
    assert graph.phase is Phase.WARMUP
    capture = parse_line("Capturing batches (bs=64 avail_mem=7.9 GB):  40%|####  | 4/10")
    assert capture.progress_percent == 40 and capture.load_percent is None


def test_argument_dump_opens_no_phase():
    info = parse_line(
        "[2026] server_args=ServerArgs(skip_server_warmup=False, disable_flashinfer_autotune=False)"
    )
    assert info.phase is None


def test_priorities():
    assert parse_line("AttributeError: 'X' object has no attribute 'y'").priority == PRIORITY_ERR
    assert parse_line("Traceback (most recent call last):").priority == PRIORITY_ERR
    assert parse_line("[rank3]:[W1129 12:00:00] warn").priority == PRIORITY_WARNING
    assert parse_line("[2026 TP0] Decode batch. #running-req: 3").priority == PRIORITY_INFO


def test_phases_only_move_forward():
    assert later_startup_phase(Phase.LOADING, Phase.WARMUP)
    assert not later_startup_phase(Phase.WARMUP, Phase.LOADING)
    assert not later_startup_phase(Phase.SERVING, Phase.LOADING)


def test_slow_probe_with_engine_progress_is_not_wedged():
    health = EngineHealth(wedge_window_s=10)
    health.record_counters({"sglang:generation_tokens_total": 100.0}, now=0.0)
    health.record_probe(True, "ok", now=0.0)
    for t in range(1, 30):  # every probe times out during a long prefill, tokens still flow
        health.record_counters(
            {"sglang:prompt_tokens_total": 1000.0 * t, "sglang:generation_tokens_total": 100.0},
            now=float(t),
        )
        health.record_probe(False, "timed out", now=float(t))
        assert not health.wedged(now=float(t))


def test_failing_probes_without_progress_is_wedged_after_the_window():
    health = EngineHealth(wedge_window_s=10)
    health.record_probe(True, "ok", now=0.0)
    counters = {"sglang:generation_tokens_total": 5.0}
    health.record_counters(counters, now=0.0)
    health.record_probe(False, "timed out", now=5.0)
    health.record_counters(counters, now=5.0)
    assert not health.wedged(now=9.0)
    assert health.wedged(now=10.5)
    health.record_probe(True, "ok", now=11.0)
    assert not health.wedged(now=11.0)


def test_parse_progress_counters_sums_label_sets():
    text = (
        "# TYPE sglang:generation_tokens_total counter\n"
        'sglang:generation_tokens_total{model_name="glm-5"} 10.0\n'
        'sglang:generation_tokens_total{model_name="other"} 5.0\n'
        'sglang:num_running_reqs{model_name="glm-5"} 3.0\n'
        'sglang:gen_throughput{model_name="glm-5"} 99.0\n'
    )
    assert parse_progress_counters(text) == {
        "sglang:generation_tokens_total": 15.0,
        "sglang:num_running_reqs": 3.0,
    }


def test_child_environment_drops_notify_and_watchdog():
    base = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "9", "PATH": "/bin"}
    env = child_environment(base, {"NCCL_IB_DISABLE": "1"})
    assert env == {"PATH": "/bin", "NCCL_IB_DISABLE": "1"}
