"""The glm5_model_check role's script: glm5svc's model check through a real PreflightContext."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = (
    Path(__file__).resolve().parents[2] / "roles" / "glm5_model_check" / "files" / "model_check.py"
)


def run_script(path: str) -> subprocess.CompletedProcess:
    # The role passes the file's text to `python -c`, so run it the same way.
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.read_text(), path], capture_output=True, text=True, timeout=60
    )


def test_incomplete_checkpoint_gives_the_rows_preflight_gives(tmp_path):
    (tmp_path / "config.json").write_text('{"quantization_config": {"quant_algo": "NVFP4"}}')
    index = {
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        }
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10)
    done = run_script(str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["model quantization"]["status"] == "ok"
    assert rows["model shards"]["status"] == "fail"
    assert "model-00002-of-00002.safetensors" in rows["model shards"]["detail"]


def test_relative_path_is_refused_with_the_config_rule():
    done = run_script("models/GLM-5")
    assert done.returncode == 78
    assert "glm5_model_check_path" in done.stderr and "absolute" in done.stderr
    assert "Traceback" not in done.stderr
