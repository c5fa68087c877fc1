"""The corpus of broken inputs (tests/corpus/cases/, one file each): configurations, command
lines, tune's files and file systems (FIFOs, folders, symlinks, a full and a read-only
disk). Each case is run as a user would run it, with --json: no traceback, its exit code,
one JSON object on stdout whose error names the file, key, cause and fix the case lists,
and for a configuration (or a search space: `validate` then names `--space FILE`) `validate`
refuses it with the same words. Then every subcommand
runs over every case's files and none may end in a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glm5svc.cli import COMMAND_MODULES, main

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))
REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "glm5svc/data/baselines/reference-8x-rtx-pro-6000.json"
MADE_BY_SETUP = ("fifo", "mkdir", "symlink")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def filled(value: str, folder: Path) -> str:
    return value.replace("{dir}", str(folder))


def _mount(folder: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a tmpfs mount needs root")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


def fill(folder: Path) -> None:
    """Fill the (small tmpfs) file system of `folder` until a write fails."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"x" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def lay_out(case: dict, folder: Path) -> list[Path]:
    """The case's files and special files under `folder`; the tmpfs mounts it made."""
    ops = [op.split(":") for op in case["setup"]]
    mounts = [folder / op[1] for op in ops if op[0] == "mount"]
    for mount in mounts:
        _mount(mount)
    made = {op[1] for op in ops if op[0] in MADE_BY_SETUP}
    for name, text in case["files"].items():
        if name in made:
            continue
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text == "@empty-baseline":
            baseline = json.loads(BASELINE.read_text())
            baseline["levels"] = {}
            text = json.dumps(baseline)
        path.write_text(filled(text, folder), encoding="utf-8")
    for kind, *rest in ops:
        target = folder / rest[0]
        if kind == "fifo":
            target.parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(target, 0o600)
        elif kind == "mkdir":
            target.mkdir(parents=True, exist_ok=True)
        elif kind == "symlink":
            target.symlink_to(folder / rest[1])
        elif kind == "chmod":
            target.chmod(int(rest[1], 8))
        elif kind == "remount-ro":
            subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        elif kind == "fill":
            fill(target)
    return mounts


@pytest.fixture
def case_dir(tmp_path):
    mounts: list[Path] = []
    yield tmp_path, mounts
    for mount in mounts:
        subprocess.run(["umount", str(mount)], check=False)


def glm5svc(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GLM5SVC_CONFIG": str(cwd / "glm5.yaml")}
    return subprocess.run(
        [sys.executable, "-m", "glm5svc", *argv], capture_output=True, text=True, timeout=120,
        cwd=cwd, env=env,
    )  # fmt: skip


def test_the_corpus_has_forty_cases_or_more_of_every_kind():
    cases = [load(path) for path in CASES]
    assert len(cases) >= 40
    assert sum(bool(c["validate"]) for c in cases) >= 20  # configurations, search spaces
    assert sum(c["exit"] == 2 for c in cases) >= 5  # command lines
    assert sum("tune" in c["argv"] for c in cases) >= 8  # tune's files
    setups = {op.split(":")[0] for c in cases for op in c["setup"]}
    assert {"fifo", "symlink", "mount", "remount-ro", "fill"} <= setups


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_each_broken_input_gets_a_clean_answer(path, case_dir):
    folder, mounts = case_dir
    case = load(path)
    mounts += lay_out(case, folder)
    argv = [filled(token, folder) for token in case["argv"]] + ["--json"]
    done = glm5svc(argv, folder)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == case["exit"], (done.returncode, done.stderr)
    document = json.loads(done.stdout)  # one JSON object, nothing else on stdout
    assert document["ok"] is False and document["exit_status"] == case["exit"]
    assert isinstance(document["problems"], list)
    said = document["error"]
    missing = [part for part in case["said"] if filled(part, folder) not in said]
    assert not missing, (missing, said)
    if case["validate"]:
        # true, or validate's own arguments beside the file (`--space FILE`)
        extra = [] if case["validate"] is True else [filled(a, folder) for a in case["validate"]]
        checked = glm5svc(["validate", str(folder / "glm5.yaml"), *extra], folder)
        assert checked.returncode == 78 and "Traceback" not in checked.stderr
        first = said.splitlines()[0]
        assert first in checked.stderr, (first, checked.stderr)


SUBCOMMANDS = {
    "bench": ["bench", "--results-dir", "{dir}/bench-results"],
    "command": ["command", "--explain"],
    "night": ["night", "status", "--json"],
    "patch": ["patch", "status"],
    "preflight": ["preflight", "--json"],
    "provision": None,  # runs Ansible against hosts: its own tests cover its inputs
    "rules": ["rules"],
    "serve": ["serve"],
    "status": ["status", "--timeout", "1"],
    "telemetry": ["telemetry", "--json"],
    "tune": ["tune", "show", "{dir}/run"],
    "unit": ["unit"],
    "validate": ["validate"],
}


def test_the_subcommand_table_names_every_command():
    assert set(SUBCOMMANDS) == set(COMMAND_MODULES)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_no_subcommand_answers_the_corpus_with_a_traceback(path, case_dir, capsys, monkeypatch):
    """In one process: an exception escaping main() is the traceback a user would see."""
    folder, mounts = case_dir
    case = load(path)
    mounts += lay_out(case, folder)
    monkeypatch.chdir(folder)
    for name, argv in SUBCOMMANDS.items():
        if argv is None:
            continue
        status = main(["--config", str(folder / "glm5.yaml"), *[filled(a, folder) for a in argv]])
        said = capsys.readouterr()
        assert "Traceback" not in said.err + said.out, (name, said.err)
        assert isinstance(status, int), name
