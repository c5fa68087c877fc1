"""The sections of a Proxmox VE container config, for library/glm5_pve_lxc_config.py.

pve-container's PVE::LXC::Config::parse_pct_config reads /etc/pve/lxc/<vmid>.conf as the
current config up to the first section header, then `[pve:pending]` (matched case-insensitively:
changes that wait for the container's next start) and `[<name>]` snapshots; write_pct_config
puts the pending section before the snapshots. `delete: <keys>` is allowed only in the pending
section (PVE::AbstractConfig::parse_pending_delete splits it on commas, semicolons and blanks;
a leading `!` forces). PVE::LXC::vm_start applies the pending section before the container
starts (vmconfig_apply_pending): each pending key replaces the current one, each deleted key
goes, and the pending `lxc.*` lines, kept as one list, replace every current `lxc.*` line.
Stdlib only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

SECTION = re.compile(r"^\[[^\]]+\]\s*$")
PENDING = re.compile(r"^\[pve:pending\]\s*$", re.IGNORECASE)
LINE = re.compile(r"^(?P<key>[A-Za-z0-9_.\-]+)\s*:\s*(?P<value>.*?)\s*$")
# parse_pct_config also takes the LXC spelling `lxc.key = value`.
LXC_LINE = re.compile(r"^(?P<key>lxc\.[A-Za-z0-9_.\-]+)(?::|\s*=)\s*(?P<value>.*?)\s*$")


def split_sections(text: str) -> tuple[list[str], list[str]]:
    """(the current config's lines, every line from the first section header on)."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if SECTION.match(line):
            return lines[:number], lines[number:]
    return lines, []


def guest_lock(text: str) -> str:
    """The value of a `lock:` line in the current config ('' when unlocked)."""
    main, _rest = split_sections(text)
    for line in main:
        match = re.match(r"^lock:\s*(\S+)", line)
        if match:
            return match.group(1)
    return ""


def pending_lines(text: str) -> list[str]:
    """The lines of the [pve:pending] section, wherever it is."""
    lines, inside = [], False
    for line in text.splitlines():
        if SECTION.match(line):
            inside = bool(PENDING.match(line))
        elif inside:
            lines.append(line)
    return lines


def _entries(lines: list[str]):
    """(key, value) of each setting line; `delete:` gives one ('delete', key) per deleted key."""
    for line in lines:
        match = LXC_LINE.match(line) or LINE.match(line)
        if not match:
            continue
        if match["key"] == "delete":
            for key in re.split(r"[,;\s]+", match["value"]):
                if key:
                    yield "delete", key.lstrip("!")
        else:
            yield match["key"], match["value"]


def pending_keys(text: str) -> list[str]:
    """The pending keys in file order; each deleted key as 'delete <key>'."""
    return [f"delete {v}" if k == "delete" else k for k, v in _entries(pending_lines(text))]


def _managed(lines: list[str], owned: Callable[[str, str], bool], raw_keys: set[str]):
    """(keys of the owned non-lxc lines and owned raw keys, whether any lxc.* line is owned)."""
    keys, lxc = set(), False
    for key, value in _entries(lines):
        if key == "delete" or not owned(key, value):
            continue
        if key.startswith("lxc."):
            lxc = True
            if key in raw_keys:
                keys.add(key)
        else:
            keys.add(key)
    return keys, lxc


def pending_conflicts(
    before: str,
    after: str,
    owned: Callable[[str, str], bool],
    raw_keys: set[str],
    options: set[str],
) -> list[str]:
    """The pending changes that would undo the edit before -> after at the container's next start.

    A pending key the edit manages (an owned line's key before or after, an option set), a
    pending line that is itself owned, a deleted managed key, and any pending lxc.* line while
    the edit owns an lxc.* line (Proxmox replaces them all).
    """
    names, lxc = set(options), False
    for text in (before, after):
        keys, owned_lxc = _managed(split_sections(text)[0], owned, raw_keys)
        names |= keys
        lxc = lxc or owned_lxc
    conflicts = []
    for key, value in _entries(pending_lines(before)):
        if key == "delete":
            if value in names:
                conflicts.append(f"delete {value}")
        elif key.startswith("lxc."):
            if lxc or owned(key, value):
                conflicts.append(key)
        elif key in names or owned(key, value):
            conflicts.append(key)
    return list(dict.fromkeys(conflicts))


def pending_refusal(path: str, conflicts: list[str]) -> str:
    """The refusal, with both ways out: apply the pending changes, or drop them."""
    vmid = os.path.basename(path)[: -len(".conf")]
    revert = sorted({c.split()[-1] for c in conflicts if not c.startswith("lxc.")})
    lxc = any(c.startswith("lxc.") for c in conflicts)
    drop = []
    if revert:
        drop.append(f"pct set {vmid} --revert {','.join(revert)}")
    if lxc:
        drop.append(f"take the lxc.* lines out of the [pve:pending] section of {path}")
    return (
        f"{path}: container {vmid} has pending changes ([pve:pending]) to "
        f"{', '.join(conflicts)}, which this role manages: Proxmox applies them at the "
        "container's next start, over the lines this run would write"
        f"{' (every lxc.* line is replaced by the pending ones)' if lxc else ''}. "
        "Nothing was changed. Apply them first "
        f"(pct reboot {vmid}, which starts the container with them) or drop them "
        f"({' or '.join(drop)}), then run again; pct config {vmid} --current shows the "
        f"current values, pct pending {vmid} the pending ones."
    )
