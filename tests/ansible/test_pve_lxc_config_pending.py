"""glm5_pve_lxc_config on a container config with a [pve:pending] section, as pve-container's."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import load_module, run_module  # noqa: E402

sections = load_module("module_utils/glm5_pve_sections.py")
CURRENT = (
    "arch: amd64\ncores: 32\ndev0: /dev/nvidia0,mode=0666\nhostname: glm5\nmemory: 262144\n"
    "lxc.prlimit.memlock: unlimited\n"
)
SNAPSHOT = "\n[clean]\narch: amd64\ncores: 32\nhostname: glm5\nsnaptime: 1764400000\n"
GPU = {"devices": ["/dev/nvidia0,mode=0666", "/dev/nvidia1,mode=0666"], "owned_majors": [195]}
RESOURCES = {
    "gpu_lines": False,
    "owned_raw_keys": ["lxc.prlimit.memlock"],
    "raw": ["lxc.prlimit.memlock: unlimited"],
    "options": {"cores": 16, "memory": None},
}


def apply(tmp_path: Path, text: str, params: dict, check: bool = False) -> tuple[dict, str]:
    conf = tmp_path / "200.conf"
    conf.write_text(text)
    done = run_module(
        "library/glm5_pve_lxc_config.py",
        {"path": str(conf), "lock_dir": str(tmp_path / "lock"), "_ansible_check_mode": check,
         **params},
        tmp_path,
    )  # fmt: skip
    return done, conf.read_text()


@pytest.mark.parametrize("check", [False, True])
def test_a_pending_change_to_a_gpu_line_is_refused_with_both_fixes(tmp_path, check):
    text = CURRENT + "\n[pve:pending]\ndev1: /dev/sda\n" + SNAPSHOT
    done, after = apply(tmp_path, text, GPU, check)
    assert done.get("failed"), done
    assert after == text
    assert "pending changes ([pve:pending]) to dev1" in done["msg"]
    assert "pct reboot 200" in done["msg"] and "pct set 200 --revert dev1" in done["msg"]
    assert "pct config 200 --current" in done["msg"] and "every lxc.* line" not in done["msg"]
    assert done["pending"] == ["dev1"]


def test_a_pending_delete_of_an_owned_key_is_refused(tmp_path):
    text = CURRENT + "\n[PVE:PENDING]\ndelete: net0,!dev0\n"
    done, after = apply(tmp_path, text, GPU)
    assert done.get("failed") and "delete dev0" in done["msg"], done
    assert "delete net0" not in done["msg"] and "--revert dev0" in done["msg"]
    assert after == text


def test_other_pending_changes_are_kept_and_the_current_section_edited(tmp_path):
    pending = (
        "\n[pve:pending]\ndelete: net1\nhostname: glm5-new\nlxc.apparmor.profile: unconfined\n"
    )
    done, after = apply(tmp_path, CURRENT + pending + SNAPSHOT, GPU)
    assert done["changed"] and not done.get("failed"), done
    assert done["pending"] == ["delete net1", "hostname", "lxc.apparmor.profile"]
    current, rest = after.split("\n[pve:pending]\n")
    assert "dev1: /dev/nvidia1,mode=0666" in current.splitlines()
    assert "[pve:pending]\n" + rest == pending.lstrip("\n") + SNAPSHOT


def test_a_pending_lxc_line_is_refused_while_the_role_owns_lxc_lines(tmp_path):
    # At the next start Proxmox replaces every current lxc.* line with the pending ones.
    text = CURRENT + "\n[pve:pending]\nlxc.apparmor.profile = unconfined\n"
    done, after = apply(tmp_path, text, RESOURCES)
    assert done.get("failed") and "lxc.apparmor.profile" in done["msg"], done
    assert "take the lxc.* lines out of the [pve:pending] section" in done["msg"]
    assert "every lxc.* line is replaced by the pending ones" in done["msg"]
    assert "--revert" not in done["msg"] and after == text


def test_a_pending_option_counts_only_when_the_role_sets_it(tmp_path):
    # memory is None (left alone): its pending change is the user's; cores is set here.
    text = CURRENT.replace("lxc.", "#lxc.") + "\n[pve:pending]\nmemory: 1024\n"
    done, after = apply(tmp_path, text, {**RESOURCES, "owned_raw_keys": [], "raw": []})
    assert done["changed"] and "cores: 16" in after, done
    done, _ = apply(tmp_path, CURRENT + "\n[pve:pending]\ncores: 8\n", RESOURCES)
    assert done.get("failed") and "to cores," in done["msg"] and "--revert cores" in done["msg"]


def test_the_pending_section_is_found_after_a_snapshot_too():
    text = CURRENT + SNAPSHOT + "\n[pve:pending]\nmp0: /srv/other,mp=/models\n"
    assert sections.pending_lines(text) == ["mp0: /srv/other,mp=/models"]
    found = sections.pending_conflicts(
        text, text, lambda key, value: key.startswith("mp") and "mp=/models" in value, set(), set()
    )
    assert found == ["mp0"]
    # A snapshot's own lines are history, never pending.
    assert sections.pending_lines(CURRENT + SNAPSHOT) == []
