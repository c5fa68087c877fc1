"""A venv with the real sglang 0.5.9 `bench_serving`, and the tiny tokenizer made with it.

Built once per machine under .cache/venvs/ (git-ignored) and reused: sglang 0.5.9 without
its dependencies (its bench_serving imports no torch) plus the few packages bench_serving
imports, with sglang's own transformers pin. The bench tests, bench/overhead.py and
`scripts/lab bench` (which builds the same spec in the lab container) all use this spec.

    python -m testkit.bench_venv spec|deps     prints the spec or the dependency list
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from testkit.build_lock import build_lock

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".cache" / "venvs"
SGLANG_VERSION = "0.5.9"
TOKENIZER_SCRIPT = Path(__file__).resolve().parent / "tiny_tokenizer.py"
# What sglang 0.5.9's bench_serving and `import sglang` need (checked by importing it in a
# fresh venv), with sglang's own transformers pin; `tokenizers` comes with transformers.
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
DEFAULT_VENV = VENVS / f"sglang-{SGLANG_VERSION}-bench"


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        check=True,
    )


def build_bench_serving_venv(target: Path = DEFAULT_VENV) -> Path:
    """Build (or reuse) the venv; returns its python. Built aside, then renamed into place,
    so an interrupted build is never mistaken for a finished one."""
    with build_lock(target):
        return _build_bench_serving_venv(target)


def _build_bench_serving_venv(target: Path) -> Path:
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
    if done.returncode != 0 or SGLANG_VERSION not in done.stdout:
        raise RuntimeError(f"the bench_serving venv does not import: {done.stderr[-2000:]}")
    (building / ".glm5svc-ready").write_text(VENV_SPEC)
    shutil.rmtree(target, ignore_errors=True)
    # venv scripts hold absolute paths: use the interpreter by path (python -m ...), which
    # works from the renamed directory.
    building.rename(target)
    return python


def make_tokenizer(python: str | Path, directory: Path) -> Path:
    """Write the tiny tokenizer into `directory` with an interpreter that has transformers."""
    subprocess.run([str(python), str(TOKENIZER_SCRIPT), str(directory)], check=True)
    return directory


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) == 2 else ""
    if what not in ("spec", "deps"):
        sys.exit("usage: python -m testkit.bench_venv spec|deps")
    print(VENV_SPEC if what == "spec" else " ".join(BENCH_SERVING_DEPS))
