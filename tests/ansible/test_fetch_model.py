"""glm5_host_lxc_resources' download script when the hub is out of reach (it is, here)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

SCRIPT = Path(__file__).resolve().parents[2] / "roles/glm5_host_lxc_resources/files/fetch_model.py"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends


def test_unreachable_hub_exits_2_with_the_fix_and_never_prints_the_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("hf_secret_token_value\n")
    env = dict(
        os.environ,
        HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}",
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_ETAG_TIMEOUT="5",
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", "example/GLM-5-NVFP4",
         "--dest", str(tmp_path / "model"), "--token-file", str(token),
         "--log", str(tmp_path / "download.log")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "cannot reach the Hugging Face hub at http://127.0.0.1:" in done.stderr
    assert "glm5_host_lxc_resources_model_hf_endpoint" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    everything = done.stdout + done.stderr + (tmp_path / "download.log").read_text()
    assert "hf_secret_token_value" not in everything
