#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""Keep a Proxmox host booting a kernel that DKMS built the NVIDIA module for."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: glm5_pve_kernel_pin
short_description: Pin the boot kernel to one DKMS built the NVIDIA module for
description:
  - Reads the installed kernels and the pin from C(proxmox-boot-tool kernel list), and the kernels
    the module is built and installed for from C(dkms status) (lines C(<module>/<version>,
    <kernel>, <arch>) then C(installed)).
  - The next boot takes the pinned kernel, else the newest installed one. When that one lacks the
    module at O(version), it pins (C(proxmox-boot-tool kernel pin)) the running kernel if it has
    the module, else the newest that has it, and records the pin in O(state_file).
  - A pin it recorded is removed (C(proxmox-boot-tool kernel unpin)) once the newest kernel has the
    module; a pin it did not record is the user's, kept, and refused when its kernel lacks the
    module.
  - Without proxmox-boot-tool or dkms, when either fails to read, or with no kernel listed, it
    changes nothing and says why.
options:
  version:
    description: The module version that must be built (the kernel module package's, no revision).
    type: str
    required: true
  module:
    description: The DKMS module name.
    type: str
    default: nvidia
  state_file:
    description: Where the kernel this module pinned is recorded.
    type: path
    default: /var/lib/glm5-host/kernel-pin
  running_kernel:
    description: The running kernel; empty for C(uname -r).
    type: str
    default: ""
author: glm5svc contributors (@glm5svc)
attributes:
  check_mode:
    description: Runs in check mode and reports the pin it would set or remove.
    support: full
"""

EXAMPLES = r"""
- name: Boot a kernel that has NVIDIA 590.48.01 built
  glm5_pve_kernel_pin:
    version: 590.48.01
"""

RETURN = r"""
action:
  description: C(pin), C(unpin) or C(none).
  returned: always
  type: str
next_boot:
  description: The kernel the host boots next, after the change.
  returned: always
  type: str
built:
  description: The installed kernels DKMS built the module for.
  returned: always
  type: list
  elements: str
message:
  description: What was found and done, with the fix where the newest kernel lacks the module.
  returned: always
  type: str
"""

import os
import re
import subprocess

from ansible.module_utils.basic import AnsibleModule

STATUS = re.compile(
    r"^(?P<module>[^/,\s]+)[/,]\s*(?P<version>[^,\s]+),\s*(?P<kernel>[^,\s]+),\s*[^:]+:\s*installed"
)


def kernel_list(text: str) -> tuple[list[str], str]:
    """(installed kernels, pinned kernel) from `proxmox-boot-tool kernel list`; a next-boot pin
    wins over the pin, as it does at the next boot."""
    kernels, pins, section = [], {}, ""
    for line in text.splitlines():
        line = line.strip()
        if line.endswith(":"):
            section = line[:-1].lower()
        elif line and line != "None.":
            if section.endswith("selected kernels"):
                kernels.append(line)
            elif section in ("pinned kernel", "kernel pinned on next-boot"):
                pins[section] = line
    pin = pins.get("kernel pinned on next-boot", pins.get("pinned kernel", ""))
    return list(dict.fromkeys(kernels)), pin


def built_kernels(text: str, module: str, version: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        match = STATUS.match(line.strip())
        if match and match["module"] == module and match["version"] == version:
            found.add(match["kernel"])
    return found


def version_key(kernel: str) -> list:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", kernel) if p]


def decide(kernels, pin, ours, built, running, module, version) -> tuple[str, str, str]:
    """(action, kernel, message): pin <kernel>, unpin, none, or fail."""
    newest = max(kernels, key=version_key)
    what = f"{module} {version}"
    if newest in built:
        if pin and pin == ours:
            return (
                "unpin",
                newest,
                (
                    f"kernel {newest} now has {what} built: removed the boot pin on {pin} "
                    f"(proxmox-boot-tool kernel unpin); the next boot takes {newest}"
                ),
            )
        if pin and pin not in built:
            return "fail", pin, user_pin_refusal(pin, what)
        return "none", pin or newest, f"the next boot's kernel {pin or newest} has {what} built"
    if pin and pin in built:
        return (
            "none",
            pin,
            (f"kernel {newest} has no {what} built (dkms status); the boot stays pinned to {pin}"),
        )
    if pin and pin != ours:
        return "fail", pin, user_pin_refusal(pin, what)
    usable = sorted((k for k in kernels if k in built), key=version_key)
    if not usable:
        return (
            "fail",
            newest,
            (
                f"no installed kernel has {what} built (dkms status lists none of "
                f"{', '.join(kernels)}): install the headers "
                f"(apt install proxmox-headers-{newest}), build it "
                f"(dkms autoinstall -k {newest}) and look at "
                f"/var/lib/dkms/{module}/{version}/build/make.log when it fails"
            ),
        )
    target = running if running in usable else usable[-1]
    return (
        "pin",
        target,
        (
            f"kernel {newest}, the one the next boot would take, has no {what} built "
            f"(dkms status): pinned the boot to {target} "
            f"(proxmox-boot-tool kernel pin {target}), which has it. "
            f"Fix: apt install proxmox-headers-{newest} (DKMS builds the module then) or "
            f"dkms autoinstall -k {newest}; the next run removes the pin once dkms status lists "
            f"{module}/{version}, {newest}"
        ),
    )


def user_pin_refusal(pin: str, what: str) -> str:
    return (
        f"the boot is pinned to kernel {pin} (proxmox-boot-tool kernel list), which has no {what} "
        f"built (dkms status): the host would boot without the driver. Build it for {pin} "
        f"(apt install proxmox-headers-{pin}; dkms autoinstall -k {pin}) or remove the pin "
        "(proxmox-boot-tool kernel unpin), then run again"
    )


def run(module: AnsibleModule, argv: list[str], result: dict, read_only: bool = False) -> str:
    """The command's output; a read that fails leaves the boot kernel alone, saying why."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}"
        if read_only:
            module.exit_json(message=f"{why}: boot kernel not checked", **result)
        module.fail_json(msg=why, **result)
    return done.stdout


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "version": {"type": "str", "required": True},
            "module": {"type": "str", "default": "nvidia"},
            "state_file": {"type": "path", "default": "/var/lib/glm5-host/kernel-pin"},
            "running_kernel": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, "action": "none", "next_boot": "", "built": []}
    tool, dkms = module.get_bin_path("proxmox-boot-tool"), module.get_bin_path("dkms")
    if not tool or not dkms:
        module.exit_json(
            message="no proxmox-boot-tool or dkms here: boot kernel not checked", **result
        )
    kernels, pin = kernel_list(run(module, [tool, "kernel", "list"], result, read_only=True))
    if not kernels:
        module.exit_json(
            message="proxmox-boot-tool lists no kernel: boot kernel not checked", **result
        )
    status = run(module, [dkms, "status"], result, read_only=True)
    built = built_kernels(status, p["module"], p["version"])
    result["built"] = sorted(k for k in kernels if k in built)
    ours = ""
    if os.path.isfile(p["state_file"]):
        with open(p["state_file"], encoding="utf-8") as handle:
            ours = handle.read().strip()
    running = p["running_kernel"] or os.uname().release
    action, kernel, message = decide(kernels, pin, ours, built, running, p["module"], p["version"])
    if action == "fail":
        module.fail_json(msg=message, **result)
    result.update(action=action, next_boot=kernel, message=message, changed=action != "none")
    if module.check_mode or action == "none":
        module.exit_json(**result)
    if action == "pin":
        run(module, [tool, "kernel", "pin", kernel], result)
        os.makedirs(os.path.dirname(p["state_file"]), exist_ok=True)
        with open(p["state_file"], "w", encoding="utf-8") as handle:
            handle.write(kernel + "\n")
    else:
        run(module, [tool, "kernel", "unpin"], result)
        os.unlink(p["state_file"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
