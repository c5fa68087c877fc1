"""glm5_pve_kernel_pin: the boot kernel held on one DKMS built the NVIDIA module for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import load_module, run_module  # noqa: E402

pin = load_module("library/glm5_pve_kernel_pin.py")
# proxmox-boot-tool kernel list, as proxmox-kernel-helper prints it.
LIST = (
    "Manually selected kernels:\nNone.\n\nAutomatically selected kernels:\n6.8.12-4-pve\n"
    "6.14.8-2-pve\n6.14.11-1-pve\n"
)
# dkms status (dkms 3.x): built for the two older kernels only.
STATUS = (
    "nvidia/590.48.01, 6.8.12-4-pve, x86_64: installed\n"
    "nvidia/590.48.01, 6.14.8-2-pve, x86_64: installed (WARNING! Diff between built and "
    "installed module!)\n"
    "nvidia/580.95.05, 6.14.11-1-pve, x86_64: installed\n"
    "nvidia/590.48.01, 6.14.11-1-pve, x86_64: built\n"
)


def test_the_list_and_the_status_are_read_as_the_tools_print_them():
    kernels, pinned = pin.kernel_list(LIST + "\nPinned kernel:\n6.8.12-4-pve\n")
    assert kernels == ["6.8.12-4-pve", "6.14.8-2-pve", "6.14.11-1-pve"] and pinned == "6.8.12-4-pve"
    _, pinned = pin.kernel_list(LIST + "\nPinned kernel:\n6.8.12-4-pve\n\n"
                                "Kernel pinned on next-boot:\n6.14.8-2-pve\n")  # fmt: skip
    assert pinned == "6.14.8-2-pve"  # the next boot takes the next-boot pin
    # "built" is not installed, another release does not count.
    assert pin.built_kernels(STATUS, "nvidia", "590.48.01") == {"6.8.12-4-pve", "6.14.8-2-pve"}
    assert max(["6.8.12-4-pve", "6.14.11-1-pve", "6.14.8-2-pve"], key=pin.version_key) == (
        "6.14.11-1-pve"
    )


def decide(pinned="", ours="", built=("6.8.12-4-pve", "6.14.8-2-pve"), running="6.14.8-2-pve"):
    kernels, _ = pin.kernel_list(LIST)
    return pin.decide(kernels, pinned, ours, set(built), running, "nvidia", "590.48.01")


def test_a_newest_kernel_without_the_module_pins_the_running_one():
    action, kernel, message = decide()
    assert (action, kernel) == ("pin", "6.14.8-2-pve")
    assert (
        "kernel 6.14.11-1-pve, the one the next boot would take, has no nvidia 590.48.01" in message
    )
    assert "proxmox-boot-tool kernel pin 6.14.8-2-pve" in message
    assert "apt install proxmox-headers-6.14.11-1-pve" in message
    # A running kernel without it: the newest kernel that has it.
    assert decide(running="6.14.11-1-pve")[:2] == ("pin", "6.14.8-2-pve")
    assert decide(running="6.1.0-9-amd64", built=["6.8.12-4-pve"])[:2] == ("pin", "6.8.12-4-pve")


def test_the_pin_stays_until_the_newest_kernel_has_the_module_then_goes():
    assert decide(pinned="6.14.8-2-pve", ours="6.14.8-2-pve")[0] == "none"
    everywhere = ("6.8.12-4-pve", "6.14.8-2-pve", "6.14.11-1-pve")
    action, kernel, message = decide(pinned="6.14.8-2-pve", ours="6.14.8-2-pve", built=everywhere)
    assert (action, kernel) == ("unpin", "6.14.11-1-pve") and "kernel unpin" in message
    assert decide(built=everywhere)[0] == "none"


def test_a_users_pin_is_kept_and_refused_when_its_kernel_lacks_the_module():
    assert decide(pinned="6.8.12-4-pve")[:2] == ("none", "6.8.12-4-pve")
    everywhere = ("6.8.12-4-pve", "6.14.8-2-pve", "6.14.11-1-pve")
    assert decide(pinned="6.8.12-4-pve", built=everywhere)[0] == "none"  # not ours: kept
    action, _, message = decide(pinned="6.14.11-1-pve")
    assert action == "fail" and "proxmox-boot-tool kernel unpin" in message
    assert "dkms autoinstall -k 6.14.11-1-pve" in message


def test_no_kernel_with_the_module_is_a_failure_naming_the_build_log():
    action, _, message = decide(built=())
    assert action == "fail" and "/var/lib/dkms/nvidia/590.48.01/build/make.log" in message


def tools(tmp_path: Path, listing: str, status: str) -> Path:
    """Stand-ins for proxmox-boot-tool (a pin file, calls logged) and dkms on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "list").write_text(listing)
    (tmp_path / "status").write_text(status)
    boot = f"""#!/bin/sh
case "$1 $2" in
  "kernel list") cat {tmp_path}/list; [ -f {tmp_path}/pin ] && printf '\\nPinned kernel:\\n%s\\n' "$(cat {tmp_path}/pin)"; exit 0 ;;
  "kernel pin") echo "$3" > {tmp_path}/pin ;;
  "kernel unpin") rm -f {tmp_path}/pin ;;
esac
echo "$*" >> {tmp_path}/calls
"""  # noqa: E501
    (bin_dir / "proxmox-boot-tool").write_text(boot)
    (bin_dir / "dkms").write_text(f"#!/bin/sh\ncat {tmp_path}/status\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def test_pinned_then_unpinned_through_the_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tools(tmp_path, LIST, STATUS)}:{os.environ['PATH']}")
    args = {"version": "590.48.01", "state_file": str(tmp_path / "state" / "kernel-pin"),
            "running_kernel": "6.14.8-2-pve"}  # fmt: skip
    check = run_module("library/glm5_pve_kernel_pin.py", {**args, "_ansible_check_mode": True},
                       tmp_path)  # fmt: skip
    assert check["changed"] and check["action"] == "pin" and not (tmp_path / "pin").exists()
    done = run_module("library/glm5_pve_kernel_pin.py", args, tmp_path)
    assert done["changed"] and (tmp_path / "pin").read_text() == "6.14.8-2-pve\n", done
    assert (tmp_path / "state" / "kernel-pin").read_text() == "6.14.8-2-pve\n"
    again = run_module("library/glm5_pve_kernel_pin.py", args, tmp_path)
    assert not again["changed"] and again["next_boot"] == "6.14.8-2-pve"
    (tmp_path / "status").write_text(STATUS.replace(": built", ": installed"))
    done = run_module("library/glm5_pve_kernel_pin.py", args, tmp_path)
    assert done["action"] == "unpin" and not (tmp_path / "pin").exists(), done
    assert not (tmp_path / "state" / "kernel-pin").exists()
    assert (tmp_path / "calls").read_text() == "kernel pin 6.14.8-2-pve\nkernel unpin\n"


def test_a_kernel_list_that_fails_leaves_the_boot_alone_and_says_why(tmp_path, monkeypatch):
    bin_dir = tools(tmp_path, LIST, STATUS)
    (bin_dir / "proxmox-boot-tool").write_text("#!/bin/sh\necho 'E: no ESP' >&2\nexit 2\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    done = run_module("library/glm5_pve_kernel_pin.py", {"version": "590.48.01"}, tmp_path)
    assert not done.get("failed") and not done["changed"], done
    assert "kernel list failed (2): E: no ESP: boot kernel not checked" in done["message"]
