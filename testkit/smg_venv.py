"""A venv with SGLang's gateway (smg) at the version the glm5_gateway role pins.

Built once per machine under .cache/venvs; bench/gateway.py and bench/tune_fleet.py run
the gateway from it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from testkit.build_lock import build_lock

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".cache" / "venvs"
GATEWAY_DEFAULTS = yaml.safe_load((REPO / "roles/glm5_gateway/defaults/main.yml").read_text())
SMG_VERSION = GATEWAY_DEFAULTS["glm5_gateway_smg_version"]


def smg_python() -> str:
    """The interpreter of the smg venv (built on first use; pip's cache helps)."""
    target = VENVS / f"smg-{SMG_VERSION}"
    python = target / "bin" / "python"
    with build_lock(target):
        if not (target / ".ready").is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(target)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", f"smg=={SMG_VERSION}"], check=True
            )
            (target / ".ready").write_text(SMG_VERSION)
    return str(python)
