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


def run_dir(tmp_path: Path, overlay: str) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    (folder / "tuned.yaml").write_text(overlay)
    (folder / "summary.json").write_text("{}")  # measured nowhere known: applied with force
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


def test_apply_refuses_a_best_that_failed_its_confirming_start(tmp_path, capsys):
    """The tune wrote no overlay (its tuned.yaml is `{}`): apply says why, even with
    --force, and writes nothing."""
    config = tmp_path / "glm5.yaml"
    config.write_text(CONFIG)
    folder = run_dir(tmp_path, "{}\n")
    why = "the confirming start failed: failed"
    (folder / "summary.json").write_text(
        json.dumps({"trials": [], "confirmed": False, "confirmation": why})
    )
    for force in ([], ["--force"]):
        status = main(["--config", str(config), "tune", "apply", str(folder), "--no-restart",
                       "--json", *force])  # fmt: skip
        document = json.loads(capsys.readouterr().out)
        assert status == EXIT_CONFIG and document["ok"] is False
        assert "failed its confirming start" in document["error"] and why in document["error"]
    assert config.read_text() == CONFIG and sorted(p.name for p in tmp_path.iterdir()) == [
        "glm5.yaml", "run"
    ]  # fmt: skip


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
