"""`glm5svc patch` end to end on an unpacked wheel: JSON output and exit codes."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from glm5svc.cli import main
from glm5svc.patches import engine as engine_module
from glm5svc.patches import files as files_module

from .conftest import snapshot

pytestmark = pytest.mark.slow


def run_cli(capsys, *argv):
    code = main(["patch", *argv])
    out = capsys.readouterr().out
    return code, out


def run_json(capsys, *argv):
    code, out = run_cli(capsys, *argv, "--json")
    return code, json.loads(out)


def test_status_apply_reapply_revert_json(make_site, capsys):
    site = str(make_site("0.5.10.post1"))
    code, data = run_json(capsys, "status", "--site-packages", site)
    assert code == 0 and data["ok"] and data["changed"] is False
    assert data["sglang"]["version"] == "0.5.10.post1"
    assert [p["verdict"] for p in data["patches"]] == ["not_applied"] * 3
    assert data["radix_cache_safe"] is False

    code, data = run_json(capsys, "apply", "--site-packages", site)
    assert code == 0 and data["changed"] is True
    assert [p["action"] for p in data["patches"]] == ["applied"] * 3
    assert data["radix_cache_safe"] is True

    code, data = run_json(capsys, "apply", "--site-packages", site)
    assert code == 0 and data["changed"] is False

    code, data = run_json(capsys, "revert", "--site-packages", site, "nsa-fp8-mha-prefix")
    assert code == 0 and data["changed"] is True
    assert [p["id"] for p in data["patches"]] == ["nsa-fp8-mha-prefix"]
    code, data = run_json(capsys, "status", "--site-packages", site)
    assert [p["verdict"] for p in data["patches"]] == ["applied", "applied", "not_applied"]


def test_status_check_exits_5_when_a_required_patch_is_missing(make_site, capsys):
    site = str(make_site("0.5.10.post1"))
    assert run_cli(capsys, "status", "--check", "--site-packages", site)[0] == 5
    assert run_cli(capsys, "apply", "flashinfer-cutlass-autotune", "--site-packages", site)[0] == 0
    code, out = run_cli(capsys, "status", "--check", "--site-packages", site)
    assert code == 0 and "applied" in out


def test_unknown_source_exits_3_and_writes_nothing(make_site, capsys):
    site = make_site("0.5.12.post1")
    runner = site / "sglang/srt/model_executor/model_runner.py"
    runner.write_text(
        runner.read_text().replace('# "flashinfer_cutlass",', '# "flashinfer_cutlas",')
    )
    before = snapshot(Path(site))
    code, data = run_json(capsys, "apply", "--site-packages", str(site))
    assert code == 3 and data["ok"] is False and data["changed"] is False
    assert "refusing" in data["error"] and "0.5.12.post1" in data["error"]
    verdicts = {p["id"]: p["verdict"] for p in data["patches"]}
    assert verdicts == {
        "flashinfer-autotune-cache": "fixed_upstream",
        "flashinfer-cutlass-autotune": "unknown_source",
        "nsa-fp8-mha-prefix": "not_applied",
    }
    assert snapshot(site) == before  # all or nothing: the NSA file was not patched either
    assert run_cli(capsys, "status", "--site-packages", str(site))[0] == 3


def test_errors_and_usage(make_site, tmp_path, capsys):
    site = str(make_site("0.5.23"))
    code, data = run_json(capsys, "status", "--site-packages", str(tmp_path / "nowhere"))
    assert code == 1 and data["ok"] is False and "no sglang" in data["error"]
    code, data = run_json(capsys, "apply", "no-such-patch", "--site-packages", site)
    assert (
        code == 2
        and "known patches: flashinfer-autotune-cache, flashinfer-cutlass" in data["error"]
    )
    code, data = run_json(capsys, "status", "--python", str(tmp_path / "python"))
    assert code == 1 and "no Python interpreter" in data["error"]


def test_diff_and_list(make_site, capsys):
    site = str(make_site("0.5.23"))
    code, out = run_cli(capsys, "diff", "--site-packages", site)
    assert code == 0
    assert "+            if self.use_dsa and getattr(" in out
    assert "-        assert kv_indices is not None, (" in out
    assert "# flashinfer-cutlass-autotune: fixed_upstream" in out
    code, out = run_cli(capsys, "list")
    assert code == 0 and "variant dsa-exec: sglang 0.5.13 .. newer" in out


def test_python_target_and_real_entry_point(make_site, tmp_path):
    """--python runs the venv's interpreter to find sglang (here via a .pth file)."""
    site = make_site("0.5.9")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (tmp_path / "venv" / purelib.split(str(env_dir) + "/")[1] / "fake.pth").write_text(f"{site}\n")
    cmd = [sys.executable, "-m", "glm5svc", "patch"]
    proc = subprocess.run(
        [*cmd, "apply", "--json", "--python", str(python)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["changed"] is True and data["sglang"]["python"] == str(python)
    assert data["sglang"]["site_packages"] == str(site)
    proc = subprocess.run(
        [*cmd, "status", "--json", "--python", str(python)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["radix_cache_safe"] is True


def test_apply_on_a_read_only_site_packages_is_exit_4_and_one_json_object(
    make_site, capsys, monkeypatch
):
    """Root ignores file modes, so the read-only file system is simulated at the writer."""
    site = str(make_site("0.5.10.post1"))
    before = snapshot(Path(site))

    def read_only(path, data, mode=None):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(files_module, "write_atomic", read_only)
    monkeypatch.setattr(engine_module, "write_atomic", read_only)
    code, out = run_cli(capsys, "apply", "--site-packages", site, "--json")
    data = json.loads(out)  # exactly one JSON object on stdout
    assert code == 4
    assert data["ok"] is False and data["changed"] is False
    assert "Read-only file system" in data["error"]
    assert snapshot(Path(site)) == before  # nothing half-written (no backup left either)
