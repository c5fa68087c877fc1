#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""Edit the GPU lines of a Proxmox container config in place (pmxcfs-safe)."""

from __future__ import annotations

import os
import re

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: glm5_pve_lxc_config
short_description: Manage the NVIDIA device lines of /etc/pve/lxc/<CTID>.conf
description:
  - Puts C(devN) entries or raw C(lxc.cgroup2.devices.allow) and C(lxc.mount.entry) lines for
    NVIDIA device nodes into the current configuration of a Proxmox container, above the first
    C([section]) so snapshots are never touched.
  - The file is rewritten in place (no temporary file, no rename, no chmod), which is what
    pmxcfs (/etc/pve) allows.
  - Owns only lines about NVIDIA devices; every other line is kept as it is.
options:
  path:
    description: The container's configuration file.
    type: path
    required: true
  devices:
    description: Values of the C(devN) entries to have, in order (e.g. C(/dev/nvidia0,mode=0666)).
    type: list
    elements: str
    default: []
  raw:
    description: Raw lines to have, in order, each C(key: value).
    type: list
    elements: str
    default: []
  owned_majors:
    description: Character majors whose C(lxc.cgroup2.devices.allow) lines this module owns.
    type: list
    elements: int
    default: []
  state:
    description: C(absent) removes every owned line.
    type: str
    choices: [present, absent]
    default: present
supports_check_mode: true
"""

EXAMPLES = r"""
- name: Pass two GPUs into container 200
  glm5_pve_lxc_config:
    path: /etc/pve/lxc/200.conf
    devices: [/dev/nvidia0,mode=0666, /dev/nvidia1,mode=0666]
"""

RETURN = r"""
devices:
  description: The devN lines of the current configuration after the change.
  returned: always
  type: list
"""

SECTION = re.compile(r"^\[[^\]]+\]\s*$")
LINE = re.compile(r"^(?P<key>[A-Za-z0-9_.\-]+)\s*:\s*(?P<value>.*?)\s*$")
DEV_KEY = re.compile(r"^dev(?P<index>\d+)$")
ALLOW = re.compile(r"^c\s+(?P<major>\d+):\S+\s+\S+$")
MAX_DEVICES = 256


def dev_path(value: str) -> str:
    first = value.split(",", 1)[0]
    return first[len("path=") :] if first.startswith("path=") else first


def owned(key: str, value: str, owned_majors: set[int]) -> bool:
    if DEV_KEY.match(key):
        return dev_path(value).startswith("/dev/nvidia")
    if key == "lxc.mount.entry":
        return value.split(" ", 1)[0].startswith("/dev/nvidia")
    if key == "lxc.cgroup2.devices.allow":
        match = ALLOW.match(value)
        return bool(match) and int(match.group("major")) in owned_majors
    return False


def split_sections(text: str) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if SECTION.match(line):
            return lines[:number], lines[number:]
    return lines, []


def current_owned(main: list[str], owned_majors: set[int]):
    devices, raw, kept = {}, [], []
    for line in main:
        match = LINE.match(line)
        if match and owned(match["key"], match["value"], owned_majors):
            dev = DEV_KEY.match(match["key"])
            if dev:
                devices[int(dev["index"])] = match["value"]
            else:
                raw.append(f"{match['key']}: {match['value']}")
        else:
            kept.append(line)
    return devices, raw, kept


def free_indices(kept: list[str], count: int) -> list[int]:
    used = set()
    for line in kept:
        match = LINE.match(line)
        dev = DEV_KEY.match(match["key"]) if match else None
        if dev:
            used.add(int(dev["index"]))
    free = [index for index in range(MAX_DEVICES) if index not in used]
    if len(free) < count:
        raise ValueError(
            f"{count} device entries do not fit: {len(used)} of {MAX_DEVICES} are used"
        )
    return free[:count]


def render(text: str, devices: list[str], raw: list[str], owned_majors: set[int]):
    main, rest = split_sections(text)
    have_devices, have_raw, kept = current_owned(main, owned_majors)
    in_order = [have_devices[index] for index in sorted(have_devices)]
    if in_order == devices and have_raw == raw:
        return text, [f"dev{i}: {have_devices[i]}" for i in sorted(have_devices)]
    while kept and not kept[-1].strip():
        kept.pop()
    dev_lines = [
        f"dev{i}: {v}" for i, v in zip(free_indices(kept, len(devices)), devices, strict=True)
    ]
    new_main = kept + dev_lines + raw
    new_text = "\n".join(new_main) + "\n"
    if rest:
        new_text += "\n" + "\n".join(rest) + "\n"
    return new_text, dev_lines


def normalise_raw(lines: list[str]) -> list[str]:
    result = []
    for line in lines:
        match = LINE.match(line)
        if not match or not match["key"].startswith("lxc."):
            raise ValueError(f"raw line {line!r} is not 'lxc.<key>: <value>'")
        result.append(f"{match['key']}: {match['value']}")
    return result


def write_in_place(path: str, text: str) -> None:
    # pmxcfs refuses renames into /etc/pve/lxc and chmod: truncate and write the same inode.
    with open(path, "r+", encoding="utf-8") as handle:
        handle.seek(0)
        handle.write(text)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "devices": {"type": "list", "elements": "str", "default": []},
            "raw": {"type": "list", "elements": "str", "default": []},
            "owned_majors": {"type": "list", "elements": "int", "default": []},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    if not os.path.isfile(path):
        module.fail_json(msg=f"{path} does not exist: create the container first (pct create)")
    absent = module.params["state"] == "absent"
    try:
        devices = [] if absent else module.params["devices"]
        raw = [] if absent else normalise_raw(module.params["raw"])
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
        after, dev_lines = render(before, devices, raw, set(module.params["owned_majors"]))
    except (OSError, ValueError) as error:
        module.fail_json(msg=f"{path}: {error}")
    changed = after != before
    if changed and not module.check_mode:
        try:
            write_in_place(path, after)
        except OSError as error:
            module.fail_json(msg=f"cannot write {path}: {error}")
    diff = {"before": before, "after": after, "before_header": path, "after_header": path}
    module.exit_json(changed=changed, devices=dev_lines, diff=diff if changed else {})


if __name__ == "__main__":
    main()
