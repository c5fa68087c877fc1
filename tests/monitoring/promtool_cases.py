"""What test_rules.py hands `promtool test rules`: the committed cases with each expected
alert's annotations filled in from the rules, and the burn-rate cases of each objective."""

from __future__ import annotations

import re

from glm5svc.config import OBJECTIVE_HISTOGRAMS, MonitoringSection
from glm5svc.monitoring_rules import OBJECTIVES

TEMPLATE = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")


def alert_rules(document: dict) -> list[dict]:
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def annotations_for(rules: list[dict], name: str, labels: dict) -> dict:
    """The annotations the rule named `name` gives an alert with `labels` (its severity and
    slo pick one of the rules that share a name)."""
    found = [
        rule for rule in rules
        if rule["alert"] == name
        and all(labels.get(key) == value for key, value in rule.get("labels", {}).items())
    ]  # fmt: skip
    assert len(found) == 1, f"{name} {labels}: {len(found)} rules match"

    def expand(text: str) -> str:
        assert "{{" not in TEMPLATE.sub("", text), f"{name}: a template other than $labels"
        return TEMPLATE.sub(lambda match: labels[match.group(1)], text)

    return {key: expand(text) for key, text in found[0]["annotations"].items()}


def completed(cases: dict, rules_document: dict, rule_file: str) -> dict:
    """`cases` reading `rule_file`, every expected alert with its annotations."""
    rules = alert_rules(rules_document)
    for test in cases["tests"]:
        for check in test.get("alert_rule_test", []):
            for alert in check.get("exp_alerts", []):
                alert.setdefault(
                    "exp_annotations",
                    annotations_for(rules, check["alertname"], alert["exp_labels"]),
                )
    return {**cases, "rule_files": [rule_file]}


def counter(phases: list[tuple[int, float]]) -> str:
    """promtool values of a counter that grows by `per_minute` for `minutes`, phase by
    phase: [(30, 5.0), (30, 0.0)]."""
    parts, value, first = [], 0.0, True
    for minutes, per_minute in phases:
        begin = value if first else value + per_minute
        count = minutes if first else minutes - 1
        parts.append(f"{begin:g}+{per_minute:g}x{count}")
        value = begin + per_minute * count
        first = False
    return " ".join(parts)


def objective_series(
    key: str, monitoring: MonitoringSection, instance: str, phases: list[tuple[int, float]]
) -> list[dict]:
    """Traffic for objective `key` at 100 events a minute, phase by phase (minutes, the share
    of them outside the objective); the errors' case adds health checks that answer 503 (a
    start, a drain), which are not what users send."""
    good = counter([(minutes, 100 * (1 - bad)) for minutes, bad in phases])
    total = counter([(minutes, 100.0) for minutes, _ in phases])
    if key == "errors":
        bad = counter([(minutes, 100 * share) for minutes, share in phases])
        answers = f'sglang:http_responses_total{{instance="{instance}",endpoint='
        return [
            {"series": answers + '"/generate",status_code="200"}', "values": good},
            {"series": answers + '"/generate",status_code="500"}', "values": bad},
            {"series": answers + '"/health_generate",status_code="503"}', "values": total},
        ]
    family = f"sglang:{OBJECTIVE_HISTOGRAMS[key]}"
    bound = str(float(getattr(monitoring, key).threshold_s))
    return [
        {"series": f'{family}_bucket{{instance="{instance}",le="{bound}"}}', "values": good},
        {"series": f'{family}_count{{instance="{instance}"}}', "values": total},
    ]


def burn_cases(monitoring: MonitoringSection) -> list[dict]:
    """Per objective: a fast burn pages (r1) while a burn within the budget stays quiet (r2);
    a slow burn only warns; a burn that stops ends the page within minutes."""
    tests = []
    for key, (name, _) in OBJECTIVES.items():
        budget = 1 - getattr(monitoring, key).target
        fast, slow, within = min(20 * budget, 1.0), 4 * budget, 0.5 * budget
        page = {"exp_labels": {"instance": "r1", "severity": "critical", "slo": key}}
        ticket = {"exp_labels": {"instance": "r1", "severity": "warning", "slo": key}}

        def check(at: str, *alerts: dict, name: str = name) -> dict:
            return {"eval_time": at, "alertname": name, "exp_alerts": list(alerts)}

        tests += [
            {
                "name": f"{key}: a burn 20x the budget pages; half the budget stays quiet",
                "interval": "1m",
                "input_series": objective_series(key, monitoring, "r1", [(120, fast)])
                + objective_series(key, monitoring, "r2", [(120, within)]),
                "alert_rule_test": [check("1m"), check("10m", page), check("60m", page, ticket)],
            },
            {
                "name": f"{key}: a burn 4x the budget warns, and pages no one",
                "interval": "1m",
                "input_series": objective_series(key, monitoring, "r1", [(120, slow)]),
                "alert_rule_test": [check("10m"), check("60m", ticket)],
            },
            {
                "name": f"{key}: the page ends within 30 minutes of the burn; the ticket stays",
                "interval": "1m",
                "input_series": objective_series(key, monitoring, "r1", [(30, fast), (40, 0.0)]),
                "alert_rule_test": [check("25m", page, ticket), check("66m", ticket)],
            },
        ]
    return tests
