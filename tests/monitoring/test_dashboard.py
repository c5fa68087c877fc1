"""The committed Grafana dashboard is what the generator (testkit/dashboard.py, Grafana's
Python SDK) makes, and its queries read only names the service, the engine or the rules
give, through the instance and GPU variables."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

from testkit import dashboard
from testkit.prometheus import DASHBOARD, RULES
from tests.monitoring.test_rules import metric_names, served_names

REPO = Path(__file__).resolve().parents[2]


def committed() -> dict:
    return json.loads(DASHBOARD.read_text())


def committed_queries() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in committed()["panels"]
        for target in panel.get("targets", [])
    ]


def test_the_committed_json_is_the_generators_output():
    assert dashboard.main(["--check"]) == 0, "run `python -m testkit.dashboard` and commit"


def test_the_check_names_a_drifted_file(tmp_path, monkeypatch, capsys):
    drifted = tmp_path / "glm5svc-dashboard.json"
    drifted.write_text("{}\n")
    monkeypatch.setattr(dashboard, "OUTPUT", drifted)
    monkeypatch.setattr(dashboard, "REPO", tmp_path)
    assert dashboard.main(["--check"]) == 1
    assert "glm5svc-dashboard.json: out of date" in capsys.readouterr().out
    assert drifted.read_text() == "{}\n"


def test_the_queries_read_served_or_recorded_names():
    rules = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {rule["record"] for group in rules for rule in group["rules"] if "record" in rule}
    used = set().union(*(metric_names(expr) for _, expr in committed_queries()))
    assert used - served_names() - recorded == set()


def test_it_has_the_service_engine_and_gpu_panels():
    titles = {title for title, _ in committed_queries()}
    assert {
        "Phase", "Ready", "Restarts (1 h)", "Post-start benchmark against the baseline",
        "Tokens/s", "Time to first token", "Inter-token latency", "Requests running and queued",
        "KV cache in use", "Prefix cache hits", "Power against the limit", "Clocks",
        "Clock limiting reasons", "PCIe", "Memory",
    } <= titles  # fmt: skip


def test_every_query_goes_through_the_variables():
    variables = {v["name"]: v for v in committed()["templating"]["list"]}
    assert {"datasource", "instance", "gpu"} <= set(variables)
    assert variables["instance"]["includeAll"] and variables["gpu"]["includeAll"]
    for panel in committed()["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'instance=~"$instance"' in target["expr"], panel["title"]
            if "glm5svc_gpu" in target["expr"]:
                assert 'gpu=~"$gpu"' in target["expr"], panel["title"]


def test_glm5svc_needs_nothing_of_the_sdk():
    """The SDK is the generator's (the test extra); glm5svc neither requires nor imports it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [dep for dep in project["dependencies"] if "grafana" in dep]
    assert any("grafana-foundation-sdk" in dep for dep in project["optional-dependencies"]["test"])
    importers = [
        path.relative_to(REPO)
        for path in (REPO / "glm5svc").rglob("*.py")
        if "grafana_foundation_sdk" in path.read_text(encoding="utf-8")
    ]
    assert importers == []


def test_every_legend_names_the_instance_and_every_rate_its_interval():
    for panel in committed()["panels"]:
        for target in panel.get("targets", []):
            if panel["type"] != "heatmap":  # a heatmap's series are its buckets
                assert "{{instance}}" in target["legendFormat"], panel["title"]
            ranges = re.findall(r"\[([^\]]+)\]", target["expr"])
            assert all(r == "$__rate_interval" for r in ranges if panel["type"] != "stat"), panel


def test_it_has_the_request_error_latency_and_heatmap_panels():
    panels = {panel["title"]: panel for panel in committed()["panels"]}
    assert {"Requests/s by status", "Error rate (5xx)", "End-to-end latency", "Queue time"} <= set(
        panels
    )
    heat = panels["Time to first token (heatmap)"]
    assert heat["type"] == "heatmap" and heat["targets"][0]["format"] == "heatmap"
    assert "time_to_first_token_seconds_bucket" in heat["targets"][0]["expr"]


def test_the_grafana_provisioning_files_ship_beside_the_dashboard():
    folder = DASHBOARD.parent / "grafana"
    source = yaml.safe_load((folder / "datasource.yml").read_text())
    provider = yaml.safe_load((folder / "dashboards.yml").read_text())
    assert source["apiVersion"] == provider["apiVersion"] == 1
    (prometheus,) = source["datasources"]
    assert prometheus["type"] == "prometheus"
    role = yaml.safe_load((REPO / "roles/glm5_monitoring/defaults/main.yml").read_text())
    assert prometheus["url"] == f"http://{role['glm5_monitoring_listen_address']}"
    assert prometheus["jsonData"]["timeInterval"] == role["glm5_monitoring_scrape_interval"]
    assert provider["providers"][0]["type"] == "file"
    assert provider["providers"][0]["options"]["path"]
