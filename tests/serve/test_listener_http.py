"""The listener speaks HTTP/1.1 and answers HEAD; /metrics follows Prometheus' conventions
(one prefix, no empty family, OpenMetrics when asked), read back with prometheus_client's
own parsers and, where it is installed, `promtool check metrics`."""

from __future__ import annotations

import http.client
import shutil
import subprocess

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from glm5svc.records import BenchmarkLevel, BenchmarkStatus
from glm5svc.serve.listener import HealthListener
from glm5svc.serve.metrics import build_registry
from glm5svc.serve.state import SupervisorState
from glm5svc.telemetry import PynvmlSource, Sampler
from testkit import fake_pynvml

# A post-start benchmark whose only level measured throughput but no latency or power:
# the families of the figures nobody measured must not appear empty.
BENCHMARK = BenchmarkStatus(levels=(BenchmarkLevel(8, 32, 32, total_tok_s=1500.0),))


@pytest.fixture
def listener():
    state = SupervisorState(wedge_window_s=30.0)
    state.benchmark = BENCHMARK
    sampler = Sampler(PynvmlSource(fake_pynvml.make_module(2)))
    sampler.open()
    sampler.poll_pcie_now()
    sampler.sample_now()
    listener = HealthListener(state, build_registry(state, sampler), "127.0.0.1", 0)
    listener.start()
    yield listener
    listener.stop()


def request(conn: http.client.HTTPConnection, method: str, path: str, **headers):
    conn.request(method, path, headers=headers)
    response = conn.getresponse()
    return response, response.read()


def test_http_1_1_keeps_the_connection_and_head_has_no_body(listener):
    conn = http.client.HTTPConnection(*listener.address, timeout=5)
    try:
        get, body = request(conn, "GET", "/livez")
        assert get.version == 11 and get.status == 200 and body
        for path in ("/livez", "/readyz", "/status", "/metrics", "/nowhere"):
            head, head_body = request(conn, "HEAD", path)  # the same connection, kept open
            again, again_body = request(conn, "GET", path)
            assert head_body == b"", path
            assert head.status == again.status, path
            assert head.getheader("Content-Type") == again.getheader("Content-Type"), path
            assert int(again.getheader("Content-Length")) == len(again_body), path
    finally:
        conn.close()


def scrape(listener, accept: str | None = None) -> tuple[str, str]:
    conn = http.client.HTTPConnection(*listener.address, timeout=5)
    try:
        response, body = request(conn, "GET", "/metrics", **({"Accept": accept} if accept else {}))
    finally:
        conn.close()
    assert response.status == 200
    return response.getheader("Content-Type"), body.decode()


def test_metrics_one_prefix_no_empty_family_text_format(listener):
    content_type, text = scrape(listener)
    assert content_type.startswith("text/plain; version=0.0.4")
    families = list(text_string_to_metric_families(text))
    names = {family.name for family in families}
    assert {"glm5svc_ready", "glm5svc_gpu_power_watts", "glm5svc_telemetry_up"} <= names
    assert "glm5svc_bench_total_throughput_tokens_per_second" in names
    assert "glm5svc_bench_ttft_median_seconds" not in names  # no level measured it
    for family in families:
        assert family.name.startswith("glm5svc_"), family.name
        assert family.samples, f"{family.name} has no sample"
    typed = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(typed) == len(families)  # each family once


def test_metrics_in_openmetrics_when_asked(listener):
    content_type, text = scrape(listener, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    families = list(openmetrics_families(text))
    assert families and all(f.name.startswith("glm5svc_") and f.samples for f in families)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_promtool_finds_nothing_to_say(listener):
    _, text = scrape(listener)
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0 and not check.stdout.strip(), check.stdout + check.stderr
