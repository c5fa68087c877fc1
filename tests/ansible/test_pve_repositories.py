"""glm5_pve_repositories on the repository files a fresh Proxmox VE 8 and 9 install writes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import run_module  # noqa: E402

MODULE = "library/glm5_pve_repositories.py"
LEGACY = "glm5-proxmox-no-subscription.sources"  # where an earlier version wrote the entries
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
    d = root / "sources.list.d"
    args = {
        "apt_root": str(root),
        "sources_file": str(d / "proxmox.sources"),
        "ceph_sources_file": str(d / "ceph.sources"),
        "legacy_files": [str(d / LEGACY)],
        "subscription_status": status,
    }
    return run_module(MODULE, {**args, **params}, tmp_path)


def files(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (root / "sources.list.d").iterdir()}


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
    # Where the admin guide puts them: Proxmox VE's in proxmox.sources, Ceph's in ceph.sources.
    pve = (root / "sources.list.d" / "proxmox.sources").read_text()
    assert pve.endswith(
        "Types: deb\nURIs: http://download.proxmox.com/debian/pve\nSuites: trixie\n"
        f"Components: pve-no-subscription\nSigned-By: {KEYRING}\n"
    )
    ceph = (root / "sources.list.d" / "ceph.sources").read_text()
    assert ceph.startswith(PVE9["ceph.sources"] + "Enabled: no\n\n# Ceph no-subscription")
    assert ceph.endswith(
        "URIs: http://download.proxmox.com/debian/ceph-squid\nSuites: trixie\n"
        f"Components: no-subscription\nSigned-By: {KEYRING}\n"
    )
    assert sorted(done["written"]) == [str(root / "sources.list.d" / n) for n in
                                       ("ceph.sources", "proxmox.sources")]  # fmt: skip
    assert not (root / "sources.list.d" / LEGACY).exists()
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
    pve = (root / "sources.list.d" / "proxmox.sources").read_text()
    ceph = (root / "sources.list.d" / "ceph.sources").read_text()
    assert "URIs: http://download.proxmox.com/debian/pve\nSuites: bookworm\n" in pve
    assert "URIs: http://download.proxmox.com/debian/ceph-quincy\nSuites: bookworm\n" in ceph
    assert "Signed-By" not in pve + ceph  # .list entries name no key: trusted.gpg.d has it


def test_active_subscription_changes_nothing_and_check_mode_writes_nothing(tmp_path):
    root = tree(tmp_path, PVE9)
    assert not run(tmp_path, root, "Active")["changed"]
    done = run(tmp_path, root, "notfound", no_subscription=True, _ansible_check_mode=True)
    assert done["changed"] and len(done["disabled"]) == 2
    assert "Enabled" not in (root / "sources.list.d" / "pve-enterprise.sources").read_text()
    assert not (root / "sources.list.d" / "proxmox.sources").exists()
    assert "no-subscription" not in (root / "sources.list.d" / "ceph.sources").read_text()


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


def test_a_users_own_no_subscription_entry_is_not_written_again(tmp_path):
    # PVE 8's admin guide put it into sources.list; https or http is the same archive.
    root = tree(tmp_path, PVE9)
    (root / "sources.list").write_text(
        "deb http://deb.debian.org/debian trixie main\n"
        "deb https://download.proxmox.com/debian/pve/ trixie pve-no-subscription\n"
    )
    done = run(tmp_path, root, "notfound", no_subscription=True)
    assert done["changed"] and done["written"] == [str(root / "sources.list.d" / "ceph.sources")]
    assert done["already"] == [
        f"{root / 'sources.list'}: download.proxmox.com/debian/pve trixie pve-no-subscription"
    ]
    assert not (root / "sources.list.d" / "proxmox.sources").exists()


def test_an_entry_in_proxmox_sources_is_kept_and_a_disabled_one_does_not_count(tmp_path):
    mine = (
        "Types: deb\nURIs: http://download.proxmox.com/debian/pve\nSuites: trixie\n"
        f"Components: pve-no-subscription\nSigned-By: {KEYRING}\n"
    )
    root = tree(tmp_path, {**PVE9, "proxmox.sources": mine})
    run(tmp_path, root, "notfound", no_subscription=True)
    assert (root / "sources.list.d" / "proxmox.sources").read_text() == mine
    root = tree(tmp_path / "off", {**PVE9, "proxmox.sources": mine + "Enabled: no\n"})
    run(tmp_path, root, "notfound", no_subscription=True)
    text = (root / "sources.list.d" / "proxmox.sources").read_text()
    assert text.startswith(mine + "Enabled: no\n\n") and text.count("pve-no-subscription") == 2


# What the earlier version wrote, after it had disabled a fresh Proxmox VE 9's entries.
OLD_OWN = (
    "# Managed by Ansible (glm5_pve_repositories): Proxmox's no-subscription repositories\n"
    "# In place of /etc/apt/sources.list.d/pve-enterprise.sources (no subscription)\n"
    "Types: deb\nURIs: http://download.proxmox.com/debian/pve\nSuites: trixie\n"
    f"Components: pve-no-subscription\nSigned-By: {KEYRING}\n\n"
    "# In place of /etc/apt/sources.list.d/ceph.sources (no subscription)\n"
    "Types: deb\nURIs: http://download.proxmox.com/debian/ceph-squid\nSuites: trixie\n"
    f"Components: no-subscription\nSigned-By: {KEYRING}\n"
)
SWITCHED = {n: t + "Enabled: no\n" for n, t in PVE9.items() if n != "debian.sources"}


@pytest.mark.parametrize("check", [False, True])
def test_an_earlier_runs_file_moves_to_proxmox_and_ceph_sources(tmp_path, check):
    root = tree(tmp_path, {**SWITCHED, LEGACY: OLD_OWN})
    before = files(root)
    done = run(tmp_path, root, "notfound", _ansible_check_mode=check)
    assert done["changed"] and done["removed"] == [str(root / "sources.list.d" / LEGACY)], done
    assert done["subscription"] == "not asked"  # nothing enterprise is enabled
    if check:
        assert files(root) == before
        return
    after = files(root)
    assert LEGACY not in after
    assert "URIs: http://download.proxmox.com/debian/pve\n" in after["proxmox.sources"]
    assert after["proxmox.sources"].startswith(
        "# Proxmox VE no-subscription repository, in place of "
        "/etc/apt/sources.list.d/pve-enterprise.sources"
    )
    assert after["ceph.sources"].startswith(SWITCHED["ceph.sources"] + "\n# Ceph no-subscription")
    assert after["pve-enterprise.sources"] == SWITCHED["pve-enterprise.sources"]
    again = run(tmp_path, root, "notfound")
    assert not again["changed"] and files(root) == after


def test_an_earlier_runs_entry_already_in_proxmox_sources_is_not_doubled(tmp_path):
    pve = OLD_OWN.split("\n\n")[0].split("\n", 2)[2] + "\n"
    root = tree(tmp_path, {**SWITCHED, LEGACY: OLD_OWN, "proxmox.sources": pve})
    done = run(tmp_path, root, "notfound")
    assert done["written"] == [str(root / "sources.list.d" / "ceph.sources")], done
    assert (root / "sources.list.d" / "proxmox.sources").read_text() == pve
    assert not (root / "sources.list.d" / LEGACY).exists()
