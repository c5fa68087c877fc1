#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""Edit lines of a Proxmox container config under Proxmox's own lock (snapshot-safe).

Shared by glm5_host_lxc_gpu (NVIDIA device lines) and glm5_host_lxc_resources (mount
point, limits, cpuset, cores/memory/swap).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: glm5_pve_lxc_config
short_description: Manage NVIDIA device, mount point and resource lines of /etc/pve/lxc/<CTID>.conf
description:
  - Puts C(devN) entries or raw C(lxc.cgroup2.devices.allow) and C(lxc.mount.entry) lines for
    NVIDIA device nodes into the current configuration of a Proxmox container, above the first
    C([section]) so snapshots are never touched.
  - Holds the lock Proxmox takes for the same config, C(/run/lock/lxc/pve-config-<vmid>.lock)
    (C(flock), as C(PVE::LXC::Config::lock_config) does; waits up to O(lock_timeout) seconds),
    and refuses a container whose current config has a C(lock:) line (backup, snapshot,
    migration in progress).
  - Writes like Proxmox (C(PVE::Tools::file_set_contents)), a C(<file>.tmp.<pid>) renamed over
    the config, never a chmod (pmxcfs keeps its own modes).
  - Owns only the lines it is told about (NVIDIA device lines unless O(gpu_lines=false); keys in
    O(owned_raw_keys); mount points and mount entries whose container path is in
    O(owned_mount_targets)); every other line is kept as it is.
  - Plain keys in O(options) (e.g. C(cores), C(memory)) are set where they are.
  - Reads the sections as C(PVE::LXC::Config::parse_pct_config) does - the current config up to
    the first C([section]), C([pve:pending]) (changes Proxmox applies at the next start), C([name])
    snapshots - and changes only the current one. A pending change to a line it manages (the same
    C(devN)/C(mpN)/option key, an owned raw line, a C(delete:) of one, or any C(lxc.*) line while it
    manages one, since Proxmox then replaces every C(lxc.*) line) is refused with the fix (C(pct
    reboot) applies it, C(pct set --revert) drops it), in check mode too.
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
    description: "Raw lines to have, in order, each C(key: value)."
    type: list
    elements: str
    default: []
  owned_majors:
    description: Character majors whose C(lxc.cgroup2.devices.allow) lines this module owns.
    type: list
    elements: int
    default: []
  gpu_lines:
    description: Own the NVIDIA device lines (devN of /dev/nvidia*, their mounts, allow lines).
    type: bool
    default: true
  owned_raw_keys:
    description: Raw keys (e.g. C(lxc.prlimit.nofile)) whose every line this module owns.
    type: list
    elements: str
    default: []
  owned_mount_targets:
    description: >-
      Container paths whose C(mpN) entries and C(lxc.mount.entry) lines this module owns.
    type: list
    elements: str
    default: []
  mount_points:
    description: Values of the C(mpN) entries to have, in order (e.g. C(/srv/m,mp=/models,ro=1)).
    type: list
    elements: str
    default: []
  options:
    description: "Plain keys to set in place (C(null) leaves a key alone), e.g. C({cores: 32})."
    type: dict
    default: {}
  lock_dir:
    description: Where Proxmox keeps the containers' config locks.
    type: path
    default: /run/lock/lxc
  lock_timeout:
    description: Seconds to wait for Proxmox's config lock (Proxmox's own default is 10).
    type: int
    default: 10
  state:
    description: C(absent) removes every owned line (O(options) are left alone).
    type: str
    choices: [present, absent]
    default: present
author: glm5svc contributors (@glm5svc)
attributes:
  check_mode:
    description: Runs in check mode and reports what it would change.
    support: full
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
mount_points:
  description: The owned mpN lines after the change.
  returned: always
  type: list
pending:
  description: The keys of the C([pve:pending]) section (C(delete) entries as C(delete <key>)).
  returned: always
  type: list
"""

import contextlib
import os
import re
from typing import NamedTuple

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.glm5_pve_files import config_lock, config_lock_path, write_like_proxmox
from ansible.module_utils.glm5_pve_sections import (
    LINE,
    guest_lock,
    pending_conflicts,
    pending_keys,
    pending_refusal,
    split_sections,
)

INDEXED = re.compile(r"^(?P<prefix>dev|mp)(?P<index>\d+)$")
ALLOW = re.compile(r"^c\s+(?P<major>\d+):\S+\s+\S+$")
PLAIN_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
MAX_INDEX = 256  # pve-container: 256 devN entries, 256 mount points


class Ownership(NamedTuple):
    owned_majors: frozenset[int] = frozenset()
    gpu_lines: bool = True
    raw_keys: frozenset[str] = frozenset()
    mount_targets: frozenset[str] = frozenset()


def dev_path(value: str) -> str:
    first = value.split(",", 1)[0]
    return first[len("path=") :] if first.startswith("path=") else first


def mp_target(value: str) -> str:
    for part in value.split(","):
        if part.startswith("mp="):
            return _target(part[len("mp=") :])
    return ""


def _target(path: str) -> str:
    return path.strip("/")


def owned(key: str, value: str, rule: Ownership) -> bool:
    indexed = INDEXED.match(key)
    if indexed and indexed["prefix"] == "dev":
        return rule.gpu_lines and dev_path(value).startswith("/dev/nvidia")
    if indexed:
        return mp_target(value) in rule.mount_targets
    if key in rule.raw_keys:
        return True
    if key == "lxc.mount.entry":
        fields = value.split()
        if len(fields) > 1 and _target(fields[1]) in rule.mount_targets:
            return True
        return rule.gpu_lines and fields[0].startswith("/dev/nvidia")
    if key == "lxc.cgroup2.devices.allow" and rule.gpu_lines:
        match = ALLOW.match(value)
        return bool(match) and int(match.group("major")) in rule.owned_majors
    return False


def current_owned(main: list[str], rule: Ownership | set[int]):
    """({"dev": {index: value}, "mp": {...}}, owned raw lines, kept lines)."""
    if not isinstance(rule, Ownership):
        rule = Ownership(frozenset(rule))
    indexed: dict[str, dict[int, str]] = {"dev": {}, "mp": {}}
    raw, kept = [], []
    for line in main:
        match = LINE.match(line)
        if match and owned(match["key"], match["value"], rule):
            key = INDEXED.match(match["key"])
            if key:
                indexed[key["prefix"]][int(key["index"])] = match["value"]
            else:
                raw.append(f"{match['key']}: {match['value']}")
        else:
            kept.append(line)
    return indexed, raw, kept


def free_indices(kept: list[str], count: int, prefix: str = "dev") -> list[int]:
    used = set()
    for line in kept:
        match = LINE.match(line)
        key = INDEXED.match(match["key"]) if match else None
        if key and key["prefix"] == prefix:
            used.add(int(key["index"]))
    free = [index for index in range(MAX_INDEX) if index not in used]
    if len(free) < count:
        raise ValueError(
            f"{count} {prefix}N entries do not fit: {len(used)} of {MAX_INDEX} are used"
        )
    return free[:count]


def set_options(kept: list[str], options: dict[str, str]) -> list[str]:
    """Kept lines with each option's value set in place (appended when the key is new)."""
    result, seen = [], set()
    for line in kept:
        match = LINE.match(line)
        if match and match["key"] in options:
            seen.add(match["key"])
            line = f"{match['key']}: {options[match['key']]}"
        result.append(line)
    new = [f"{key}: {value}" for key, value in options.items() if key not in seen]
    if new:
        while result and not result[-1].strip():
            result.pop()
    return result + new


def render(
    text: str,
    devices: list[str],
    raw: list[str],
    owned_majors: set[int],
    *,
    rule: Ownership | None = None,
    mount_points: list[str] = (),
    options: dict[str, str] | None = None,
):
    """(new text, devN lines): the owned lines as wanted, above the first [section]."""
    rule = rule or Ownership(frozenset(owned_majors))
    wanted = {"dev": list(devices), "mp": list(mount_points)}
    main, rest = split_sections(text)
    have, have_raw, kept = current_owned(main, rule)
    kept_set = set_options(kept, options or {})
    same = {
        prefix: [have[prefix][i] for i in sorted(have[prefix])] == wanted[prefix] for prefix in have
    }
    if all(same.values()) and have_raw == raw and kept_set == kept:
        return text, _lines("dev", have["dev"])
    kept = kept_set
    while kept and not kept[-1].strip():
        kept.pop()
    lines = {}
    for prefix in ("dev", "mp"):
        if same[prefix]:
            lines[prefix] = _lines(prefix, have[prefix])
        else:
            indices = free_indices(kept, len(wanted[prefix]), prefix)
            lines[prefix] = [
                f"{prefix}{i}: {v}" for i, v in zip(indices, wanted[prefix], strict=True)
            ]
    new_main = kept + lines["mp"] + lines["dev"] + raw
    new_text = "\n".join(new_main) + "\n"
    if rest:
        new_text += "\n" + "\n".join(rest) + "\n"
    return new_text, lines["dev"]


def _lines(prefix: str, entries: dict[int, str]) -> list[str]:
    return [f"{prefix}{i}: {entries[i]}" for i in sorted(entries)]


def normalise_raw(lines: list[str]) -> list[str]:
    result = []
    for line in lines:
        match = LINE.match(line)
        if not match or not match["key"].startswith("lxc."):
            raise ValueError(f"raw line {line!r} is not 'lxc.<key>: <value>'")
        result.append(f"{match['key']}: {match['value']}")
    return result


def normalise_options(options: dict) -> dict[str, str]:
    result = {}
    for key, value in options.items():
        if not PLAIN_KEY.match(key) or INDEXED.match(key):
            raise ValueError(f"option {key!r} is not a plain Proxmox key (e.g. cores, memory)")
        if value is not None:
            result[key] = str(value).strip()
    return result


def ownership(params: dict) -> Ownership:
    return Ownership(
        owned_majors=frozenset(params["owned_majors"]),
        gpu_lines=params["gpu_lines"],
        raw_keys=frozenset(params["owned_raw_keys"]),
        mount_targets=frozenset(_target(path) for path in params["owned_mount_targets"]),
    )


def pending_conflicts_of(before: str, after: str, params: dict, absent: bool) -> list[str]:
    rule = ownership(params)
    options = set() if absent else set(normalise_options(params["options"]))
    return pending_conflicts(before, after, lambda k, v: owned(k, v, rule), rule.raw_keys, options)


def plan(path: str, params: dict, absent: bool) -> tuple[str, str, list[str]]:
    """(text now, text wanted, devN lines)."""
    devices = [] if absent else params["devices"]
    mount_points = [] if absent else params["mount_points"]
    raw = [] if absent else normalise_raw(params["raw"])
    options = {} if absent else normalise_options(params["options"])
    with open(path, encoding="utf-8") as handle:
        before = handle.read()
    after, dev_lines = render(
        before, devices, raw, set(), rule=ownership(params),
        mount_points=mount_points, options=options,
    )  # fmt: skip
    return before, after, dev_lines


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "devices": {"type": "list", "elements": "str", "default": []},
            "raw": {"type": "list", "elements": "str", "default": []},
            "owned_majors": {"type": "list", "elements": "int", "default": []},
            "gpu_lines": {"type": "bool", "default": True},
            "owned_raw_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "owned_mount_targets": {"type": "list", "elements": "str", "default": []},
            "mount_points": {"type": "list", "elements": "str", "default": []},
            "options": {"type": "dict", "default": {}},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "lock_dir": {"type": "path", "default": "/run/lock/lxc"},
            "lock_timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    if not os.path.isfile(path):
        module.fail_json(msg=f"{path} does not exist: create the container first (pct create)")
    absent = params["state"] == "absent"
    try:
        lock_path = config_lock_path(path, params["lock_dir"])
    except ValueError as error:
        module.fail_json(msg=str(error))
    # Check mode reads without the lock: it changes nothing for the lock to protect.
    lock = (
        contextlib.nullcontext()
        if module.check_mode
        else config_lock(lock_path, params["lock_timeout"])
    )
    try:
        with lock:
            before, after, dev_lines = plan(path, params, absent)
            locked = guest_lock(before)
            if locked:
                vmid = os.path.basename(path)[: -len(".conf")]
                module.fail_json(
                    msg=f"{path}: container {vmid} is locked ({locked}): a {locked} is in "
                    f"progress; run again when it is done, or remove a stale lock with "
                    f"pct unlock {vmid}"
                )
            conflicts = pending_conflicts_of(before, after, params, absent)
            if conflicts:
                module.fail_json(msg=pending_refusal(path, conflicts), pending=pending_keys(before))
            changed = after != before
            if changed and not module.check_mode:
                write_like_proxmox(path, after)
    except TimeoutError as error:
        module.fail_json(msg=str(error))
    except (OSError, ValueError) as error:
        module.fail_json(msg=f"{path}: {error}")
    mp_lines = [line for line in split_sections(after)[0] if re.match(r"^mp\d+:", line)]
    owned_mp = [line for line in mp_lines if owned(*line.split(": ", 1), ownership(params))]
    diff = {"before": before, "after": after, "before_header": path, "after_header": path}
    module.exit_json(
        changed=changed,
        devices=dev_lines,
        mount_points=owned_mp,
        pending=pending_keys(before),
        diff=diff if changed else {},
    )


if __name__ == "__main__":
    main()
