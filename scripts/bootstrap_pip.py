"""Puts pip into a venv made with `python3 -m venv --without-pip` (standard library only).

Debian's python3 lacks ensurepip until root installs python3-venv. This takes pip's newest
wheel from PyPI's JSON API, checks its sha256 against the one PyPI lists, and lets that wheel
install pip into the venv (a wheel of pure Python runs from its zip file).

    python3 scripts/bootstrap_pip.py .venv/bin/python
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

PIP_JSON = "https://pypi.org/pypi/pip/json"


def newest_wheel() -> tuple[str, str]:
    """(url, sha256) of pip's newest py3-none-any wheel."""
    with urllib.request.urlopen(PIP_JSON, timeout=60) as answer:
        release = json.load(answer)
    for file in release["urls"]:
        if file["packagetype"] == "bdist_wheel" and file["filename"].endswith("-py3-none-any.whl"):
            # A mirror may list its files relative to the API's address.
            return urllib.parse.urljoin(PIP_JSON, file["url"]), file["digests"]["sha256"]
    raise SystemExit(f"bootstrap_pip: no pip wheel listed at {PIP_JSON}")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python3 scripts/bootstrap_pip.py <venv>/bin/python", file=sys.stderr)
        return 2
    url, sha256 = newest_wheel()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = Path(tmp) / url.rsplit("/", 1)[1]
        with urllib.request.urlopen(url, timeout=120) as answer:
            wheel.write_bytes(answer.read())
        got = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if got != sha256:
            print(f"bootstrap_pip: {url} has sha256 {got}, PyPI lists {sha256}", file=sys.stderr)
            return 1
        pip = [argv[0], str(wheel / "pip"), "install", "-q", "--disable-pip-version-check"]
        return subprocess.run([*pip, str(wheel)]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
