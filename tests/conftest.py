"""Fixtures every test folder may use: the test engine (testkit) on a free port, and the
real argument parser of every stack profile's sglang version."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.engine import start_engine
from testkit.parser_venv import profile_parser_pythons

REPO = Path(__file__).resolve().parents[1]
PREWARM = pytest.StashKey[subprocess.Popen]()


@pytest.fixture
def engine(tmp_path):
    """A fresh test engine for one test (its throughput saturates: the ladder has a knee)."""
    handle = start_engine(tmp_path / "engine.log")
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def sglang_parser_pythons() -> dict[str, Path]:
    """{profile name: parser interpreter} for every stack profile."""
    return profile_parser_pythons()


def _run_order(item: pytest.Item) -> int:
    """Longest first, so that under pytest-xdist (--dist loadfile, files in this order) the
    Molecule scenarios start at once on separate workers, the files of a minute or more
    (marked slow or long) follow, and the short files fill in: a long file left for the end
    would run alone while the other workers idle. A scenario file's tests (one per Debian
    release, GLM5_MOLECULE_ALL_DISTROS=1) stay on one worker, one after the other: they
    share the scenario's Molecule state and ports."""
    if item.get_closest_marker("lxc"):
        return 0
    if item.get_closest_marker("slow") or item.get_closest_marker("long"):
        return 1
    return 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)


def pytest_sessionstart(session: pytest.Session) -> None:
    """With GLM5_TEST_PREWARM=1 (scripts/test sets it), the controller starts
    testkit/prewarm.py in the background: the shared environments build while tests run."""
    if os.environ.get("GLM5_TEST_PREWARM") != "1" or hasattr(session.config, "workerinput"):
        return
    log = REPO / ".cache" / "prewarm.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        session.config.stash[PREWARM] = subprocess.Popen(
            [sys.executable, "-m", "testkit.prewarm"], cwd=REPO, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def pytest_sessionfinish(session: pytest.Session) -> None:
    prewarm = session.config.stash.get(PREWARM, None)
    if prewarm is not None and prewarm.poll() is None:
        os.killpg(prewarm.pid, signal.SIGTERM)  # builds are atomic: a later run resumes
        prewarm.wait(timeout=30)
