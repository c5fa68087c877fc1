"""`glm5svc bench` when the server hangs, the run is stopped, the disk is full; and `compare`
on summaries that are incomplete, NaN or of another workload."""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from glm5svc.bench import BenchPlan, Judgement, parse_bench_line, run_benchmark
from glm5svc.bench import outputs as outputs_module
from glm5svc.cli import main
from glm5svc.errors import Glm5Error
from testkit.engine import free_port
from testkit.timing import scaled
from tests.support.fake_bench_serving import fake_python

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


class _Healthy(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - stdlib name
        # An empty server info, as sglang.bench_serving reads it: the steady measurement checks
        # it before the first run.
        body = b"{}" if self.path.startswith("/get_server_info") else b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815 - /flush_cache before each steady run


@pytest.fixture
def healthy_server():
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def plan(python: Path, base_url: str, **changes) -> BenchPlan:
    return BenchPlan(
        base_url=base_url, python=str(python), tokenizer="/t", model="glm-5", ladder=(8,),
        input_len=64, output_len=24, num_prompts=32, warmup_requests=0,
    ).with_overrides(**changes)  # fmt: skip


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_for(predicate, timeout: float):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


# ----- time limits and stopping ------------------------------------------------------------


def test_default_level_timeout_comes_from_the_workload():
    base = BenchPlan("http://x", "python", "/t", "m", (64, 256), input_len=1024, output_len=512)
    longer = base.with_overrides(output_len=2048)
    for concurrency in base.ladder:
        # bench_serving's own limit is 6 hours per request; ours is bounded by the workload.
        assert 0 < base.timeout_for(concurrency) < longer.timeout_for(concurrency) < 6 * 3600
    assert base.with_overrides(level_timeout_s=5).timeout_for(64) == 5
    assert base.describe()["level_timeouts_s"]["64"] == round(base.timeout_for(64))
    with pytest.raises(Glm5Error) as caught:
        base.with_overrides(level_timeout_s=math.inf)
    assert "level_timeout_s" in caught.value.render()


def test_a_hanging_level_is_stopped_at_its_timeout(tmp_path, healthy_server):
    python, pid_file = fake_python(tmp_path, "hang")
    summary = run_benchmark(
        plan(python, healthy_server, level_timeout_s=1.5), tmp_path / "results", Judgement()
    )
    assert "did not finish within 2 s" in summary.levels[0].error
    assert not alive(int(pid_file.read_text()))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_stopping_bench_ends_bench_serving(tmp_path, healthy_server, sig):
    python, pid_file = fake_python(tmp_path, "hang")
    bench = subprocess.Popen(
        [sys.executable, "-m", "glm5svc", "bench", "--python", str(python), "--base-url",
         healthy_server, "--tokenizer", "/t", "--ladder", "8",
         "--baseline", "none", "--results-dir", str(tmp_path / "results"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert wait_for(pid_file.exists, 30), bench.stderr.read() if bench.poll() else "no pid"
        child = int(pid_file.read_text())
        bench.send_signal(sig)
        bench.wait(15)
        assert wait_for(lambda: not alive(child), 10), f"bench_serving {child} outlived bench"
    finally:
        bench.kill()
        bench.wait()
    if sig != signal.SIGKILL:
        assert bench.returncode == 1  # stopped, with what it has
        assert f"interrupted by {sig.name}" in bench.stdout.read()


# ----- a full disk ---------------------------------------------------------------------


def test_a_full_disk_names_the_file_and_keeps_no_half_written_run(
    tmp_path, healthy_server, monkeypatch
):
    python, _ = fake_python(tmp_path, "ok")

    def disk_full(path, data, mode=None):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(outputs_module, "write_atomic", disk_full)
    results = tmp_path / "results"
    with pytest.raises(Glm5Error) as caught:  # one wave: the stub has no token counters
        run_benchmark(plan(python, healthy_server, steady=False), results, Judgement(baseline=None))
    message = str(caught.value)
    assert "No space left on device" in message and str(results / "bench") in message
    assert list((results / "bench").iterdir()) == []


def test_result_files_are_not_world_readable(tmp_path, healthy_server):
    python, _ = fake_python(tmp_path, "ok")
    summary = run_benchmark(  # one wave: the stub has no token counters
        plan(python, healthy_server, steady=False), tmp_path / "results", Judgement(baseline=None)
    )
    run_dir = Path(summary.results_dir)
    assert stat.S_IMODE(run_dir.stat().st_mode) & 0o007 == 0
    for name in ("summary.json", "levels.csv", "plot.png"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) & 0o007 == 0


# ----- compare ---------------------------------------------------------------------------


def summary_file(path: Path, tput: float, input_len: int = 64, output_len: int = 24) -> Path:
    raw = (FIXTURES / "bench_serving-0.5.9.jsonl").read_text().splitlines()[0]
    line = parse_bench_line(raw).to_dict()
    line["total_throughput"] = tput
    data = {
        "schema": "glm5svc.bench.summary/1", "run_id": path.stem, "kind": "sweep",
        "started_at": "2026-12-01T00:00:00+00:00",
        "plan": {"input_len": input_len, "output_len": output_len},
        "levels": [{"concurrency": 8, "requested": 32, "metrics": line,
                    "telemetry": None, "returncode": 0,
                    # Steady windows within 0.5 %: the gate's replication.
                    "steady": {"windows": [
                        {"throughput": tput * f, "window": {"output_throughput": tput / 3 * f}}
                        for f in (0.995, 1.005, 0.9975, 1.0025)]}}],
    }  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def compare(capsys, *argv) -> tuple[int, str]:
    code = main(["bench", "compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(
    "broken",
    [
        lambda d: d.pop("run_id"),
        lambda d: d["levels"][0].pop("concurrency"),
        lambda d: d["levels"][0].update(concurrency="eight"),
        lambda d: d.update(levels="none"),
        lambda d: d["levels"][0].update(metrics=[1, 2]),
    ],
)
def test_compare_on_a_summary_with_missing_or_mistyped_fields(tmp_path, capsys, broken):
    good = summary_file(tmp_path / "good.json", 1000.0)
    data = json.loads(good.read_text())
    broken(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    for argv in ((str(bad), str(good)), (str(good), str(bad))):
        code, out = compare(capsys, *argv, "--fail-on-regression")
        assert code == 78, out
        assert "bad.json" in out and "missing or mistyped" in out


def test_a_nan_baseline_is_refused_not_passed(tmp_path, capsys):
    current = summary_file(tmp_path / "a.json", 10.0)
    baseline = tmp_path / "nan.json"
    baseline.write_text('{"name": "nan", "levels": {"8": {"total_throughput": NaN}}}')
    code, out = compare(capsys, str(current), str(baseline), "--fail-on-regression")
    assert code == 78
    assert "finite positive number" in out


def test_a_nan_in_a_summary_is_not_compared_as_a_pass(tmp_path, capsys):
    current = summary_file(tmp_path / "a.json", 10.0)
    nan_run = summary_file(tmp_path / "b.json", 1000.0)
    data = json.loads(nan_run.read_text())
    data["levels"][0]["metrics"]["output_throughput"] = float("nan")
    nan_run.write_text(json.dumps(data))
    code, out = compare(capsys, str(current), str(nan_run), "--fail-on-regression", "--json")
    assert code == 3  # total throughput 10 vs 1000 still regresses
    assert "output_throughput" not in [row["metric"] for row in json.loads(out)["rows"]]


def test_compare_says_when_the_workloads_differ(tmp_path, capsys):
    a = summary_file(tmp_path / "a.json", 1000.0, input_len=64, output_len=24)
    b = summary_file(tmp_path / "b.json", 1000.0, input_len=1024, output_len=512)
    code, out = compare(capsys, str(a), str(b))
    assert code == 0
    text = " ".join(out.split())
    assert "no verdict against baseline" in text
    assert "the workloads differ: input_len 64 vs 1024, output_len 24 vs 512" in text


def test_a_gate_on_another_workload_gives_no_verdict(tmp_path, capsys):
    """A 64-in/16-out run against the shipped reference (lengths not recorded) once printed
    "+1959.8 %" and "within 5 % of baseline or better"; now it judges nothing."""
    a = summary_file(tmp_path / "a.json", 1.0, input_len=64, output_len=16)
    b = summary_file(tmp_path / "b.json", 1000.0, input_len=1024, output_len=512)
    code, out = compare(capsys, str(a), str(b))
    assert code == 0 and "no verdict" in out and "within" not in out
    code, out = compare(capsys, str(a), str(b), "--fail-on-regression")
    assert code == 3 and "the gate cannot judge runs of different workloads" in out
    code, out = compare(capsys, str(a), "reference-8x-rtx-pro-6000")
    text = " ".join(out.split())
    assert code == 0
    assert "did not record its input and output lengths" in text and "within" not in text


def test_compare_help_says_which_side_is_the_baseline():
    run = subprocess.run(
        [sys.executable, "-m", "glm5svc", "bench", "compare", "--help"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert "B, the baseline" in run.stdout and "A / B - 1" in run.stdout


def test_a_stopping_service_ends_the_running_level_at_once(tmp_path, healthy_server):
    """The post-start benchmark's bench_serving must not hold the engine's drain."""
    python, pid_file = fake_python(tmp_path, "hang")
    summary = run_benchmark(
        plan(python, healthy_server, level_timeout_s=120),
        tmp_path / "results",
        Judgement(baseline=None),
        should_stop=pid_file.exists,  # the service stops once the level has started
    )
    assert summary.levels[0].error == "stopped: the service is stopping"
    assert summary.levels[0].wall_s < 60
    assert not alive(int(pid_file.read_text()))
