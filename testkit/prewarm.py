"""Build every environment the tests share, in parallel, at the start of a test run.

    python -m testkit.prewarm

tests/conftest.py starts it in the background when a pytest session starts, so the long
downloads (CPU torch for the parser venvs, the sglang wheels, smg, the Ansible collection)
overlap the tests instead of stalling the first test that needs each one. The builders are
the ones the tests call, each under its lock (testkit/build_lock.py): a test that needs an
environment still being built waits for it, and a finished one is returned at once. A
builder that fails here is reported and left to the test that needs it, which fails with
the builder's own message.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testkit.bench_venv import build_bench_serving_venv
from testkit.parser_venv import profile_parser_pythons
from testkit.sglang_wheels import VERSIONS, pristine_site
from testkit.smg_venv import smg_python

REPO = Path(__file__).resolve().parents[1]


def _collections() -> None:
    subprocess.run(
        [sys.executable, str(REPO / "molecule" / "shared" / "fetch_collections.py")],
        check=True, capture_output=True,
    )  # fmt: skip


BUILDERS = {
    "sglang parser venvs": profile_parser_pythons,
    "bench_serving venv": build_bench_serving_venv,
    "sglang wheels": lambda: [pristine_site(version) for version in VERSIONS],
    "smg venv": smg_python,
    "Ansible collections": _collections,
}


def _timed(name: str) -> str:
    started = time.monotonic()
    try:
        BUILDERS[name]()
    except Exception as exc:  # noqa: BLE001 - reported; the test that needs it fails with it
        return f"{name}: FAILED after {time.monotonic() - started:.0f} s: {exc}"
    return f"{name}: ready after {time.monotonic() - started:.0f} s"


def main() -> int:
    with ThreadPoolExecutor(max_workers=len(BUILDERS)) as pool:
        for line in pool.map(_timed, BUILDERS):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
