"""`scripts/try --night`, from the checkout as a new user runs it: a short night on the test
engine under the stand-in service manager ends tuned (the try-out's cap of 4 under 16
concurrent requests; 64 is the tune's confirmed pick), says where its report is and prints
it, and leaves nothing running."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from testkit import systemctl_stand_in as systemctl
from testkit.bench_venv import build_bench_serving_venv

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.long  # minutes of engines under load: scheduled first


@pytest.mark.timeout(900)
def test_the_try_out_night_runs_and_says_where_its_report_is():
    build_bench_serving_venv()  # the try-out reuses the tests' bench_serving venv
    done = subprocess.run([str(REPO / "scripts" / "try"), "--night", "--short"],
                          capture_output=True, text=True, cwd="/", timeout=880)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    report = Path(re.search(r"^try: the night ended tuned; the night's report: (\S+)$", out,
                            re.MULTILINE).group(1))  # fmt: skip
    text = report.read_text()
    assert text in out  # printed whole
    assert text.startswith("# The night of ") and "## What ran" in text
    document = json.loads((report.parent / "report.json").read_text())
    assert document["outcome"] == "tuned", document["headline"]
    assert document["changed"] == {"tuning": {"max_running_requests": 64}}
    comparison = document["comparison"]
    assert comparison["rollback"] is False and comparison["starts"] == [1, 1]
    assert document["evening"]["windows"] and len(document["morning"]["windows"]) == 2
    # Each step as the state file recorded it, while the night ran.
    for step in ("baseline", "tune", "apply", "morning", "compare", "report"):
        assert f"try: night: {step}: " in out, step
    work = Path(re.search(r"everything is in (\S+)$", out, re.MULTILINE).group(1))
    manager = work / "systemd"
    assert report.is_relative_to(work / "results" / "night")
    for unit in ("glm5.service", "glm5-tune.service"):
        assert systemctl.unit_pid(manager, unit) is None, unit  # nothing left running
    calls = (manager / "calls").read_text().splitlines()
    assert "start --no-block glm5-tune.service" in calls and "restart glm5.service" in calls
