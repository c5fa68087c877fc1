"""The service runs the post-start benchmark after READY: STATUS, /status, /metrics, degraded."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.bench.test_ladder import write_baseline
from tests.serve.conftest import NotifyListener, ServeProcess, write_config


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
        "baseline": str(write_baseline(tmp_path / "huge.json", {4: 1e6})),
        "post_start": {
            "enabled": True,
            "ladder": [4],
            "num_prompts_per_level": 8,
            "degrade_below_baseline": True,
        },
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
        assert status["benchmark"]["levels"][0]["completed"] == 8
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
