#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""An apt repository with a key checked by fingerprint, reusing an entry that already names it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: glm5_apt_signed_source
short_description: An apt source with a key checked by fingerprint, never listed twice
description:
  - Looks through C(/etc/apt/sources.list) and C(/etc/apt/sources.list.d/*.list|*.sources) for
    entries of the same repository URL. When one exists (for example the one NVIDIA's
    C(cuda-keyring) package writes, C(Signed-By /usr/share/keyrings/cuda-archive-keyring.gpg)), it
    is reused - its key must carry one of the expected fingerprints - and this module's own sources
    file is removed, so apt never sees the URL twice with different C(Signed-By) values
    ("Conflicting values set for option Signed-By").
  - Otherwise it installs the key (downloaded from C(key_url) or given as C(key_content)) only when
    the key's OpenPGP fingerprint is one of C(fingerprints), and writes a deb822 sources file with
    C(Signed-By) that key.
  - Optionally makes sure Debian's own archive offers a component (C(contrib)); when no Debian
    entry for the release lists it, a sources file with that component beside it is written;
    without any Debian entry for the release, it only says so (C(component_note)).
  - Supports check mode (reports what it would change) and diff.
options:
  url:
    description: Repository URL (a flat repository, suite C(/)).
    type: str
    required: true
  key_url:
    description: Where the ASCII-armoured key is published (http(s) or file URL).
    type: str
    default: ""
  key_content:
    description: The key itself (ASCII-armoured); when set, nothing is downloaded.
    type: str
    default: ""
  fingerprints:
    description: Accepted OpenPGP fingerprints of the key (hex, spaces ignored).
    type: list
    elements: str
    required: true
  keyring:
    description: Where to put the key when no existing entry is reused.
    type: path
    required: true
  sources_file:
    description: This module's deb822 sources file for the repository.
    type: path
    required: true
  reuse_existing:
    description: Reuse another entry for the same URL (true), or fail naming it (false).
    type: bool
    default: true
  debian_component:
    description: A component of Debian's archive to make sure of (e.g. C(contrib)); empty for none.
    type: str
    default: ""
  debian_release:
    description: The Debian codename whose archive entries are looked at (e.g. C(trixie)).
    type: str
    default: ""
  debian_component_file:
    description: The sources file written when the component is missing.
    type: path
    default: /etc/apt/sources.list.d/glm5-debian-component.sources
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
- name: NVIDIA's CUDA repository for Debian 13, its key checked by fingerprint
  glm5_apt_signed_source:
    url: https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/
    key_url: https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/8793F200.pub
    fingerprints: [02182E60104FCDC26EAE1B8597A5D4CB8793F200]
    keyring: /etc/apt/keyrings/nvidia-cuda.asc
    sources_file: /etc/apt/sources.list.d/nvidia-cuda.sources
    debian_component: contrib
    debian_release: trixie
"""

RETURN = r"""
keyring:
  description: The keyring apt uses for the repository (the reused entry's, or C(keyring)).
  returned: always
  type: str
reused:
  description: The file whose entry for the URL is reused ('' when this module's own file is used).
  returned: always
  type: str
fingerprint:
  description: The expected fingerprint the key carries.
  returned: always
  type: str
component_added:
  description: Whether a sources file for the Debian component is (or would be) written.
  returned: always
  type: bool
component_note:
  description: What was done about the Debian component, or why nothing could be ('' if nothing).
  returned: always
  type: str
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.glm5_apt_sources import (
    debian_entries,
    read_entries,
    render_component,
    render_sources,
    same_url,
)
from ansible.module_utils.glm5_openpgp import KeyProblem, key_fingerprints, normal_fingerprint
from ansible.module_utils.urls import open_url


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def fetch_key(module: AnsibleModule) -> bytes:
    if module.params["key_content"]:
        return module.params["key_content"].encode("ascii", "replace")
    url = module.params["key_url"]
    if not url:
        module.fail_json(msg="neither key_url nor key_content is set: give the key's URL")
    if url.startswith("file://"):
        data = _read(url[len("file://") :])
        if data is None:
            module.fail_json(msg=f"cannot read the key at {url}: check the file name")
        return data
    try:
        return open_url(url, timeout=30).read()
    except Exception as exc:  # noqa: BLE001 - urllib raises many kinds; all mean "not fetched"
        module.fail_json(
            msg=f"cannot fetch the key {url}: {exc}. NVIDIA's key file names differ in case per "
            "repository (3bf863cc.pub for debian12, 8793F200.pub for debian13): check the name "
            "against the repository's index, or give the key in key_content"
        )


def matching(found: list[str], wanted: list[str]) -> str:
    return next((fp for fp in found if fp in wanted), "")


def write(module: AnsibleModule, path: str, data: bytes) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".glm5-")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.chmod(temp, 0o644)
    module.atomic_move(temp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "key_url": {"type": "str", "default": "", "no_log": False},
            "key_content": {"type": "str", "default": "", "no_log": False},
            "fingerprints": {"type": "list", "elements": "str", "required": True},
            "keyring": {"type": "path", "required": True},
            "sources_file": {"type": "path", "required": True},
            "reuse_existing": {"type": "bool", "default": True},
            "debian_component": {"type": "str", "default": ""},
            "debian_release": {"type": "str", "default": ""},
            "debian_component_file": {
                "type": "path",
                "default": "/etc/apt/sources.list.d/glm5-debian-component.sources",
            },
            "apt_root": {"type": "path", "default": "/etc/apt"},
        },
        supports_check_mode=True,
    )
    p = module.params
    wanted = [normal_fingerprint(fp) for fp in p["fingerprints"]]
    if not wanted or any(not re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", fp) for fp in wanted):
        module.fail_json(msg=f"fingerprints must be 40 or 64 hex digits, got {p['fingerprints']}")
    own_files = {p["sources_file"], p["debian_component_file"]}
    entries = read_entries(p["apt_root"])
    others = [
        e
        for e in entries
        if e["file"] not in own_files and any(same_url(u, p["url"]) for u in e["uris"])
    ]
    result = {
        "changed": False,
        "reused": "",
        "component_added": False,
        "component_note": "",
        "diff": [],
    }

    if others and not p["reuse_existing"]:
        module.fail_json(
            msg=f"{others[0]['file']} already lists {p['url']}: remove that entry, or allow "
            "reusing it (reuse_existing)"
        )
    if others:
        keyrings = sorted({e["signed_by"] for e in others})
        if len(keyrings) > 1:
            module.fail_json(
                msg=f"{p['url']} is listed with different Signed-By values ({', '.join(keyrings)}) "
                f"in {', '.join(sorted({e['file'] for e in others}))}: apt refuses that; keep one"
            )
        keyring = keyrings[0]
        fp = ""
        if keyring.startswith("/"):
            data = _read(keyring)
            try:
                fp = matching(key_fingerprints(data), wanted) if data else ""
            except KeyProblem as exc:
                module.fail_json(msg=f"{keyring} (named by {others[0]['file']}): {exc}")
            if not fp:
                module.fail_json(
                    msg=f"{others[0]['file']} lists {p['url']} with Signed-By {keyring}, which is "
                    f"missing or lacks the expected key ({', '.join(wanted)}): fix or remove that "
                    "entry (e.g. reinstall cuda-keyring)"
                )
        result.update(keyring=keyring, reused=others[0]["file"], fingerprint=fp)
        if os.path.exists(p["sources_file"]):
            result["changed"] = True
            result["diff"].append({"before_header": p["sources_file"], "after_header": "(removed)"})
            if not module.check_mode:
                os.unlink(p["sources_file"])
    else:
        present = _read(p["keyring"])
        fp = ""
        if present:
            try:
                fp = matching(key_fingerprints(present), wanted)
            except KeyProblem:
                fp = ""
        if not fp:
            data = fetch_key(module)
            try:
                found = key_fingerprints(data)
            except KeyProblem as exc:
                module.fail_json(msg=f"the key from {p['key_url'] or 'key_content'}: {exc}")
            fp = matching(found, wanted)
            if not fp:
                module.fail_json(
                    msg=f"the key from {p['key_url'] or 'key_content'} has fingerprint(s) "
                    f"{', '.join(found)}, expected {', '.join(wanted)}: a wrong or replaced key; "
                    "check the URL and the fingerprint NVIDIA publishes"
                )
            result["changed"] = True
            result["diff"].append({"before_header": p["keyring"], "after_header": p["keyring"]})
            if not module.check_mode:
                write(module, p["keyring"], data)
        text = render_sources(p["url"], p["keyring"], "NVIDIA's CUDA repository").encode()
        if _read(p["sources_file"]) != text:
            result["changed"] = True
            before = (_read(p["sources_file"]) or b"").decode("utf-8", "replace")
            result["diff"].append(
                {
                    "before_header": p["sources_file"],
                    "after_header": p["sources_file"],
                    "before": before,
                    "after": text.decode(),
                }
            )
            if not module.check_mode:
                write(module, p["sources_file"], text)
        result.update(keyring=p["keyring"], fingerprint=fp)

    if p["debian_component"]:
        release, component = p["debian_release"], p["debian_component"]
        debian = [
            e for e in debian_entries(entries, release) if e["file"] != p["debian_component_file"]
        ]
        have = any(component in e["components"] for e in debian)
        if not debian:
            result["component_note"] = (
                f"no entry of Debian's archive for {release} (suite {release} with main) in "
                f"{p['apt_root']}: '{component}' not added; packages that need it (NVIDIA's "
                "depend on nvidia-support) install only once Debian's archive is configured"
            )
            module.exit_json(**result)
        current = _read(p["debian_component_file"])
        wanted_file = None if have else render_component(debian, release, component).encode()
        if current != wanted_file:
            result["changed"] = True
            result["component_added"] = wanted_file is not None
            if wanted_file is not None:
                result["component_note"] = (
                    f"Debian's {component} added in {p['debian_component_file']} beside "
                    f"{debian[0]['file']}"
                )
            result["diff"].append(
                {
                    "before_header": p["debian_component_file"],
                    "after_header": p["debian_component_file"],
                    "before": (current or b"").decode("utf-8", "replace"),
                    "after": (wanted_file or b"").decode(),
                }
            )
            if not module.check_mode:
                if wanted_file is None:
                    os.unlink(p["debian_component_file"])  # another entry has it now
                else:
                    write(module, p["debian_component_file"], wanted_file)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
