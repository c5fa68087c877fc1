"""The per-second recorder beside the tune's windows: GPU clocks and power through NVML
(the fake pynvml), the engine's gauges and counters from recorded real /metrics, the load's
pacing; what it does without NVML or an engine answer; bounded memory."""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp import web

from glm5svc.bench import seconds
from glm5svc.bench.load import ContinuousLoad, LoadPacing, LoadShape
from glm5svc.bench.seconds import FIELDS, SCHEMA, SecondsRecorder, read_seconds
from glm5svc.nvml import PynvmlSource
from testkit import fake_pynvml
from testkit.engine import start_engine
from testkit.http_stub import stub

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_engine"
UNDER_LOAD = REAL / "sglang-0.5.11-h200-service-split-supervisor" / "metrics-under-load.txt"
NEVER = 3600.0  # the thread's interval: the test takes each line itself


def metrics_routes(text: str, status: int = 200) -> dict:
    return {("GET", "/metrics"): lambda request: web.Response(text=text, status=status)}


def pacing_of(*snapshots: LoadPacing):
    queue = list(snapshots)
    return lambda: queue.pop(0) if len(queue) > 1 else queue[0]


def test_each_line_has_the_gpus_the_engine_and_the_load(tmp_path):
    nvml = fake_pynvml.make_module(gpus=2)
    nvml.devices[0].sm_clock, nvml.devices[1].sm_clock = 1980, 1500
    nvml.devices[0].reasons, nvml.devices[1].reasons = 0x4, 0x20
    nvml.devices[1].power_mw = 450_000
    pacing = pacing_of(
        LoadPacing(300, 40, 4, 30, 0.06, 0.004), LoadPacing(600, 300, 4, 290, 0.5, 0.002)
    )
    path = tmp_path / "starts" / "000" / "seconds.jsonl"
    with stub(metrics_routes(UNDER_LOAD.read_text())) as base:
        recorder = SecondsRecorder(base, {}, path, pacing, PynvmlSource(nvml), interval_s=NEVER)
        recorder.start()
        recorder.record()
        assert recorder.stop() == 2
    header, lines = read_seconds(path)
    assert header["schema"] == SCHEMA and header["nvml_absent"] is None
    assert len(header["gpus"]) == 2 and nvml.shutdowns == 1
    assert len(lines) == 2 and all(set(FIELDS) <= set(line) for line in lines)
    first, second = lines
    assert first["sm_clock_mhz"] == (1980 + 1500) / 2
    assert first["power_w"] == (250 + 450) / 2
    assert first["throttle_reasons"] == 0x24  # either GPU's reasons
    assert [g["sm_clock_mhz"] for g in first["gpus"]] == [1980, 1500]
    # The recorded engine: 55 running, its realtime counters, forward passes by graph mode.
    assert first["running"] == 55 and first["queued"] == 0
    assert first["prefill_compute"] == 15373 and first["decode"] == 16
    assert first["passes"] == {"prefill_cuda_graph": 21.0, "decode_none": 16.0}
    assert (first["in_flight"], first["gaps"], first["gap_max_ms"]) == (256, 30, 4.0)
    assert (second["in_flight"], second["sent"], second["gap_max_ms"]) == (296, 600, 2.0)
    assert "errors" not in first and second["t"] >= first["t"]


def test_no_nvml_leaves_the_gpu_fields_null_and_records_the_rest(tmp_path):
    nvml = fake_pynvml.make_module(gpus=1, init_error=fake_pynvml.real.NVMLError_LibraryNotFound())
    path = tmp_path / "seconds.jsonl"
    with stub(metrics_routes(UNDER_LOAD.read_text())) as base:
        recorder = SecondsRecorder(base, {}, path, None, PynvmlSource(nvml), interval_s=NEVER)
        recorder.start()
        recorder.stop()
    header, (line,) = read_seconds(path)
    assert "no NVIDIA driver" in header["nvml_absent"] and header["gpus"] == []
    assert all(line[name] is None for name in seconds.GPU_FIELDS) and line["gpus"] is None
    assert all(line[name] is None for name in seconds.LOAD_FIELDS)
    assert line["running"] == 55


def test_an_engine_that_does_not_answer_and_a_gpu_that_fails_are_nulls(tmp_path, monkeypatch):
    source = PynvmlSource(fake_pynvml.make_module(gpus=2))
    read = source.read_sample

    def lost(index: int):
        if index == 1:
            raise OSError("the GPU fell off the bus")
        return read(index)

    monkeypatch.setattr(source, "read_sample", lost)
    path = tmp_path / "seconds.jsonl"
    with stub(metrics_routes("nope", status=503)) as base:
        recorder = SecondsRecorder(base, {}, path, None, source, interval_s=NEVER)
        recorder.start()
        recorder.stop()
    _, (line,) = read_seconds(path)
    assert all(line[name] is None for name in seconds.ENGINE_FIELDS)
    assert [g["index"] for g in line["gpus"]] == [0] and line["sm_clock_mhz"] == 1800
    assert any(e.startswith("engine: ") for e in line["errors"])
    assert any(e.startswith("GPU 1: ") for e in line["errors"])


def test_lines_are_appended_in_batches_and_a_cut_last_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(seconds, "FLUSH_EVERY", 2)
    path = tmp_path / "seconds.jsonl"
    with stub(metrics_routes(UNDER_LOAD.read_text())) as base:
        recorder = SecondsRecorder(base, {}, path, None, PynvmlSource(fake_pynvml.make_module(1)),
                                   interval_s=NEVER)  # fmt: skip
        recorder.start()
        recorder.record()
        assert len(read_seconds(path)[1]) == 0  # held
        recorder.record()
        assert len(read_seconds(path)[1]) == 2 and recorder._held == []
        recorder.record()
        assert len(read_seconds(path)[1]) == 2
        recorder.stop()
    assert len(read_seconds(path)[1]) == 4
    with path.open("a") as handle:
        handle.write('{"t": 9.0, "unix"')  # a write cut short
    assert len(read_seconds(path)[1]) == 4


def test_the_load_counts_its_send_gaps_and_requests_in_flight(tmp_path):
    """Every send after a worker's first follows that worker's answer: one gap each; the
    longest gap is per read (pacing() starts it again)."""
    engine = start_engine(tmp_path / "engine.log", "--step-base-ms", "2")
    try:
        shape = LoadShape(concurrency=4, input_len=16, output_len=4, vocab_size=5000)
        load = ContinuousLoad(engine.base_url, {}, shape, seed=5)
        load.start()
        deadline = time.monotonic() + 60
        while load.counts.completed < 30 and time.monotonic() < deadline:
            time.sleep(0.05)  # waits on the load's own counter, bounded
        load.stop()
        deadline = time.monotonic() + 30
        while load.pacing().in_flight and time.monotonic() < deadline:
            time.sleep(0.05)  # the last answers come in
    finally:
        engine.stop()
    pacing = load.pacing()
    assert pacing.failed == 0 and pacing.in_flight == 0
    assert pacing.gaps == pacing.sent - shape.concurrency  # all but each worker's first
    assert pacing.gap_total_s > 0 and pacing.gap_max_s == 0.0  # read just before
