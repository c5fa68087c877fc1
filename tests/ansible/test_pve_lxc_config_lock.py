"""glm5_pve_lxc_config takes Proxmox's config lock and refuses a container with a `lock:` line."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import load_module, run_module  # noqa: E402

pve = load_module("library/glm5_pve_lxc_config.py")
CONF = "arch: amd64\ncores: 32\nhostname: glm5\n"
GPU = ["/dev/nvidia0,mode=0666"]


def apply(tmp_path: Path, conf: Path, timeout: int = 2, check: bool = False) -> dict:
    params = {
        "path": str(conf),
        "devices": GPU,
        "owned_majors": [195],
        "lock_dir": str(tmp_path / "lock"),
        "lock_timeout": timeout,
        "_ansible_check_mode": check,
    }
    return run_module("library/glm5_pve_lxc_config.py", params, tmp_path)


def test_the_lock_file_is_proxmoxs():
    assert pve.config_lock_path("/etc/pve/lxc/200.conf", "/run/lock/lxc") == (
        "/run/lock/lxc/pve-config-200.lock"
    )
    with pytest.raises(ValueError, match="<vmid>.conf"):
        pve.config_lock_path("/etc/pve/lxc/glm5.conf", "/run/lock/lxc")


def test_a_held_lock_is_waited_for_then_the_edit_is_made(tmp_path):
    conf = tmp_path / "200.conf"
    conf.write_text(CONF)
    (tmp_path / "lock").mkdir()
    held = open(tmp_path / "lock" / "pve-config-200.lock", "a")  # noqa: SIM115
    fcntl.flock(held, fcntl.LOCK_EX)
    timer = threading.Timer(1.0, held.close)  # `pct set` finishing after a second
    timer.start()
    started = time.monotonic()
    done = apply(tmp_path, conf, timeout=10)
    timer.join()
    assert done["changed"] and "dev0: /dev/nvidia0,mode=0666" in conf.read_text()
    assert time.monotonic() - started >= 0.9


def test_a_lock_held_too_long_fails_and_changes_nothing(tmp_path):
    conf = tmp_path / "200.conf"
    conf.write_text(CONF)
    (tmp_path / "lock").mkdir()
    with open(tmp_path / "lock" / "pve-config-200.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = apply(tmp_path, conf, timeout=1)
    assert done["failed"] and "pve-config-200.lock" in done["msg"]
    assert conf.read_text() == CONF


@pytest.mark.parametrize("check", [False, True])
def test_a_container_locked_by_a_backup_is_refused(tmp_path, check):
    conf = tmp_path / "200.conf"
    locked = CONF + "lock: backup\n\n[snap]\ncores: 32\n"
    conf.write_text(locked)
    done = apply(tmp_path, conf, check=check)
    assert done["failed"] and "locked (backup)" in done["msg"] and "pct unlock 200" in done["msg"]
    assert conf.read_text() == locked
    # A lock line in a snapshot section is history, not a lock.
    conf.write_text(CONF + "\n[snap]\nlock: snapshot\n")
    assert apply(tmp_path, conf, check=check)["changed"] is True


def test_the_file_is_replaced_by_rename_like_proxmox_does(tmp_path):
    conf = tmp_path / "200.conf"
    conf.write_text(CONF)
    inode = conf.stat().st_ino
    assert apply(tmp_path, conf)["changed"]
    assert conf.stat().st_ino != inode  # a new file renamed over the old one
    assert not list(tmp_path.glob("200.conf.tmp.*"))
