#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""Proxmox's enterprise repositories on a host without a subscription: refused, or switched."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: glm5_pve_repositories
short_description: Proxmox's enterprise repositories without a subscription, refused or switched
description:
  - Reads every enabled entry in C(/etc/apt/sources.list) and
    C(/etc/apt/sources.list.d/*.list|*.sources) whose URI is on C(enterprise.proxmox.com) (a fresh
    Proxmox VE 8 has C(pve-enterprise.list) and C(ceph.list), Proxmox VE 9
    C(pve-enterprise.sources) and C(ceph.sources)).
  - With an active subscription (C(pvesubscription get) says C(status) C(active)) it changes
    nothing.
  - Without one, apt answers 401 for those entries and every C(apt update) fails. With
    C(no_subscription=true) each enterprise entry is disabled (deb822 C(Enabled) C(no); a one-line
    entry is commented out, as Proxmox's admin guide says) and the matching no-subscription entry
    is written (C(pve-enterprise) -> C(pve-no-subscription), ceph C(enterprise) ->
    C(no-subscription), on C(download.proxmox.com), same suite and Signed-By). Otherwise it
    fails, naming both fixes.
  - Supports check mode and diff.
options:
  no_subscription:
    description: Switch to the no-subscription repositories when there is no active subscription.
    type: bool
    default: false
  no_subscription_base:
    description: Base URL in place of C(https://enterprise.proxmox.com/debian) (a mirror, tests).
    type: str
    default: http://download.proxmox.com/debian
  sources_file:
    description: The deb822 file the no-subscription entries are written to.
    type: path
    default: /etc/apt/sources.list.d/glm5-proxmox-no-subscription.sources
  subscription_status:
    description: The status word from C(pvesubscription get); empty to run it here.
    type: str
    default: ""
  flag_name:
    description: The inventory variable named in the refusal as the first fix.
    type: str
    default: glm5_host_pve_repos_no_subscription
  apt_root:
    description: Where apt's configuration lives (tests point it at a made-up tree).
    type: path
    default: /etc/apt
author: glm5svc contributors (@glm5svc)
attributes:
  check_mode:
    description: Runs in check mode and reports what it would change.
    support: full
"""

EXAMPLES = r"""
- name: Switch Proxmox's enterprise repositories to no-subscription when there is no subscription
  glm5_pve_repositories:
    no_subscription: true
"""

RETURN = r"""
enterprise:
  description: "The enabled enterprise entries found, as C(file: uri suite components)."
  returned: always
  type: list
subscription:
  description: The subscription status (C(active), C(notfound), ...; C(none) without the tool).
  returned: always
  type: str
disabled:
  description: The files whose enterprise entries are (or would be) disabled.
  returned: always
  type: list
"""

import os
import re
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

ENTERPRISE = "https://enterprise.proxmox.com/debian"
OWN_HEADER = "# Managed by Ansible (glm5_pve_repositories): "
COMPONENTS = {"pve-enterprise": "pve-no-subscription", "enterprise": "no-subscription"}


def is_enterprise(uri: str) -> bool:
    return re.match(r"^https?://enterprise\.proxmox\.com/", uri.strip(), re.IGNORECASE) is not None


def _stanzas(text: str) -> list[tuple[int, int]]:
    """(first line, end line) of each deb822 stanza, blank lines between them."""
    lines, spans, start = text.split("\n"), [], None
    for number, line in enumerate(lines + [""]):
        if line.strip() == "":
            if start is not None:
                spans.append((start, number))
                start = None
        elif start is None:
            start = number
    return spans


def _fields(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = None
    for line in lines:
        if line.startswith("#"):
            continue
        if line[:1] in (" ", "\t") and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
    return fields


def deb822_enterprise(text: str, path: str) -> tuple[list[dict], str]:
    """Enabled enterprise entries of a .sources file, and its text with them disabled."""
    lines, found = text.split("\n"), []
    for start, end in reversed(_stanzas(text)):
        fields = _fields(lines[start:end])
        uris = fields.get("uris", "").split()
        enabled = fields.get("enabled", "yes").lower() not in ("no", "false", "0")
        if not enabled or "deb" not in fields.get("types", "").split():
            continue
        if not any(is_enterprise(u) for u in uris):
            continue
        found.insert(
            0,
            {
                "file": path,
                "uris": uris,
                "suites": fields.get("suites", "").split(),
                "components": fields.get("components", "").split(),
                "signed_by": fields.get("signed-by", ""),
            },
        )
        body = [x for x in lines[start:end] if not re.match(r"(?i)^enabled\s*:", x)]
        lines[start:end] = body + ["Enabled: no"]
    return found, "\n".join(lines)


def one_line_enterprise(text: str, path: str) -> tuple[list[dict], str]:
    """Enabled enterprise entries of a .list file, and its text with them commented out."""
    lines, found = text.split("\n"), []
    for number, line in enumerate(lines):
        code = line.split("#", 1)[0].strip()
        match = re.match(r"^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$", code)
        if not match or not is_enterprise(match.group(2)):
            continue
        options = dict(o.partition("=")[::2] for o in (match.group(1) or "").split())
        found.append(
            {
                "file": path,
                "uris": [match.group(2)],
                "suites": [match.group(3)],
                "components": match.group(4).split(),
                "signed_by": options.get("signed-by", ""),
            }
        )
        lines[number] = "# " + line
    return found, "\n".join(lines)


def scan(apt_root: str, own_file: str) -> tuple[list[dict], dict[str, str]]:
    """Every enabled enterprise entry, and each file's text with its entries disabled."""
    names = [os.path.join(apt_root, "sources.list")]
    folder = os.path.join(apt_root, "sources.list.d")
    if os.path.isdir(folder):
        names += sorted(
            os.path.join(folder, n) for n in os.listdir(folder) if n.endswith((".list", ".sources"))
        )
    entries, rewritten = [], {}
    for path in names:
        if path == own_file or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        parse = deb822_enterprise if path.endswith(".sources") else one_line_enterprise
        found, new = parse(text, path)
        if found:
            entries += found
            rewritten[path] = new
    return entries, rewritten


def no_subscription_text(entries: list[dict], base: str) -> str:
    stanzas, seen = [], set()
    for entry in entries:
        uris = [base.rstrip("/") + u.strip()[len(ENTERPRISE) :] for u in entry["uris"]]
        components = [COMPONENTS.get(c, c) for c in entry["components"]]
        key = (tuple(uris), tuple(entry["suites"]), tuple(components))
        if key in seen:
            continue
        seen.add(key)
        lines = [
            f"# In place of {entry['file']} (no subscription)",
            "Types: deb",
            f"URIs: {' '.join(uris)}",
            f"Suites: {' '.join(entry['suites'])}",
            f"Components: {' '.join(components)}",
        ]
        if entry["signed_by"]:
            lines.append(f"Signed-By: {entry['signed_by']}")
        stanzas.append("\n".join(lines) + "\n")
    return f"{OWN_HEADER}Proxmox's no-subscription repositories\n" + "\n".join(stanzas)


def subscription_status(module: AnsibleModule) -> str:
    if module.params["subscription_status"]:
        return module.params["subscription_status"].strip().lower()
    tool = module.get_bin_path("pvesubscription")
    if not tool:
        return "none"
    done = subprocess.run([tool, "get"], capture_output=True, text=True, check=False)
    match = re.search(r"(?mi)^\s*status:\s*(\S+)", done.stdout)
    return match.group(1).lower() if match else "unknown"


def refusal(entries: list[dict], status: str, flag: str) -> str:
    where = "; ".join(
        f"{e['file']} ({' '.join(e['uris'])} {' '.join(e['suites'])} {' '.join(e['components'])})"
        for e in entries
    )
    return (
        f"Proxmox's enterprise repository is enabled in {where}, but this host has no active "
        f"subscription (pvesubscription get: status {status}), so apt update would fail with "
        "401 Unauthorized. Fix one of: set "
        f"{flag}: true in the inventory (the enterprise entries are disabled and Proxmox's "
        "no-subscription repositories configured), or activate a subscription key "
        "(pvesubscription set <key>, then run the play again)."
    )


def write(path: str, text: str) -> None:
    folder = os.path.dirname(path)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    handle, temp = tempfile.mkstemp(dir=folder, prefix=".glm5-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(temp, mode)
    os.replace(temp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "no_subscription": {"type": "bool", "default": False},
            "no_subscription_base": {
                "type": "str",
                "default": "http://download.proxmox.com/debian",
            },
            "sources_file": {
                "type": "path",
                "default": "/etc/apt/sources.list.d/glm5-proxmox-no-subscription.sources",
            },
            "subscription_status": {"type": "str", "default": ""},
            "flag_name": {"type": "str", "default": "glm5_host_pve_repos_no_subscription"},
            "apt_root": {"type": "path", "default": "/etc/apt"},
        },
        supports_check_mode=True,
    )
    p = module.params
    entries, rewritten = scan(p["apt_root"], p["sources_file"])
    shown = [
        f"{e['file']}: {' '.join(e['uris'])} {' '.join(e['suites'])} {' '.join(e['components'])}"
        for e in entries
    ]
    result = {"changed": False, "enterprise": shown, "disabled": [], "diff": []}
    if not entries:
        result["subscription"] = "not asked"
        module.exit_json(**result)
    status = subscription_status(module)
    result["subscription"] = status
    if status == "active":
        module.exit_json(**result)
    if not p["no_subscription"]:
        module.fail_json(msg=refusal(entries, status, p["flag_name"]), **result)
    # The existing no-subscription file keeps entries an earlier run wrote for entries that are
    # disabled now; the new ones are added to it.
    previous = []
    if os.path.exists(p["sources_file"]):
        with open(p["sources_file"], encoding="utf-8") as handle:
            previous = deb822_plain(handle.read(), p["sources_file"], p["no_subscription_base"])
    new_text = no_subscription_text(previous + entries, p["no_subscription_base"])
    for path, text in sorted(rewritten.items()):
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
        result["diff"].append(
            {"before_header": path, "after_header": path, "before": before, "after": text}
        )
        result["disabled"].append(path)
        if not module.check_mode:
            write(path, text)
    result["diff"].append(
        {"before_header": p["sources_file"], "after_header": p["sources_file"], "after": new_text}
    )
    if not module.check_mode:
        write(p["sources_file"], new_text)
    result["changed"] = True
    module.exit_json(**result)


def deb822_plain(text: str, path: str, base: str) -> list[dict]:
    """The entries of this module's own file, mapped back to the enterprise form they replace."""
    lines, found = text.split("\n"), []
    back = {v: k for k, v in COMPONENTS.items()}
    for start, end in _stanzas(text):
        fields = _fields(lines[start:end])
        origin = re.search(r"(?m)^# In place of (\S+)", "\n".join(lines[start:end]))
        if "uris" not in fields:
            continue
        found.append(
            {
                "file": origin.group(1) if origin else path,
                "uris": [
                    ENTERPRISE + u[len(base.rstrip("/")) :] if u.startswith(base.rstrip("/")) else u
                    for u in fields["uris"].split()
                ],
                "suites": fields.get("suites", "").split(),
                "components": [back.get(c, c) for c in fields.get("components", "").split()],
                "signed_by": fields.get("signed-by", ""),
            }
        )
    return found


if __name__ == "__main__":
    main()
