"""Fixtures: a real sglang 0.5.9 bench_serving venv, a tiny local tokenizer, the test engine.

The venv is built once per machine under .cache/venvs/ (git-ignored) and reused: sglang 0.5.9
without its dependencies (its bench_serving imports no torch) plus the few packages that
bench_serving imports, with sglang's own transformers pin. A fresh CI machine builds it in
the first test session that needs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_ENGINE = REPO / "tests" / "support" / "sglang_test_engine.py"
VENVS = REPO / ".cache" / "venvs"
SGLANG_VERSION = "0.5.9"
# What sglang 0.5.9's bench_serving and `import sglang` need (checked by importing it in a
# fresh venv), with
# sglang's own transformers pin; `tokenizers` comes with transformers.
BENCH_SERVING_DEPS = [
    "aiohttp",
    "numpy",
    "requests",
    "tqdm",
    "transformers==4.57.1",
    "pybase64",
    "IPython",
    "datasets",
    "pillow",
    "pydantic",  # sglang/utils.py imports it; transformers 5 brings it, 4.57.1 does not
]
VENV_SPEC = f"sglang=={SGLANG_VERSION} --no-deps; " + " ".join(BENCH_SERVING_DEPS)


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        check=True,
    )


def build_bench_serving_venv(target: Path) -> Path:
    """Build (or reuse) the venv; returns its python. Built aside, then renamed into place,
    so an interrupted build is never mistaken for a finished one."""
    python = target / "bin" / "python"
    marker = target / ".glm5svc-ready"
    if marker.is_file() and marker.read_text() == VENV_SPEC and python.exists():
        return python
    building = target.with_name(target.name + f".building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
    _pip(building / "bin" / "python", f"sglang=={SGLANG_VERSION}", "--no-deps")
    _pip(building / "bin" / "python", *BENCH_SERVING_DEPS)
    check = "import sglang.bench_serving, sglang.version as v; print(v.__version__)"
    done = subprocess.run(
        [str(building / "bin" / "python"), "-c", check], capture_output=True, text=True
    )
    assert done.returncode == 0 and SGLANG_VERSION in done.stdout, done.stderr[-2000:]
    (building / ".glm5svc-ready").write_text(VENV_SPEC)
    shutil.rmtree(target, ignore_errors=True)
    # venv scripts hold absolute paths: use the interpreter by path (python -m ...), which
    # works from the renamed directory.
    building.rename(target)
    return python


@pytest.fixture(scope="session")
def bench_python() -> str:
    """The interpreter of a venv with the real sglang 0.5.9 bench_serving."""
    return str(build_bench_serving_venv(VENVS / f"sglang-{SGLANG_VERSION}-bench"))


TOKENIZER_SCRIPT = REPO / "tests" / "support" / "tiny_tokenizer.py"


@pytest.fixture(scope="session")
def tiny_tokenizer(bench_python, tmp_path_factory) -> str:
    """A word-level tokenizer directory that AutoTokenizer loads offline."""
    path = tmp_path_factory.mktemp("tokenizer")
    subprocess.run([bench_python, str(TOKENIZER_SCRIPT), str(path)], check=True)
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"test engine exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError("test engine did not become healthy")


class EngineHandle:
    def __init__(self, proc: subprocess.Popen, base_url: str):
        self.proc = proc
        self.base_url = base_url

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_engine(log_path: Path, *extra: str) -> EngineHandle:
    port = free_port()
    command = [
        sys.executable, str(TEST_ENGINE), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", "glm-5", "--test-mode", "load=0.1", *extra,
    ]  # fmt: skip
    log = open(log_path, "w")  # noqa: SIM115 (the engine writes to it until stopped)
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    handle = EngineHandle(proc, f"http://127.0.0.1:{port}")
    try:
        wait_healthy(handle.base_url, proc)
    except BaseException:
        handle.stop()
        raise
    return handle


@pytest.fixture
def engine(tmp_path):
    """A fresh test engine for one test (its throughput saturates: the ladder has a knee)."""
    handle = start_engine(tmp_path / "engine.log")
    yield handle
    handle.stop()
