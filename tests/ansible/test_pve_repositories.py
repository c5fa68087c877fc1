"""glm5_pve_repositories on the repository files a fresh Proxmox VE 8 and 9 install writes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import run_module  # noqa: E402

MODULE = "library/glm5_pve_repositories.py"
KEYRING = "/usr/share/keyrings/proxmox-archive-keyring.gpg"
# Proxmox VE 9 (Debian 13): deb822 files, as the installer writes them.
PVE9 = {
    "pve-enterprise.sources": (
        "Types: deb\nURIs: https://enterprise.proxmox.com/debian/pve\nSuites: trixie\n"
        f"Components: pve-enterprise\nSigned-By: {KEYRING}\n"
    ),
    "ceph.sources": (
        "Types: deb\nURIs: https://enterprise.proxmox.com/debian/ceph-squid\nSuites: trixie\n"
        f"Components: enterprise\nSigned-By: {KEYRING}\n"
    ),
    "debian.sources": (
        "Types: deb\nURIs: http://deb.debian.org/debian/\nSuites: trixie trixie-updates\n"
        "Components: main contrib non-free-firmware\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    ),
}
# Proxmox VE 8 (Debian 12): one-line .list files.
PVE8 = {
    "pve-enterprise.list": (
        "deb https://enterprise.proxmox.com/debian/pve bookworm pve-enterprise\n"
    ),
    "ceph.list": "deb https://enterprise.proxmox.com/debian/ceph-quincy bookworm enterprise\n",
}


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    (root / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main contrib\n")
    for name, text in files.items():
        (root / "sources.list.d" / name).write_text(text)
    return root


def run(tmp_path: Path, root: Path, status: str, **params) -> dict:
    own = root / "sources.list.d" / "glm5-proxmox-no-subscription.sources"
    args = {"apt_root": str(root), "sources_file": str(own), "subscription_status": status}
    return run_module(MODULE, {**args, **params}, tmp_path)


def test_pve9_without_subscription_is_refused_naming_both_fixes(tmp_path):
    root = tree(tmp_path, PVE9)
    before = {p.name: p.read_text() for p in (root / "sources.list.d").iterdir()}
    done = run(tmp_path, root, "notfound")
    assert done.get("failed"), done
    assert "pve-enterprise.sources" in done["msg"] and "ceph.sources" in done["msg"]
    assert "glm5_host_pve_repos_no_subscription: true" in done["msg"]
    assert "pvesubscription set <key>" in done["msg"] and "401" in done["msg"]
    assert {p.name: p.read_text() for p in (root / "sources.list.d").iterdir()} == before


def test_pve9_switched_to_no_subscription_then_unchanged(tmp_path):
    root = tree(tmp_path, PVE9)
    done = run(tmp_path, root, "notfound", no_subscription=True)
    assert done["changed"] and not done.get("failed"), done
    enterprise = (root / "sources.list.d" / "pve-enterprise.sources").read_text()
    assert enterprise == PVE9["pve-enterprise.sources"] + "Enabled: no\n"
    assert (root / "sources.list.d" / "ceph.sources").read_text().endswith("Enabled: no\n")
    own = (root / "sources.list.d" / "glm5-proxmox-no-subscription.sources").read_text()
    assert "URIs: http://download.proxmox.com/debian/pve\nSuites: trixie\n" in own
    assert "Components: pve-no-subscription\n" in own
    assert "URIs: http://download.proxmox.com/debian/ceph-squid\n" in own
    assert "Components: no-subscription\n" in own and f"Signed-By: {KEYRING}" in own
    # Debian's own entry is not Proxmox's: untouched.
    assert (root / "sources.list.d" / "debian.sources").read_text() == PVE9["debian.sources"]
    again = run(tmp_path, root, "notfound", no_subscription=True)
    assert not again["changed"] and again["enterprise"] == []


def test_pve8_one_line_entries_are_commented_out(tmp_path):
    root = tree(tmp_path, PVE8)
    done = run(tmp_path, root, "notfound", no_subscription=True)
    assert done["changed"], done
    assert (root / "sources.list.d" / "pve-enterprise.list").read_text() == (
        "# " + PVE8["pve-enterprise.list"]
    )
    own = (root / "sources.list.d" / "glm5-proxmox-no-subscription.sources").read_text()
    assert "URIs: http://download.proxmox.com/debian/ceph-quincy\nSuites: bookworm\n" in own
    assert "Signed-By" not in own  # the .list entries name no key: apt's trusted.gpg.d has it


def test_active_subscription_changes_nothing_and_check_mode_writes_nothing(tmp_path):
    root = tree(tmp_path, PVE9)
    assert not run(tmp_path, root, "Active")["changed"]
    done = run(tmp_path, root, "notfound", no_subscription=True, _ansible_check_mode=True)
    assert done["changed"] and len(done["disabled"]) == 2
    assert "Enabled" not in (root / "sources.list.d" / "pve-enterprise.sources").read_text()
    assert not (root / "sources.list.d" / "glm5-proxmox-no-subscription.sources").exists()


def test_an_already_disabled_or_commented_entry_is_not_enterprise(tmp_path):
    root = tree(
        tmp_path,
        {
            "pve-enterprise.sources": PVE9["pve-enterprise.sources"] + "Enabled: false\n",
            "pve-enterprise.list": "# " + PVE8["pve-enterprise.list"],
        },
    )
    done = run(tmp_path, root, "notfound")
    assert not done.get("failed") and done["enterprise"] == [], done
