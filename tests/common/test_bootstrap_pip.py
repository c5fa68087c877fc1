"""scripts/bootstrap_pip.py: pip for a venv made without it (Debian lacking python3-venv), as
`scripts/setup-dev.sh --minimal` uses it; PyPI's answers are stand-ins here."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "bootstrap_pip", REPO / "scripts" / "bootstrap_pip.py"
)
bootstrap_pip = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bootstrap_pip)


def _pypi(files: list[dict], wheel: bytes = b""):
    """A stand-in for urllib.request.urlopen: the JSON API, then the wheel's bytes."""

    def urlopen(url, timeout):
        if url == bootstrap_pip.PIP_JSON:
            return io.BytesIO(json.dumps({"urls": files}).encode())
        return io.BytesIO(wheel)

    return urlopen


def test_the_wheel_is_picked_and_a_relative_address_joined(monkeypatch):
    files = [
        {
            "packagetype": "sdist",
            "filename": "pip-26.3.tar.gz",
            "url": "x",
            "digests": {"sha256": "a"},
        },
        {
            "packagetype": "bdist_wheel",
            "filename": "pip-26.3-py3-none-any.whl",
            "url": "../../packages/pip-26.3-py3-none-any.whl",
            "digests": {"sha256": "b"},
        },
    ]
    monkeypatch.setattr(bootstrap_pip.urllib.request, "urlopen", _pypi(files))
    assert bootstrap_pip.newest_wheel() == (
        "https://pypi.org/packages/pip-26.3-py3-none-any.whl",
        "b",
    )


def test_a_wheel_whose_digest_differs_is_not_run(monkeypatch, capsys):
    files = [
        {
            "packagetype": "bdist_wheel",
            "filename": "pip-26.3-py3-none-any.whl",
            "url": "https://files.example/pip-26.3-py3-none-any.whl",
            "digests": {"sha256": hashlib.sha256(b"the real wheel").hexdigest()},
        }
    ]
    monkeypatch.setattr(bootstrap_pip.urllib.request, "urlopen", _pypi(files, b"something else"))
    ran = []
    monkeypatch.setattr(bootstrap_pip.subprocess, "run", lambda *a, **k: ran.append(a))
    assert bootstrap_pip.main([sys.executable]) == 1
    assert ran == []
    assert "PyPI lists" in capsys.readouterr().err


def test_no_interpreter_is_a_usage_error(capsys):
    assert bootstrap_pip.main(["/nonexistent/python"]) == 2
    assert "usage:" in capsys.readouterr().err
