"""Fixtures: the bench_serving venv and tokenizer for the post-start benchmark (testkit)."""

from __future__ import annotations

import pytest

from testkit.bench_venv import build_bench_serving_venv, make_tokenizer


@pytest.fixture(scope="session")
def bench_python() -> str:
    return str(build_bench_serving_venv())


@pytest.fixture(scope="session")
def tiny_tokenizer(bench_python, tmp_path_factory) -> str:
    return str(make_tokenizer(bench_python, tmp_path_factory.mktemp("tokenizer")))
