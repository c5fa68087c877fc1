"""tune's own files read strictly (file, key, cause, fix; never a traceback), and `tune
apply` on real file systems: through symlinks, comments kept, nothing left on a full or
read-only disk, exactly what it reports."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from glm5svc.cli import main
from glm5svc.config_yaml import parse_yaml
from glm5svc.errors import EXIT_CONFIG, ConfigError
from glm5svc.tune.apply import apply_tune, edited_text, read_overlay
from glm5svc.tune.confirmation import confirmation_for
from glm5svc.tune.outputs import checked_summary as read_summary
from glm5svc.tune.session import read_study
from tests.corpus.test_corpus import fill

CONFIG = """\
# the operator's notes
server:
  host: 127.0.0.1  # loopback only
  extra_args: [--page-size, "16"]

tuning:
  # measured on the H200
  max_running_requests: 32
"""


def confirmed(overlay: str) -> str:
    """summary.json of a run whose confirmation tested `overlay` (tuned.yaml's text)."""
    try:
        tested = yaml.safe_load(overlay)
    except yaml.YAMLError:
        tested = None
    tested = tested if isinstance(tested, dict) else {}
    summary = {"confirmed": True, "confirmation": "confirmed"}
    return json.dumps({**summary, "confirmation_for": confirmation_for(tested)})


def run_dir(tmp_path: Path, overlay: str) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    (folder / "tuned.yaml").write_text(overlay)
    # Confirmed, measured nowhere known: applied with force.
    (folder / "summary.json").write_text(confirmed(overlay))
    return folder


def test_apply_writes_through_a_symlink_keeping_comments_and_reports_what_it_wrote(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text(CONFIG)
    link = tmp_path / "glm5.yaml"
    link.symlink_to(real)
    folder = run_dir(tmp_path, "tuning: {max_running_requests: 64}\n")
    result = apply_tune(folder, str(link), restart=False, force=True)
    assert link.is_symlink() and Path(result["written"]) == real
    text = real.read_text()
    for comment in ("# the operator's notes", "# loopback only", "# measured on the H200"):
        assert comment in text
    written = yaml.safe_load(text)
    assert written["tuning"]["max_running_requests"] == 64
    assert result["changed"] == {"tuning": {"max_running_requests": 64}}
    assert Path(result["backup"]).read_text() == CONFIG
    assert list(written) == ["server", "tuning"]  # the order stays


@pytest.mark.parametrize(
    ("overlay", "said"),
    [
        ("tuning: [1, 2]\n", "tuning: must be a mapping"),
        ("tuning: {no_such_key: 1}\n", "tuning.no_such_key"),
        ("server: {extra_args: --flag}\n", "server.extra_args: must be a list"),
        ("server: {extra_args: ['8192']}\n", "comes before any flag"),
        ("server: {host: 0.0.0.0}\n", "server: must hold extra_args only"),
        ("- a\n", "(top level)"),
        ("gpus: {}\n", "gpus: unknown key"),
        ("tuning: {a: 1\n", "line"),
    ],
)
def test_a_broken_overlay_is_refused_naming_file_key_and_fix(tmp_path, capsys, overlay, said):
    config = tmp_path / "glm5.yaml"
    config.write_text(CONFIG)
    folder = run_dir(tmp_path, overlay)
    status = main(["--config", str(config), "tune", "apply", str(folder), "--force", "--json"])
    out, err = capsys.readouterr()
    assert status == EXIT_CONFIG and "Traceback" not in err
    document = json.loads(out)
    assert document["ok"] is False and said in document["error"]
    assert "tuned.yaml" in document["error"]
    assert "tune run" in document["error"] or "fix the YAML" in document["error"]
    assert config.read_text() == CONFIG and len(list(tmp_path.iterdir())) == 2  # no backup


def _mount(folder: Path, options: str) -> bool:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    return done.returncode == 0


@pytest.mark.parametrize("trouble", ["full", "read-only"])
def test_apply_leaves_nothing_on_a_full_or_read_only_disk(tmp_path, trouble):
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not _mount(disk, "size=16k"):
        pytest.skip("needs root and tmpfs mounts")
    try:
        config = disk / "glm5.yaml"
        config.write_text(CONFIG)
        if trouble == "full":
            fill(disk)
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        before = sorted(p.name for p in disk.iterdir())
        folder = run_dir(tmp_path, "tuning: {max_running_requests: 64}\n")
        with pytest.raises(Exception) as caught:
            apply_tune(folder, str(config), restart=False, force=True)
        message = str(caught.value)
        expected = "free at least" if trouble == "full" else "read-only file system"
        assert expected in message and str(disk) in message
        assert sorted(p.name for p in disk.iterdir()) == before  # no backup, no temp file
        assert config.read_text() == CONFIG
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_tune_json_of_the_wrong_shape_is_refused_naming_the_key(tmp_path):
    (tmp_path / "tune.json").write_text(json.dumps({"workload": [], "settings": {}}))
    with pytest.raises(ConfigError, match=r"tune\.json: workload: a list, expected an object"):
        read_study(tmp_path)
    (tmp_path / "tune.json").write_text(json.dumps({"workload": {}, "setings": {}}))
    with pytest.raises(ConfigError) as raised:
        read_study(tmp_path)  # the keys of this file's own level, not the configuration's
    assert "settings: missing" in str(raised.value)
    assert "a tune.json holds workload, settings, space, start" in str(raised.value)
    (tmp_path / "tune.json").write_text("{")
    with pytest.raises(ConfigError, match="not JSON"):
        read_study(tmp_path)


def test_a_corrupt_study_db_is_refused(tmp_path):
    study = {"workload": {}, "settings": {}, "space": {}, "start": {}}
    (tmp_path / "tune.json").write_text(json.dumps(study))
    (tmp_path / "study.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match=r"study\.db: \(file\): not an SQLite database"):
        read_study(tmp_path)
    (tmp_path / "study.db").unlink()
    with sqlite3.connect(tmp_path / "study.db") as db:
        db.execute("CREATE TABLE other (x)")
    with pytest.raises(ConfigError, match="without Optuna's tables"):
        read_study(tmp_path)


@pytest.mark.parametrize(
    ("summary", "said"),
    [
        ([], "(top level)"),
        ({"trials": {}}, "trials: a dict, not a list"),
        ({"trials": [1]}, "trials[0]: not an object"),
        ({"trials": [{"trial": "0"}]}, "trials[0].trial"),
    ],
)
def test_a_summary_from_somewhere_else_is_refused(tmp_path, capsys, summary, said):
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError) as caught:
        read_summary(tmp_path)
    assert said in str(caught.value)
    assert main(["tune", "show", str(tmp_path)]) == EXIT_CONFIG
    assert "Traceback" not in capsys.readouterr().err


def test_overlay_reader_accepts_what_tune_writes(tmp_path):
    folder = run_dir(tmp_path, "server: {extra_args: [--chunked-prefill-size, '4096']}\n")
    assert read_overlay(folder) == {"server": {"extra_args": ["--chunked-prefill-size", "4096"]}}


def test_apply_writes_a_json_style_configuration_as_block_yaml_one_key_a_line():
    mapping = {
        "model": {"path": "/models/m"},
        "server": {"host": "127.0.0.1", "command": ["python", "engine.py", "--test-mode"]},
        "service": {"listen_port": 30001, "results_dir": "/var/lib/glm5"},
    }
    text = json.dumps(mapping, indent=2) + "\n"
    merged = {**mapping, "tuning": {"max_running_requests": 64}}
    written = edited_text(text, merged, "# Tuned by `glm5svc tune apply run`\n")
    assert parse_yaml(written, "glm5.yaml").data == merged
    lines = written.splitlines()
    assert max(map(len, lines)) < 60 and "  max_running_requests: 64" in lines
    assert "server:" in lines and "    - engine.py" in lines  # block style, unquoted


RESUME = "glm5svc tune run --resume {run} --budget 3m"


@pytest.mark.parametrize(
    ("summary", "said"),
    [
        ({"confirmed": False, "confirmation": "failed",
          "confirmation_detail": "its gain was not reproduced by a fresh engine start: -2 %"},
         ["the confirmation failed: its gain was not reproduced", "-2 %", "Keep the current"]),
        ({"confirmed": False, "confirmation": "cut", "confirmation_detail": "stopped by a signal",
          "confirmation_command": RESUME},
         ["the confirmation was interrupted: stopped by a signal", f"To confirm it: `{RESUME}`"]),
        ({"confirmed": False, "confirmation": "not-run",
          "confirmation_detail": "no confirming start was made: the time budget is spent",
          "confirmation_command": RESUME},
         ["the confirmation never ran: no confirming start was made: the time budget is spent",
          f"To confirm it: `{RESUME}`"]),
        # Older run directories: a status words only, or none at all; the resume's budget
        # from the starts' measured wall time (four of 100 s, and the stop: 7 minutes).
        ({"confirmed": True, "confirmation": "confirmed by a fresh start (start 2)",
          "trials": [{"trial": 0, "start": 0, "setting": "(the start)", "status": "measured",
                      "runs": 4, "verdict": "the start", "best": False, "diagnosis": "",
                      "wall_s": 100.0}]},
         ["records no confirmation", "--budget 7m"]),
        ({}, ["records no confirmation", "--budget 1h"]),
        # Confirmed, but not this overlay (an earlier best's confirmation), or not saying
        # which configuration it tested (an older glm5svc): a resume confirms this one.
        ({"confirmed": True, "confirmation": "confirmed",
          "confirmation_for": confirmation_for({"tuning": {"max_running_requests": 8}})},
         ["is not the configuration its confirmation tested",
          "To confirm this one: `glm5svc tune run --resume {run}`"]),
        ({"confirmed": True, "confirmation": "confirmed"},
         ["does not name the configuration its confirmation tested",
          "`glm5svc tune run --resume {run}`"]),
    ],
)  # fmt: skip
def test_apply_refuses_a_best_not_confirmed_saying_what_happened(tmp_path, capsys, summary, said):
    """Whatever tuned.yaml holds (an older run wrote the change), apply says what happened
    and what would confirm it, even with --force, and writes nothing (exit 78)."""
    config = tmp_path / "glm5.yaml"
    config.write_text(CONFIG)
    folder = run_dir(tmp_path, "tuning: {max_running_requests: 64}\n")
    (folder / "summary.json").write_text(json.dumps(summary).replace("{run}", str(folder)))
    for force in ([], ["--force"]):
        status = main(["--config", str(config), "tune", "apply", str(folder), "--no-restart",
                       "--json", *force])  # fmt: skip
        document = json.loads(capsys.readouterr().out)
        assert status == EXIT_CONFIG and document["ok"] is False
        for words in said:
            assert words.replace("{run}", str(folder)) in document["error"], document["error"]
        assert "nothing is applied" in document["error"]
    assert config.read_text() == CONFIG and sorted(p.name for p in tmp_path.iterdir()) == [
        "glm5.yaml", "run"
    ]  # fmt: skip


def test_apply_refuses_a_tune_that_has_not_finished(tmp_path):
    folder = run_dir(tmp_path, "tuning: {max_running_requests: 64}\n")
    (folder / "summary.json").unlink()
    (folder / "tune.json").write_text("{}")
    config = tmp_path / "glm5.yaml"
    config.write_text(CONFIG)
    with pytest.raises(ConfigError, match="has not finished"):
        apply_tune(folder, str(config), restart=False, force=True)
    assert config.read_text() == CONFIG


def test_applying_an_applied_run_again_says_so_and_changes_nothing(tmp_path, capsys):
    config = tmp_path / "glm5.yaml"
    config.write_text(CONFIG)
    folder = run_dir(tmp_path, "tuning: {max_running_requests: 64}\n")
    first = apply_tune(folder, str(config), restart=False, force=True)
    assert first["changed"] == {"tuning": {"max_running_requests": 64}}
    applied = config.read_bytes()
    backups = sorted(tmp_path.glob("glm5.yaml.before-tune-*"))
    assert len(backups) == 1
    status = main(["--config", str(config), "tune", "apply", str(folder), "--force"])
    said = capsys.readouterr().out
    assert status == 0 and "already applied" in said and "by `tune apply` of this run" in said
    assert config.read_bytes() == applied
    assert sorted(tmp_path.glob("glm5.yaml.before-tune-*")) == backups  # no second backup
    again = apply_tune(folder, str(config), restart=True, force=True)
    assert again["already_applied"] is True and again["restarted"] is False
    assert again["changed"] == {} and "backup" not in again


@pytest.mark.timeout(60)  # sqlite opening the FIFO would block until then
def test_a_fifo_as_study_db_is_refused_before_sqlite_opens_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "tune.json").write_text(
        json.dumps({"workload": {}, "settings": {}, "space": {}, "start": {}})
    )
    os.mkfifo(run_dir / "study.db")
    config = tmp_path / "glm5.yaml"
    config.write_text("{}\n")
    assert main(["--config", str(config), "tune", "run", "--resume", str(run_dir)]) == EXIT_CONFIG
    said = capsys.readouterr().err
    assert f"study.db: {run_dir / 'study.db'}: it is a FIFO" in said
