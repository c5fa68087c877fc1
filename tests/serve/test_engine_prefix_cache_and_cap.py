"""The test engine's prefix cache, live running-request cap and counters, as sglang 0.5.11
has them (radix cache with /flush_cache, /set_internal_state pp_max_micro_batch_size,
sglang:realtime_tokens_total advancing with the steps)."""

from __future__ import annotations

import json
import re
import threading
import urllib.request

import pytest

from testkit import sglang_test_engine as model
from testkit.engine import start_engine

PAGE = 4


def engine_for(*argv: str, log: model.Log | None = None) -> model.Engine:
    return model.Engine(model.parse_args(["--page-size", str(PAGE), *argv]), log)


def serve(engine: model.Engine, ids, max_new: int = 1) -> model.Request:
    """Admit one prompt, run it to its end; the request (its cached_tokens) is returned."""
    request = model.Request(input_ids=tuple(ids), max_new=max_new)
    engine.submit(request)
    new = engine.admit()
    assert new == [request]
    while engine.running:
        engine.finish_step(new)
        new = []
    return request


def test_a_repeated_prompt_is_cached_up_to_its_last_token():
    engine = engine_for()
    prompt = range(21)  # 5 whole pages and one token
    assert serve(engine, prompt).cached_tokens == 0
    assert serve(engine, prompt).cached_tokens == 20
    # 20 tokens, 5 pages: the last token is always computed, so 4 pages match.
    assert serve(engine, range(20)).cached_tokens == 16


@pytest.mark.parametrize("pages", [1, 3, 6])
def test_a_shared_prefix_of_k_pages_counts_k_pages_cached(pages):
    engine = engine_for()
    shared = list(range(pages * PAGE))
    serve(engine, shared + [1000, 1001, 1002])
    second = serve(engine, shared + [2000, 2001])
    assert second.cached_tokens == pages * PAGE
    assert engine.cached_tokens_total == pages * PAGE
    assert engine.realtime_tokens["prefill_cache"] == pages * PAGE
    computed = (len(shared) + 3) + 2  # the first prompt in full, the second's own tokens
    assert engine.realtime_tokens["prefill_compute"] == computed


def test_a_cached_prefix_costs_no_prefill_time():
    engine = engine_for()
    shared = list(range(64))
    serve(engine, shared + [1])
    again = model.Request(input_ids=tuple(shared + [2]))
    engine.submit(again)
    new = engine.admit()
    assert model.prefill_tokens(new) == 1
    cold = model.Request(input_ids=tuple(range(500, 565)))
    assert model.predicted_step_ms(engine.args, 1, model.prefill_tokens(new)) < (
        model.predicted_step_ms(engine.args, 1, cold.prompt_tokens)
    )


def test_a_flush_empties_the_cache_but_not_while_requests_run(capsys):
    engine = engine_for("--test-mode", "ranks=1", log=model.Log(1))
    prompt = range(33)
    serve(engine, prompt)
    assert engine.cache.tokens == 32
    busy = model.Request(input_ids=(1, 2, 3), max_new=5)
    engine.submit(busy)
    assert engine.flush_cache() is False and engine.cache.tokens == 32
    engine.finish_step(engine.admit())
    while engine.running:
        engine.finish_step([])
    assert engine.flush_cache() is True and engine.cache.tokens == 0
    assert serve(engine, prompt).cached_tokens == 0
    out = capsys.readouterr().out
    assert (
        "Cache not flushed because there are pending requests. #queue-req: 1, #running-req: 0"
        in out
    )
    assert "Cache flushed successfully!" in out


def test_disable_radix_cache_matches_nothing():
    engine = engine_for("--disable-radix-cache")
    serve(engine, range(40))
    assert serve(engine, range(40)).cached_tokens == 0 and engine.cache.tokens == 0


def test_the_cache_keeps_to_the_kv_pool_and_evicts_the_least_recently_used():
    engine = engine_for("--max-total-tokens", str(8 * PAGE))
    old, recent = list(range(100, 100 + 4 * PAGE)), list(range(200, 200 + 4 * PAGE))
    serve(engine, old + [1])
    serve(engine, recent + [1])
    serve(engine, old + [2])  # old is used again: recent is now the least recently used
    serve(engine, list(range(300, 300 + 3 * PAGE)) + [1])
    assert engine.cache.tokens <= 8 * PAGE
    assert serve(engine, old + [3]).cached_tokens == 4 * PAGE
    assert serve(engine, recent + [3]).cached_tokens < 4 * PAGE


def test_the_prefill_line_reports_cached_tokens_as_sglang_does(capsys):
    engine = engine_for("--test-mode", "ranks=1", log=model.Log(1))
    serve(engine, range(2 * PAGE + 1))
    serve(engine, range(2 * PAGE + 1))
    lines = [line for line in capsys.readouterr().out.splitlines() if "Prefill batch" in line]
    assert "#new-seq: 1, #new-token: 9, #cached-token: 0, " in lines[0]
    assert "#new-seq: 1, #new-token: 1, #cached-token: 8, " in lines[1]


def test_text_prompts_share_tokens_where_their_text_does():
    first = model.prompt_ids({"text": "Once upon a time there was a cache. " * 4 + "A"})
    second = model.prompt_ids({"text": "Once upon a time there was a cache. " * 4 + "Bcde"})
    assert first[:36] == second[:36] and first != second
    assert model.prompt_ids({"input_ids": [5, 6, 7]}) == (5, 6, 7)
    assert len(model.prompt_ids({"text": "ab"})) == 1


def test_the_running_cap_admits_at_most_the_value_set():
    engine = engine_for("--max-running-requests", "16")
    assert engine.max_micro_batch == 16
    assert engine.set_internal_state({"pp_max_micro_batch_size": 3}) is True
    for _ in range(10):
        engine.submit(model.Request(prompt_tokens=5, max_new=50))
    assert len(engine.admit()) == 3 and engine.admit() == []
    assert engine.global_server_args()["pp_max_micro_batch_size"] == 3
    assert engine.set_internal_state({"pp_max_micro_batch_size": 5}) is True
    assert len(engine.admit()) == 2 and len(engine.running) == 5


@pytest.mark.parametrize("value", [0, 17, -1, "8", 2.5])
def test_a_cap_outside_one_to_the_start_cap_is_refused(value, capsys):
    engine = engine_for("--max-running-requests", "16", "--test-mode", "ranks=1", log=model.Log(1))
    assert engine.set_internal_state({"pp_max_micro_batch_size": value}) is False
    assert engine.max_micro_batch == 16
    assert engine.global_server_args()["pp_max_micro_batch_size"] == 16
    assert (
        f"Updating pp_max_micro_batch_size to {value} is rejected because it is out of the "
        "valid range [1, 16]." in capsys.readouterr().out
    )


def test_an_unsupported_key_changes_nothing(capsys):
    engine = engine_for("--test-mode", "ranks=1", log=model.Log(1))
    update = {"pp_max_micro_batch_size": 4, "max_running_requests": 8}
    assert engine.set_internal_state(update) is False
    assert engine.max_micro_batch == 1024
    assert "Updating max_running_requests is not supported." in capsys.readouterr().out


def test_the_scheduler_counters_advance_with_the_steps_the_request_ones_at_the_end():
    engine = engine_for()
    request = model.Request(input_ids=tuple(range(10)), max_new=5)
    engine.submit(request)
    engine.finish_step(engine.admit())
    engine.finish_step([])
    assert engine.realtime_tokens == {"prefill_compute": 10, "decode": 2}
    assert (engine.requests_total, engine.prompt_tokens_total) == (0, 0)
    text = model.render_metrics(engine, "m")
    assert (
        'sglang:realtime_tokens_total{engine_type="unified",mode="decode",model_name="m",' in text
    )
    assert "sglang:num_requests_total" not in text  # no request has finished yet
    while engine.running:
        engine.finish_step([])
    assert (engine.requests_total, engine.prompt_tokens_total) == (1, 10)
    assert engine.generation_tokens_total == engine.realtime_tokens["decode"] == 5


@pytest.mark.parametrize(
    ("argv", "prefill", "decode"),
    [
        ((), "prefill_cuda_graph", "decode_cuda_graph"),
        (("--disable-cuda-graph",), "prefill_cuda_graph", "decode_none"),  # as recorded
        (("--cuda-graph-max-bs", "2"), "prefill_cuda_graph", "decode_none"),  # 3 running
        (("--disable-piecewise-cuda-graph",), "prefill_none", "decode_cuda_graph"),
    ],
)
def test_forward_passes_are_counted_by_cuda_graph_mode(argv, prefill, decode):
    """One decode pass a step, one prefill pass a step that admits; a decode batch past
    --cuda-graph-max-bs runs without its graph, as sglang's does."""
    engine = engine_for(*argv)
    for _ in range(3):
        engine.submit(model.Request(prompt_tokens=4, max_new=3))
    engine.finish_step(engine.admit())
    engine.finish_step([])
    assert engine.passes == {prefill: 1, decode: 2}
    assert f'mode="{decode}"' in model.render_metrics(engine, "m")


def test_health_generations_are_not_counted_as_requests():
    engine = engine_for()
    engine.submit(model.Request(prompt_tokens=1, max_new=1, counted=False))
    engine.finish_step(engine.admit())
    assert engine.requests_total == 0 and engine.realtime_tokens["decode"] == 1


def post(base: str, path: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status, reply.read().decode()


def get(base: str, path: str) -> str:
    with urllib.request.urlopen(base + path, timeout=10) as reply:
        return reply.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        found = re.match(rf"^sglang:{name}\{{(.*)\}} (\S+)$", line)
        if found and all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            return float(found.group(2))
    return 0.0


def test_the_http_surface_caches_flushes_and_sets_the_cap(tmp_path):
    handle = start_engine(tmp_path / "engine.log", "--max-running-requests", "64")
    try:
        base = handle.base_url
        body = {"input_ids": list(range(50)), "sampling_params": {"max_new_tokens": 2}}
        first = json.loads(post(base, "/generate", body)[1])["meta_info"]["cached_tokens"]
        second = json.loads(post(base, "/generate", body)[1])["meta_info"]["cached_tokens"]
        assert (first, second) == (0, 49)
        assert metric(get(base, "/metrics"), "cached_tokens_total", cache_source="device") == 49
        assert post(base, "/flush_cache", {}) == (200, model.FLUSHED)
        third = json.loads(post(base, "/generate", body)[1])["meta_info"]["cached_tokens"]
        assert third == 0

        for refused in (0, 65):
            assert post(base, "/set_internal_state", {"server_args": {
                "pp_max_micro_batch_size": refused}}) == (200, "[true]")  # fmt: skip
        info = json.loads(get(base, "/server_info"))
        assert info["internal_states"][0]["pp_max_micro_batch_size"] == 64
        assert post(base, "/set_internal_state", {"server_args": {
            "pp_max_micro_batch_size": 8}}) == (200, "[true]")  # fmt: skip
        for path in ("/server_info", "/get_server_info"):
            states = json.loads(get(base, path))["internal_states"]
            assert len(states) == 1 and states[0]["pp_max_micro_batch_size"] == 8
    finally:
        handle.stop()
    log = (tmp_path / "engine.log").read_text()
    assert "Updating pp_max_micro_batch_size to 65 is rejected" in log
    assert "Global server args updated!" in log and "pp_max_micro_batch_size=8" in log


def test_the_realtime_counters_advance_while_a_request_runs(tmp_path):
    handle = start_engine(tmp_path / "engine.log")
    base = handle.base_url
    body = {"input_ids": [7] * 30, "stream": True, "sampling_params": {"max_new_tokens": 400}}
    started, finished = threading.Event(), threading.Event()

    def stream() -> None:
        request = urllib.request.Request(base + "/generate", json.dumps(body).encode())
        with urllib.request.urlopen(request, timeout=30) as reply:
            for line in reply:
                if line.startswith(b"data: {"):
                    started.set()
        finished.set()

    try:
        before = get(base, "/metrics")
        worker = threading.Thread(target=stream)
        worker.start()
        assert started.wait(20)
        during = get(base, "/metrics")
        running = not finished.is_set()
        worker.join(30)
        after = get(base, "/metrics")
    finally:
        handle.stop()
    assert running, "the request ended before the engine was read"
    decode = [
        metric(text, "realtime_tokens_total", mode="decode") for text in (before, during, after)
    ]
    requests = [metric(text, "num_requests_total") for text in (before, during, after)]
    assert decode[0] < decode[1] < decode[2] and decode[2] - decode[0] == 400
    assert requests[0] == requests[1] == requests[2] - 1  # counted when it finished
