"""The service runs the post-start benchmark after READY: STATUS, /status, /metrics, degraded."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from glm5svc.bench.post_start import post_start_hook
from glm5svc.bench.provenance import LAUNCHED
from glm5svc.config import load_config
from glm5svc.facts import HostFacts
from glm5svc.launch_plan import build_launch_plan
from glm5svc.patches import SglangInstall
from glm5svc.serve import supervisor as supervisor_module
from glm5svc.serve.relay import StderrSink
from glm5svc.serve.service import build_service
from testkit.engine import SHORT_STEADY
from tests.bench.test_ladder import write_baseline
from tests.plan.test_launch_plan import SM120_X8
from tests.serve.conftest import NotifyListener, ServeProcess, run_in_process, write_config
from tests.serve.test_service_wiring import READERS, count_calls


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_post_start_benchmark_marks_degraded_not_unready(bench_python, tiny_tokenizer, tmp_path):
    config_path = write_config(tmp_path, "load=0.5")
    config = yaml.safe_load(config_path.read_text())
    config["model"] = {"tokenizer_path": tiny_tokenizer, "served_name": "glm-5"}
    config["server"]["python"] = bench_python
    config["benchmark"] = {
        "input_len": 32,
        "output_len": 8,
        "warmup_requests": 1,
        # Far above what the test engine can do: the run is "below baseline".
        "baseline": str(write_baseline(tmp_path / "huge.json", {4: 1e6}, 32, 8)),
        "post_start": {
            "enabled": True,
            "ladder": [4],
            "num_prompts_per_level": 8,
            "degrade_below_baseline": True,
        },
        **SHORT_STEADY,
    }
    config_path.write_text(yaml.safe_dump(config))
    notify = NotifyListener(tmp_path / "notify.sock")
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path), GLM5SVC_LOG_TARGET="stderr")
    process = ServeProcess(config_path, env)
    try:
        process.wait_ready(40)
        status = process.wait_for(
            lambda: (s := process.status()).get("benchmark") and s, 120, "post-start benchmark"
        )
        assert status["ready"] is True, "degraded must not mean unready"
        assert status["degraded"] is True
        level = status["benchmark"]["levels"][0]
        assert level["completed"] == level["requested"] >= 8  # runs sized to the window
        assert process.get("/readyz")[0] == 200
        metrics = process.get("/metrics")[1]
        assert "glm5svc_degraded 1.0" in metrics
        assert 'glm5svc_bench_total_throughput_tokens_per_second{concurrency="4"}' in metrics
        process.wait_for(lambda: process.status()["phase"] == "serving", 10, "serving again")
        statuses = [a for a in notify.assignments() if a.startswith("STATUS=")]
        assert "STATUS=benchmarking (post-start)" in statuses
        assert statuses[-1].startswith("STATUS=serving (degraded")
        ready_at = notify.assignments().index("READY=1")
        assert ready_at < notify.assignments().index("STATUS=benchmarking (post-start)")
    finally:
        process.terminate()
        process.wait_exit(30)
        notify.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_post_start_benchmark_and_status_record_the_launched_plan(
    bench_python, tiny_tokenizer, tmp_path, monkeypatch
):
    """The installed sglang (0.5.11) is not the profile's pin (cu128: 0.5.10.post1) and its
    NSA fix is in place, so radix_cache: auto keeps the radix cache on: the recorded argv
    is the launched one, not a plan built again from the configuration."""
    config_path = write_config(tmp_path, "load=0.5")
    data = yaml.safe_load(config_path.read_text())
    data["model"] = {"tokenizer_path": tiny_tokenizer, "served_name": "glm-5"}
    data["tuning"] = {"radix_cache": "auto"}
    data["benchmark"] = {
        "python": bench_python,
        "input_len": 32,
        "output_len": 8,
        "warmup_requests": 1,
        "baseline": None,
        "post_start": {"enabled": True, "ladder": [4], "num_prompts_per_level": 8},
        **SHORT_STEADY,
    }
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-read-once\n")
    key_file.chmod(0o600)
    data["server"]["api_key_file"] = str(key_file)
    config_path.write_text(yaml.safe_dump(data))
    config = load_config(config_path)
    installed = SglangInstall(tmp_path / "site", "0.5.11", Path(sys.executable))
    facts = HostFacts.given(
        config, SM120_X8, sglang=installed, nsa_fix_in_place=True, key="sk-read-once"
    )
    assert facts.model.sparse_attention  # no config.json: the reference model, DSA attention
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "run"))
    monkeypatch.setattr(supervisor_module, "become_subreaper", lambda: False)
    out = io.StringIO()
    # The facts are given: nothing in serve, the post-start run included, reads one again.
    calls = count_calls(monkeypatch, READERS)

    service = build_service(
        config, post_ready_hook=post_start_hook, facts=facts, sink=StderrSink(out)
    )
    status = run_in_process(service, lambda state: state.benchmark is not None, timeout=150)
    assert status == 0, out.getvalue()[-3000:]
    assert calls == {}, calls
    benchmark = service.supervisor.state.benchmark
    level = benchmark.levels[0]
    assert level.completed == level.requested >= 8  # with the key

    launched = service.supervisor.engine.argv
    assert "--disable-radix-cache" not in launched
    assert benchmark.error is None, benchmark
    summaries = list((tmp_path / "results" / "bench").glob("*-post-start/summary.json"))
    provenance = json.loads(summaries[0].read_text())["provenance"]
    assert provenance["launch_plan"]["argv"] == launched
    assert provenance["launch_plan_source"] == LAUNCHED
    assert provenance["launch_plan"]["sglang_version"] == "0.5.11"
    assert list(service.supervisor.state.snapshot().launch_plan.argv) == launched
    # What the record used to be: the plan built again from the configuration alone.
    rebuilt = build_launch_plan(config, gpus=SM120_X8)
    assert "--disable-radix-cache" in rebuilt.argv
    assert rebuilt.summary().sglang_version == "0.5.10.post1 (profile, not installed)"
