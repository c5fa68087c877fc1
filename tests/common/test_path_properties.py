"""Trees of files, folders, links (dangling, looping) and FIFOs, fed to every option that
takes a path: each gets exactly one clear answer, the one glm5svc/paths.py gives, never a
traceback or a hang (a FIFO read would block: the timeout mark ends such a test), and
`validate` says what the command says. The fixed samples of docs/reliability.md's table
first, then random trees (Hypothesis)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm5svc import paths
from glm5svc.cli import main
from glm5svc.docgen import lay_out_path_samples
from glm5svc.errors import Glm5Error

pytestmark = pytest.mark.timeout(120)


class Reached(Glm5Error):
    """The command took the path and went on to its real work (stopped here)."""

    exit_status = 99


def reached(*args, **kwargs):
    raise Reached("reached the work past the path checks")


@dataclass(frozen=True)
class Option:
    rule: paths.PathRule
    command: Callable[[Path, Path], list[str]]  # (path, a folder for a config) -> argv
    validate: Callable[[Path, Path], list[str]] | None = None  # what validate is given


def config_with(text: str) -> Callable[[Path, Path], Path]:
    def write(path: Path, folder: Path) -> Path:
        config = folder / "glm5.yaml"
        config.write_text(text.format(path=f"'{path}'"))
        return config

    return write


KEY, MODEL = (
    config_with("server: {{api_key_file: {path}}}\n"),
    config_with("model: {{path: {path}}}\n"),
)
REQUESTS = config_with("benchmark: {{request_file: {path}}}\n")
RESULTS = config_with("service: {{results_dir: {path}}}\n")
PLAIN = config_with("{{}}\n")


def _in(write, *argv: str):
    return lambda path, folder: ["--config", str(write(path, folder)), *argv]


def _validate(write):
    return lambda path, folder: ["validate", str(write(path, folder))]


OPTIONS = {
    "configuration": Option(
        paths.CONFIG,
        lambda p, f: ["--config", str(p), "command"],
        lambda p, f: ["validate", str(p)],
    ),
    "server.api_key_file": Option(paths.API_KEY_FILE, _in(KEY, "command"), _validate(KEY)),
    "model.path": Option(paths.MODEL_PATH, _in(MODEL, "command"), _validate(MODEL)),
    "benchmark.request_file": Option(
        paths.BENCHMARK_REQUEST_FILE, _in(REQUESTS, "bench"), _validate(REQUESTS)
    ),
    "service.results_dir": Option(
        paths.SERVICE_RESULTS_DIR, _in(RESULTS, "bench"), _validate(RESULTS)
    ),
    "--request-file": Option(
        paths.REQUEST_FILE, lambda p, f: _in(PLAIN, "bench", "--request-file", str(p))(p, f)
    ),
    "--results-dir": Option(
        paths.RESULTS_DIR, lambda p, f: _in(PLAIN, "bench", "--results-dir", str(p))(p, f)
    ),
    "--space": Option(
        paths.SPACE,
        lambda p, f: _in(PLAIN, "tune", "run", "--plan", "--space", str(p))(p, f),
        lambda p, f: ["validate", str(PLAIN(p, f)), "--space", str(p)],
    ),
    "--resume": Option(
        paths.RESUME, lambda p, f: _in(PLAIN, "tune", "run", "--plan", "--resume", str(p))(p, f)
    ),
    "--run-dir": Option(
        paths.RUN_DIR, lambda p, f: _in(PLAIN, "tune", "run", "--plan", "--run-dir", str(p))(p, f)
    ),
    "tune show RUN_DIR": Option(
        paths.TUNED_RUN, lambda p, f: _in(PLAIN, "tune", "show", str(p))(p, f)
    ),
    "tune apply RUN_DIR": Option(
        paths.TUNED_RUN, lambda p, f: _in(PLAIN, "tune", "apply", str(p), "--no-restart")(p, f)
    ),
}


@pytest.fixture(autouse=True)
def stop_before_the_work(monkeypatch):
    """No benchmark or tune runs: reaching one is the command's "accepted"."""
    monkeypatch.setattr("glm5svc.bench.run_benchmark", reached)
    monkeypatch.setattr("glm5svc.tune.session.Tune", reached)
    monkeypatch.delenv("GLM5SVC_CONFIG", raising=False)


def answer(argv: list[str], capsys) -> tuple[int, list[str]]:
    """(exit status, the error lines on stderr); one error, no traceback."""
    status = main(argv)
    said = capsys.readouterr().err
    assert "Traceback" not in said, said
    errors = [line for line in said.splitlines() if line.startswith("glm5svc: ")]
    assert len(errors) <= 1, said
    assert (status == 0) == (not errors), (status, said)
    return status, errors


def check(option: Option, path: Path, folder: Path, capsys) -> None:
    problem = option.rule.problem(path)
    status, errors = answer(option.command(path, folder), capsys)
    if problem is not None:
        assert status == 78 and problem in errors[0], (problem, errors)
    if option.validate is not None:
        checked, said = answer(option.validate(path, folder), capsys)
        if checked == 0:  # the command took it too (and went on to its work)
            assert status in (0, Reached.exit_status), errors
        else:
            assert (checked, said) == (status, errors)


@pytest.mark.parametrize("name", OPTIONS)
def test_each_kind_of_path_gets_the_tables_answer_from_the_command_and_from_validate(
    name, tmp_path, capsys
):
    (tmp_path / "samples").mkdir()
    samples = lay_out_path_samples(tmp_path / "samples")
    for path in samples.values():
        check(OPTIONS[name], path, tmp_path, capsys)


NAMES = ["a", "b", "c"]
KINDS = ["file", "empty", "folder", "fifo", "link", "dangling", "loop"]
TREES = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(KINDS), st.sampled_from(NAMES)))
PICKS = st.sampled_from([*NAMES, "a/x", "b/x/y", "missing"])


def grow(folder: Path, tree: list[tuple[str, str, str]]) -> None:
    """Each entry once: a file, an empty file, a folder with a file, a FIFO, a link to a
    sibling (which may dangle or loop back), a dangling link, a link to itself."""
    for name, kind, other in tree:
        path = folder / name
        if os.path.lexists(path):
            continue
        if kind in ("file", "empty"):
            path.write_text("x: 1\n" if kind == "file" else "")
        elif kind == "folder":
            path.mkdir()
            (path / "x").write_text("x: 1\n")
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(folder / {"link": other, "dangling": "nowhere", "loop": name}[kind])


@settings(
    max_examples=50,
    deadline=5000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(tree=TREES, pick=PICKS, name=st.sampled_from(list(OPTIONS)))
def test_random_trees_get_one_clear_answer_and_validate_agrees(tree, pick, name, capsys):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "tree"
        root.mkdir()
        grow(root, tree)
        check(OPTIONS[name], root / pick, Path(folder), capsys)


def test_every_path_rule_is_fed_to_its_command_here():
    # preflight's own rule: tests/preflight/test_model_check.py, through the check's row
    covered = {option.rule for option in OPTIONS.values()} | {paths.PREFLIGHT_MODEL_PATH}
    assert covered == set(paths.PATH_RULES)
