"""Fixtures every test folder may use: the test engine (testkit) on a free port."""

from __future__ import annotations

import pytest

from testkit.engine import start_engine


@pytest.fixture
def engine(tmp_path):
    """A fresh test engine for one test (its throughput saturates: the ladder has a knee)."""
    handle = start_engine(tmp_path / "engine.log")
    yield handle
    handle.stop()
