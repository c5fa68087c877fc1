"""One night process at a time, and a night's folder never taken twice: `night begin` and
`night resume` refused while another process holds the night's lock; two begins at once
leave one night; `--night-dir` on a folder that holds a night is refused, its evening's copy
untouched. No engine: begin plans, then starts glm5-tune.service (the stand-in's, a no-op)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from glm5svc.night.lock import EXIT_BUSY
from glm5svc.night.state import current_night
from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled

HOLD = """
import sys
from pathlib import Path
from glm5svc.night.lock import night_lock
with night_lock(Path(sys.argv[1]), "night resume"):
    print("held", flush=True)
    sys.stdin.read()
"""


def box(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8})
    )
    results = tmp_path / "results"
    config = tmp_path / "glm5.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(model)},
        "server": {"command": [sys.executable, "-c", "pass"]},
        "service": {"run_preflight": False, "results_dir": str(results), "night_textfile": None},
        "telemetry": {"enabled": False},
    }))  # fmt: skip
    manager = tmp_path / "systemd"
    monkeypatch.setenv("PATH", f"{systemctl.install(manager)}:{Path(sys.executable).parent}:"
                               "/usr/bin:/bin")  # fmt: skip
    monkeypatch.setenv(systemctl.FOLDER_ENV, str(manager))
    systemctl.define(manager, "glm5-tune.service", [sys.executable, "-c", "pass"])
    return [sys.executable, "-m", "glm5svc", "--config", str(config)], results


def night(glm5svc, *args) -> subprocess.Popen:
    return subprocess.Popen([*glm5svc, "night", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_begin_and_resume_are_refused_while_another_night_process_holds_the_lock(
    tmp_path, monkeypatch
):
    glm5svc, results = box(tmp_path, monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(results)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        for action in ("begin", "resume"):
            refused = night(glm5svc, action)
            out, err = refused.communicate(timeout=scaled(60))
            assert refused.returncode == EXIT_BUSY, out + err
            assert f"night {action}: refused: another `glm5svc night` process holds" in err
            assert f"{holder.pid} night resume" in err  # the holder, named
        assert current_night(results) is None
    finally:
        holder.communicate("", timeout=scaled(30))


def test_two_begins_at_once_leave_one_night(tmp_path, monkeypatch):
    glm5svc, results = box(tmp_path, monkeypatch)
    begins = [night(glm5svc, "begin", "--json") for _ in range(2)]
    ends = [(b.wait(timeout=scaled(120)), *b.communicate()) for b in begins]
    assert sorted(code for code, _, _ in ends) in ([0, EXIT_BUSY], [0, 78]), ends
    (winner,) = [json.loads(out) for code, out, _ in ends if code == 0]
    (loser,) = [json.loads(out) for code, out, _ in ends if code != 0]
    assert "another `glm5svc night` process holds" in loser["error"] or (
        "a night is in progress" in loser["error"]
    )
    assert current_night(results) == Path(winner["night_dir"])
    assert len(list((results / "night").iterdir())) == 1, "no orphaned folder"


def test_begin_refuses_a_folder_that_holds_a_night(tmp_path, monkeypatch):
    glm5svc, results = box(tmp_path, monkeypatch)
    last_week = tmp_path / "last-week"
    last_week.mkdir()
    (last_week / "evening.yaml").write_text("# last week's evening\n")
    refused = night(glm5svc, "begin", "--night-dir", str(last_week))
    out, err = refused.communicate(timeout=scaled(60))
    assert refused.returncode == 78, out + err
    assert "it holds a night already" in err
    assert (last_week / "evening.yaml").read_text() == "# last week's evening\n"
    assert not (last_week / "night.json").exists() and current_night(results) is None
