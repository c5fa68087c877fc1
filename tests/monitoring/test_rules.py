"""The shipped Prometheus rules: they are what `glm5svc rules` renders for the default
objectives, promtool accepts them, every alert has a unit test where it fires and one where it
stays quiet through healthy operation, and the names they read are ones something serves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from glm5svc import metrics_catalog
from glm5svc.config import MonitoringSection
from glm5svc.monitoring_rules import OBJECTIVES, SHIPPED, render, render_text
from testkit.prometheus import RULES, binary
from tests.monitoring.promtool_cases import burn_cases, completed

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "glm5svc-rules.test.yml"
REPO = HERE.parents[1]
RECORDED_ENGINE = sorted((REPO / "tests" / "fixtures" / "real_engine").glob("*/metrics-*.txt"))
RUNBOOK_COMMANDS = ("glm5svc status", "glm5svc preflight", "journalctl -u glm5", "glm5svc bench",
                    "glm5svc telemetry", "glm5svc command", "systemctl status",
                    "glm5svc night")  # fmt: skip
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "by", "on", "and", "or", "unless", "rate", "increase", "resets",
    "histogram_quantile", "without", "count", "label_values", "vector", "time",
}  # fmt: skip
# Always firing by design: its quiet side is the dead man's switch's alarm, outside Prometheus.
ALWAYS_FIRING = {"Watchdog"}
# Objectives other than the defaults, to show the rules follow the configuration.
STRICTER = MonitoringSection.model_validate(
    {
        "ttft": {"threshold_s": 4, "target": 0.999},
        "itl": {"threshold_s": 0.04, "target": 0.995},
        "queue_time": {"threshold_s": 5, "target": 0.95},
        "errors": {"target": 0.9999},
    }
)


def promtool(*args: str, cwd: Path = HERE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary("promtool"), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def alerts() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


def unit_tests(rule_file: Path, monitoring: MonitoringSection, only: str | None = None) -> dict:
    """The committed cases and the objectives' burn-rate cases, annotations filled in; with
    `only`, the cases that check that alert."""
    cases = yaml.safe_load(UNIT_TESTS.read_text())
    cases["tests"] += burn_cases(monitoring)
    if only:
        cases["tests"] = [
            test for test in cases["tests"]
            if any(check["alertname"] == only for check in test.get("alert_rule_test", []))
        ]  # fmt: skip
    return completed(cases, yaml.safe_load(rule_file.read_text()), str(rule_file))


def run_unit_tests(
    folder: Path, rule_file: Path, monitoring: MonitoringSection, only: str | None = None
):
    (folder / "tests.yml").write_text(yaml.safe_dump(unit_tests(rule_file, monitoring, only)))
    return promtool("test", "rules", "tests.yml", cwd=folder)


def test_the_shipped_rules_are_the_default_objectives_rendering():
    assert SHIPPED == RULES
    assert RULES.read_text() == render_text(MonitoringSection())


def test_promtool_checks_the_rules():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass(tmp_path):
    done = run_unit_tests(tmp_path, RULES, MonitoringSection())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_other_objectives_render_rules_their_cases_pass(tmp_path):
    rule_file = tmp_path / "rules.yml"
    rule_file.write_text(render_text(STRICTER))
    assert 'le="4.0"' in rule_file.read_text() and "(14.4 * 0.001)" in rule_file.read_text()
    for alert, _ in OBJECTIVES.values():
        done = run_unit_tests(tmp_path, rule_file, STRICTER, only=alert)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("old", "new", "alert"),
    [
        ("(sglang:token_usage) > 0.95", "(sglang:token_usage) > 1", "GLM5KvCacheFull"),
        ("|draining|stopped", "|stopped", "GLM5NotReady"),
        (  # the page's second short window left out
            'ratio_rate30m{slo="ttft"} > (6',
            'ratio_rate6h{slo="ttft"} > (6',
            "GLM5TimeToFirstTokenBudgetBurn",
        ),
    ],
)
def test_the_unit_tests_catch_a_changed_rule(tmp_path, old, new, alert):
    """Copy the rules with one condition moved: the unit tests must fail on that alert."""
    changed = RULES.read_text().replace(old, new)
    assert changed != RULES.read_text()
    (tmp_path / "rules.yml").write_text(changed)
    done = run_unit_tests(tmp_path, tmp_path / "rules.yml", MonitoringSection(), only=alert)
    assert done.returncode != 0
    assert f"alertname: {alert}" in done.stdout + done.stderr


def test_the_start_budget_and_runbook_url_follow_the_configuration():
    monitoring = MonitoringSection.model_validate(
        {"start_budget_s": 1200, "runbook_url": "https://git.example.org/o.md"}
    )
    found = {
        rule["alert"]: rule
        for group in render(monitoring)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert found["GLM5StartTooLong"]["for"] == "20m"
    urls = {rule["annotations"]["runbook_url"] for rule in found.values()}
    assert "https://git.example.org/o.md#glm5notready" in urls


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
    found = cases(unit_tests(RULES, MonitoringSection()))
    missing = [
        f"{rule['alert']}: {what}"
        for rule in alerts()
        for what in ("fires", "quiet")
        if not found.get(rule["alert"], {}).get(what)
        and not (what == "quiet" and rule["alert"] in ALWAYS_FIRING)
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


def test_every_alert_has_a_summary_a_description_naming_a_command_and_a_runbook_url():
    text = (REPO / "docs" / "observability.md").read_text()
    for rule in alerts():
        name, annotations = rule["alert"], rule.get("annotations", {})
        assert annotations.get("summary"), name
        description = annotations.get("description", "")
        assert any(command in description for command in RUNBOOK_COMMANDS), name
        assert annotations["runbook_url"] == f"docs/observability.md#{name.lower()}"
        assert f"### {name}\n" in text, f"{name}: no section for its runbook_url"
        severities = ("none",) if name in ALWAYS_FIRING else ("warning", "critical")
        assert rule["labels"]["severity"] in severities, name


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
    assert [name for name in names if f"`{name}`" not in text and f"### {name}\n" not in text] == []
