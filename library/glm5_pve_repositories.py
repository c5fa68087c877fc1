#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""Proxmox's enterprise repositories on a host without a subscription: refused, or switched.

Longer than 400 lines: a quarter of it is DOCUMENTATION, EXAMPLES and RETURN, which Ansible
reads from the module's own file.
"""

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
    C(no-subscription), on C(download.proxmox.com), same suite and Signed-By) where the Proxmox VE
    admin guide puts it (pve-docs, Package Repositories), as a deb822 stanza (Proxmox VE's in
    O(sources_file), C(proxmox.sources); Ceph's in O(ceph_sources_file), C(ceph.sources)).
    Otherwise it fails, naming both fixes.
  - An entry already enabled in any of apt's files (same URI, either scheme, suite and
    component) is not written again.
  - The files of O(legacy_files) (where an earlier version wrote the entries) are migrated; their
    entries go where the admin guide puts them (unless already there), then the files are removed.
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
    description: The deb822 file Proxmox VE's no-subscription entry is added to.
    type: path
    default: /etc/apt/sources.list.d/proxmox.sources
  ceph_sources_file:
    description: The deb822 file Ceph's no-subscription entry is added to.
    type: path
    default: /etc/apt/sources.list.d/ceph.sources
  legacy_files:
    description: Files of an earlier version's entries, moved to the files above, then removed.
    type: list
    elements: path
    default: [/etc/apt/sources.list.d/glm5-proxmox-no-subscription.sources]
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
written:
  description: The files a no-subscription entry is (or would be) added to.
  returned: always
  type: list
already:
  description: "The no-subscription entries found enabled already, as C(file: uri suite component)."
  returned: always
  type: list
removed:
  description: The files of O(legacy_files) that are (or would be) removed.
  returned: always
  type: list
"""

import os
import re
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.glm5_apt_sources import read_entries

ENTERPRISE = "https://enterprise.proxmox.com/debian"
SOURCES_D = "/etc/apt/sources.list.d"
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


def scan(apt_root: str, skip: set[str]) -> tuple[list[dict], dict[str, str]]:
    """Every enabled enterprise entry, and each file's text with its entries disabled."""
    names = [os.path.join(apt_root, "sources.list")]
    folder = os.path.join(apt_root, "sources.list.d")
    if os.path.isdir(folder):
        names += sorted(
            os.path.join(folder, n) for n in os.listdir(folder) if n.endswith((".list", ".sources"))
        )
    entries, rewritten = [], {}
    for path in names:
        if path in skip or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        parse = deb822_enterprise if path.endswith(".sources") else one_line_enterprise
        found, new = parse(text, path)
        if found:
            entries += found
            rewritten[path] = new
    return entries, rewritten


def _where(uri: str) -> str:
    """A URI without its scheme and trailing slash: http and https of one archive are one."""
    return re.sub(r"^[a-z][a-z0-9+.-]*://", "", uri.strip().lower()).rstrip("/")


def enabled_components(apt_root: str, skip: set[str]) -> dict[tuple[str, str, str], str]:
    """(where, suite, component) of every enabled deb entry outside skip, with its file."""
    found = {}
    for entry in read_entries(apt_root):
        if entry["file"] in skip:
            continue
        for uri in entry["uris"]:
            for suite in entry["suites"]:
                for component in entry["components"]:
                    found.setdefault((_where(uri), suite, component), entry["file"])
    return found


def no_subscription_stanzas(entries: list[dict], base: str) -> list[dict]:
    """The no-subscription entry for each enterprise one (duplicates once)."""
    stanzas, seen = [], set()
    for entry in entries:
        uris = [
            base.rstrip("/") + u.strip()[len(ENTERPRISE) :] if is_enterprise(u) else u
            for u in entry["uris"]
        ]
        components = [COMPONENTS.get(c, c) for c in entry["components"]]
        key = (tuple(uris), tuple(entry["suites"]), tuple(components))
        if key in seen:
            continue
        seen.add(key)
        stanzas.append({**entry, "uris": uris, "components": components})
    return stanzas


def stanza_text(stanza: dict) -> str:
    kind = "Ceph" if any("/ceph-" in u for u in stanza["uris"]) else "Proxmox VE"
    lines = [
        f"# {kind} no-subscription repository, in place of {stanza['file']} (no subscription; "
        "glm5_pve_repositories)",
        "Types: deb",
        f"URIs: {' '.join(stanza['uris'])}",
        f"Suites: {' '.join(stanza['suites'])}",
        f"Components: {' '.join(stanza['components'])}",
    ]
    if stanza["signed_by"]:
        lines.append(f"Signed-By: {stanza['signed_by']}")
    return "\n".join(lines) + "\n"


def plan_additions(stanzas: list[dict], have: dict, files: dict) -> tuple[dict, list[str]]:
    """({file: [stanza text to append]}, ['file: uri suite component' already enabled])."""
    additions: dict[str, list[str]] = {}
    already = []
    for stanza in stanzas:
        wanted = [
            (_where(u), suite, c)
            for u in stanza["uris"]
            for suite in stanza["suites"]
            for c in stanza["components"]
        ]
        if wanted and all(w in have for w in wanted):
            already += [f"{have[w]}: {' '.join(w)}" for w in wanted]
            continue
        ceph = any("/ceph-" in u for u in stanza["uris"])
        additions.setdefault(files["ceph" if ceph else "pve"], []).append(stanza_text(stanza))
    return additions, already


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
            "sources_file": {"type": "path", "default": f"{SOURCES_D}/proxmox.sources"},
            "ceph_sources_file": {"type": "path", "default": f"{SOURCES_D}/ceph.sources"},
            "legacy_files": {
                "type": "list",
                "elements": "path",
                "default": [f"{SOURCES_D}/glm5-proxmox-no-subscription.sources"],
            },
            "subscription_status": {"type": "str", "default": ""},
            "flag_name": {"type": "str", "default": "glm5_host_pve_repos_no_subscription"},
            "apt_root": {"type": "path", "default": "/etc/apt"},
        },
        supports_check_mode=True,
    )
    p = module.params
    legacy = [f for f in p["legacy_files"] if os.path.isfile(f)]
    entries, rewritten = scan(p["apt_root"], set(p["legacy_files"]))
    shown = [
        f"{e['file']}: {' '.join(e['uris'])} {' '.join(e['suites'])} {' '.join(e['components'])}"
        for e in entries
    ]
    result = {"changed": False, "enterprise": shown, "disabled": [], "written": [],
              "already": [], "removed": [], "diff": []}  # fmt: skip
    result["subscription"] = subscription_status(module) if entries else "not asked"
    if result["subscription"] == "active":
        entries, rewritten = [], {}
    elif entries and not p["no_subscription"]:
        module.fail_json(msg=refusal(entries, result["subscription"], p["flag_name"]), **result)
    # An earlier version's file: its entries (for enterprise entries disabled then) move too.
    previous = []
    for path in legacy:
        with open(path, encoding="utf-8") as handle:
            previous += deb822_plain(handle.read(), path, p["no_subscription_base"])
    if not entries and not legacy:
        module.exit_json(**result)
    stanzas = no_subscription_stanzas(previous + entries, p["no_subscription_base"])
    have = enabled_components(p["apt_root"], set(p["legacy_files"]))
    files = {"pve": p["sources_file"], "ceph": p["ceph_sources_file"]}
    additions, result["already"] = plan_additions(stanzas, have, files)
    texts = dict(rewritten)
    for path, added in additions.items():
        if path not in texts:
            texts[path] = ""
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    texts[path] = handle.read()
        body = texts[path].rstrip("\n")
        texts[path] = (body + "\n\n" if body else "") + "\n".join(added)
    for path, text in sorted(texts.items()):
        before = ""
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                before = handle.read()
        result["diff"].append(
            {"before_header": path, "after_header": path, "before": before, "after": text}
        )
        if path in rewritten:
            result["disabled"].append(path)
        if path in additions:
            result["written"].append(path)
        if not module.check_mode:
            write(path, text)
    # Removed only once the entries it held are written where they belong.
    for path in legacy:
        with open(path, encoding="utf-8") as handle:
            result["diff"].append(
                {"before_header": path, "after_header": f"{path} (removed)",
                 "before": handle.read(), "after": ""}
            )  # fmt: skip
        result["removed"].append(path)
        if not module.check_mode:
            os.unlink(path)
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
