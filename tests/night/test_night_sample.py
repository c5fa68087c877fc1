"""The sample morning report in docs/ is what the current code writes: its markdown is
rendered from its JSON (a real report.json of `scripts/try --night`) by today's
report_markdown, and the JSON has today's report's keys. After a change to the report,
regenerate it: `scripts/try --night --sample docs`."""

from __future__ import annotations

import json
from pathlib import Path

from glm5svc.night.report import report_document
from glm5svc.night.state import NightState
from testkit.night_sample import render
from testkit.try_night import CHECKOUT, SAMPLE_STEM

DOCS = Path(__file__).resolve().parents[2] / "docs"
SAMPLE_JSON, SAMPLE_MD = DOCS / f"{SAMPLE_STEM}.json", DOCS / f"{SAMPLE_STEM}.md"
REGENERATE = "regenerate it: scripts/try --night --sample docs"


def test_the_sample_report_is_the_current_codes_format(tmp_path):
    assert render(SAMPLE_JSON) == SAMPLE_MD.read_text(), REGENERATE
    sample = json.loads(SAMPLE_JSON.read_text())
    state = NightState(tmp_path, "/etc/glm5/glm5.yaml", "2026-12-04T20:00:00+00:00",
                       "2026-12-05T04:00:00+00:00", 28800.0, {"concurrency": 8}, 3, [])  # fmt: skip
    assert set(sample) == set(report_document(state)), REGENERATE
    assert sample["outcome"] == "tuned" and sample["comparison"]["text"]
    # Nothing of the machine that made it but the checkout's name for itself.
    assert CHECKOUT in sample["night_dir"] and "/work/" not in SAMPLE_JSON.read_text()
