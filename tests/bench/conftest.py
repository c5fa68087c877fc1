"""Fixtures: the real sglang 0.5.9 bench_serving venv and the tiny local tokenizer (testkit).

The venv is built once per machine under .cache/venvs/ and reused; a fresh CI machine builds
it in the first test session that needs it.
"""

from __future__ import annotations

import pytest

from testkit.bench_venv import build_bench_serving_venv, make_tokenizer


@pytest.fixture(scope="session")
def bench_python() -> str:
    """The interpreter of a venv with the real sglang 0.5.9 bench_serving."""
    return str(build_bench_serving_venv())


@pytest.fixture(scope="session")
def tiny_tokenizer(bench_python, tmp_path_factory) -> str:
    """A word-level tokenizer directory that AutoTokenizer loads offline."""
    return str(make_tokenizer(bench_python, tmp_path_factory.mktemp("tokenizer")))
