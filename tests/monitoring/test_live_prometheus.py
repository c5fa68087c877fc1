"""A real Prometheus scrapes `glm5svc serve` (fake GPUs, the test engine, a real post-start
benchmark) on loopback: every dashboard query and recording rule has a series, /metrics
serves the catalog of docs/metrics.md, and the not-ready alert goes pending, then firing,
when the engine dies, and resolves once the service is started again (systemd's part)."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from glm5svc import metrics_catalog
from glm5svc.http_fetch import fetch_text
from testkit.monitored_service import ServeUnit, send_requests, write_config
from testkit.prometheus import DASHBOARD, RULES, Prometheus, scrape_jobs, wait_for
from tests.monitoring.test_dashboard import committed_queries

# GLM5NotReady's `for:` in the rules this test loads (5m as shipped).
NOT_READY_FOR_S = 4
# Families the catalog has that this service may not serve: the benchmark's GPU figures come
# from telemetry windows over its level, which a level of a few seconds on fake NVML may not fill.
MAY_BE_MISSING = {
    "glm5svc_bench_energy_per_output_token_joules",
    "glm5svc_bench_power_share_of_limit_ratio",
    # served once a night (glm5svc night) has ended on the replica
    "glm5svc_night_outcome",
    "glm5svc_night_ended_timestamp_seconds",
    "glm5svc_night_morning_ratio",
}


def fast_rules(path) -> None:
    document = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "GLM5NotReady":
                rule["for"] = f"{NOT_READY_FOR_S}s"
    path.write_text(yaml.safe_dump(document, sort_keys=False))


@pytest.fixture(scope="module")
def stack(tmp_path_factory, bench_python, tiny_tokenizer):
    folder = tmp_path_factory.mktemp("monitoring")
    unit = ServeUnit(write_config(folder, bench_python, tiny_tokenizer)).start()
    rules = folder / "rules.yml"
    fast_rules(rules)
    prometheus = Prometheus(folder, scrape_jobs([unit.listener], [unit.engine]), [rules])
    try:
        prometheus.start()
        unit.wait_ready()
        benchmark = unit.wait_benchmark()
        assert benchmark["error"] is None and benchmark["levels"], benchmark
        wait_for(lambda: all_up(prometheus), 30, "both targets up")
        # Requests after the first scrapes, so the 1 m rates and histograms see them.
        send_requests(unit.engine, 8)
        send_requests(unit.engine, 8)
        yield unit, prometheus
    finally:
        unit.stop()
        prometheus.stop()


def all_up(prometheus: Prometheus) -> bool:
    targets = prometheus.targets()
    return len(targets) == 2 and all(t["health"] == "up" for t in targets)


def finite_series(prometheus: Prometheus, expr: str) -> list[dict]:
    return [r for r in prometheus.query(expr) if math.isfinite(float(r["value"][1]))]


def test_every_dashboard_query_and_recording_rule_has_a_series(stack):
    _, prometheus = stack
    queries = [
        (title, expr.replace("$instance", ".*").replace("$gpu", ".*"))
        for title, expr in committed_queries()
    ]
    groups = yaml.safe_load(RULES.read_text())["groups"]
    queries += [(r["record"], r["record"]) for g in groups for r in g["rules"] if "record" in r]
    assert len(queries) > 30 and DASHBOARD.is_file()
    for title, expr in queries:
        wait_for(lambda e=expr: finite_series(prometheus, e), 15, f"{title}: {expr}")


def test_the_template_variables_list_the_instance_and_both_gpus(stack):
    _, prometheus = stack
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    found = {}
    for name in ("instance", "gpu"):
        query = re.fullmatch(r"label_values\((.+), (\w+)\)", variables[name]["query"])
        match = query.group(1).replace("$instance", ".*")
        found[name] = prometheus.label_values(query.group(2), match)
    assert found == {"instance": ["127.0.0.1"], "gpu": ["0", "1"]}


def test_metrics_serves_the_catalog(stack):
    unit, _ = stack
    text = fetch_text(f"http://{unit.listener}/metrics", timeout_s=5)
    served = set(re.findall(r"^# TYPE (\S+)", text, re.M))  # counters with their _total
    catalog = metrics_catalog.names()
    assert served <= catalog
    assert catalog - served <= MAY_BE_MISSING


def test_a_dead_engine_fires_not_ready_which_resolves_after_the_restart(stack):
    unit, prometheus = stack
    assert prometheus.alerts("GLM5NotReady") == []
    unit.kill_engine()
    assert unit.wait_exited() != 0  # serve ends with the engine; systemd restarts it
    pending = wait_for(
        lambda: [a for a in prometheus.alerts("GLM5NotReady") if a["state"] == "pending"],
        10, "GLM5NotReady pending",
    )  # fmt: skip
    assert pending[0]["labels"]["instance"] == "127.0.0.1"
    wait_for(
        lambda: [a for a in prometheus.alerts("GLM5NotReady") if a["state"] == "firing"],
        NOT_READY_FOR_S + 4, f"GLM5NotReady firing within its for: ({NOT_READY_FOR_S} s)",
    )  # fmt: skip
    unit.start().wait_ready()
    wait_for(lambda: prometheus.alerts("GLM5NotReady") == [], 15, "GLM5NotReady resolved")
    restarted = wait_for(
        lambda: prometheus.alerts("GLM5EngineRestarted"), 15, "GLM5EngineRestarted"
    )
    assert restarted[0]["state"] == "firing"
