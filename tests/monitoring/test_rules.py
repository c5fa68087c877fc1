"""The shipped Prometheus rules: promtool accepts them, every alert has a unit test where it
fires and one where it stays quiet, and the names they read are ones something serves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from glm5svc import metrics_catalog
from testkit.prometheus import RULES, binary

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "glm5svc-rules.test.yml"
REPO = HERE.parents[1]
RECORDED_ENGINE = sorted((REPO / "tests" / "fixtures" / "real_engine").glob("*/metrics-*.txt"))
RUNBOOK_COMMANDS = ("glm5svc status", "glm5svc preflight", "journalctl -u glm5", "glm5svc bench",
                    "glm5svc telemetry", "glm5svc command", "glm5svc night")  # fmt: skip
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "by", "on", "and", "or", "unless", "rate", "increase", "resets",
    "histogram_quantile", "without", "count", "label_values",
}  # fmt: skip


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary("promtool"), *args], capture_output=True, text=True, timeout=60, cwd=HERE
    )


def rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def alerts() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


def test_promtool_checks_the_rules():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass():
    done = promtool("test", "rules", UNIT_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_unit_tests_catch_a_changed_threshold(tmp_path):
    """Copy the rules with the KV-cache threshold moved: the unit tests must fail."""
    (tmp_path / "rules").mkdir()
    changed = RULES.read_text().replace("(sglang:token_usage) > 0.95", "(sglang:token_usage) > 1")
    assert changed != RULES.read_text()
    (tmp_path / "rules" / RULES.name).write_text(changed)
    (tmp_path / "tests").mkdir()
    text = UNIT_TESTS.read_text().replace("../../glm5svc/data/monitoring/", "../rules/")
    (tmp_path / "tests" / UNIT_TESTS.name).write_text(text)
    done = subprocess.run(
        [binary("promtool"), "test", "rules", UNIT_TESTS.name],
        capture_output=True, text=True, timeout=60, cwd=tmp_path / "tests",
    )  # fmt: skip
    assert done.returncode != 0
    assert "alertname: GLM5KvCacheFull" in done.stdout + done.stderr


def cases(document: dict) -> dict[str, dict[str, int]]:
    """Per alert name: how many evaluations saw it fire, and how many saw an instance of the
    test's input series stay quiet."""
    found: dict[str, dict[str, int]] = {}
    for test in document["tests"]:
        instances = {
            match for series in test.get("input_series", [])
            for match in re.findall(r'instance="([^"]+)"', series["series"])
        }  # fmt: skip
        for check in test.get("alert_rule_test", []):
            counts = found.setdefault(check["alertname"], {"fires": 0, "quiet": 0})
            firing = {alert["exp_labels"].get("instance") for alert in check.get("exp_alerts", [])}
            counts["fires"] += bool(firing)
            counts["quiet"] += bool(instances - firing)
    return found


def test_every_alert_has_a_firing_and_a_quiet_case():
    found = cases(yaml.safe_load(UNIT_TESTS.read_text()))
    missing = [
        f"{rule['alert']}: {what}"
        for rule in alerts()
        for what in ("fires", "quiet")
        if not found.get(rule["alert"], {}).get(what)
    ]
    assert missing == []


def test_the_case_counter_sees_a_missing_quiet_case():
    document = {
        "tests": [
            {
                "input_series": [{"series": 'x{instance="r1"}'}],
                "alert_rule_test": [
                    {"alertname": "A", "exp_alerts": [{"exp_labels": {"instance": "r1"}}]}
                ],
            }
        ]
    }  # fmt: skip
    assert cases(document) == {"A": {"fires": 1, "quiet": 0}}


def test_every_alert_has_a_summary_and_a_runbook_naming_a_command():
    for rule in alerts():
        annotations = rule.get("annotations", {})
        assert annotations.get("summary"), rule["alert"]
        runbook = annotations.get("runbook", "")
        assert any(command in runbook for command in RUNBOOK_COMMANDS), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects."""
    text = re.sub(r'"[^"]*"', '""', expr)  # label values and strings
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)  # label matchers, ranges
    text = re.sub(r"\bby\s*\([^)]*\)|\bon\s*\([^)]*\)", "", text)  # grouping labels
    words = re.findall(r"[a-zA-Z_][\w:]*", text)
    return {word for word in words if word not in PROMQL_WORDS}


def served_names() -> set[str]:
    """What glm5svc's /metrics serves, what sglang 0.5.11 served (recorded), and `up`."""
    glm5svc = metrics_catalog.names()
    sglang = set()
    for path in RECORDED_ENGINE:
        sglang |= set(re.findall(r"^(sglang:\w+)", path.read_text(), re.M))
    return glm5svc | sglang | {"up"}


def test_the_rules_read_only_served_or_recorded_names():
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    used = set().union(*(metric_names(rule["expr"]) for rule in rules()))
    unknown = used - served_names() - recorded
    assert unknown == set()
    assert {"sglang:time_to_first_token_seconds_bucket", "glm5svc_ready"} <= used


def test_the_name_reader_finds_selectors_and_skips_labels():
    expr = 'max by (instance) (rate(a_total{job="x:y"}[1m])) / on (gpu) b:c:d > 0.3'
    assert metric_names(expr) == {"a_total", "b:c:d"}


def test_the_observability_doc_names_every_alert_and_recorded_series():
    text = (REPO / "docs" / "observability.md").read_text()
    names = [rule.get("alert") or rule["record"] for rule in rules()]
    assert [name for name in names if f"`{name}`" not in text] == []
