#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""An apt repository with a key checked by fingerprint, reusing an entry that already names it."""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

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
  - Optionally makes sure Debian's own archive offers a component (C(contrib)): when no Debian
    entry for the release lists it, a sources file with that component beside it is written.
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
supports_check_mode: true
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
"""

ARMOR_BLOCK = re.compile(
    r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S
)
PUBLIC_KEY_TAG = 6
OWN_HEADER = "# Managed by Ansible (glm5_apt_signed_source): "


class KeyProblem(Exception):
    """The key cannot be read or is not the expected one; the message says why."""


# --- OpenPGP: fingerprints of the primary keys (RFC 4880 section 12.2, RFC 9580 for v6) ---


def dearmor(text: str) -> bytes:
    blocks = ARMOR_BLOCK.findall(text)
    if not blocks:
        raise KeyProblem("no 'BEGIN PGP PUBLIC KEY BLOCK' in the key text")
    data = b""
    for block in blocks:
        _headers, _, body = block.partition("\n\n") if "\n\n" in block else ("", "", block)
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith("=")]  # the CRC24 line
        try:
            data += base64.b64decode("".join(lines), validate=True)
        except ValueError as exc:
            raise KeyProblem(f"the armoured key is not valid base64 ({exc})") from None
    return data


def packets(data: bytes):
    """(tag, body) of each OpenPGP packet, old and new header formats."""
    at = 0
    while at < len(data):
        first = data[at]
        if not first & 0x80:
            raise KeyProblem(f"not an OpenPGP packet at byte {at}")
        if first & 0x40:  # new format
            tag, at = first & 0x3F, at + 1
            octet = data[at]
            if octet < 192:
                length, at = octet, at + 1
            elif octet < 224:
                length, at = ((octet - 192) << 8) + data[at + 1] + 192, at + 2
            elif octet == 255:
                length, at = int.from_bytes(data[at + 1 : at + 5], "big"), at + 5
            else:
                raise KeyProblem("partial packet lengths are not used in keys")
        else:  # old format
            tag, kind, at = (first >> 2) & 0x0F, first & 0x03, at + 1
            if kind == 3:
                raise KeyProblem("indeterminate packet length in a key")
            size = (1, 2, 4)[kind]
            length, at = int.from_bytes(data[at : at + size], "big"), at + size
        body = data[at : at + length]
        if len(body) != length:
            raise KeyProblem("the key data ends inside a packet")
        yield tag, body
        at += length


def fingerprint(body: bytes) -> str:
    version = body[0] if body else 0
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise KeyProblem(f"public key packet version {version} is not supported")


def key_fingerprints(data: bytes) -> list[str]:
    """Fingerprints of the primary keys in an armoured or binary keyring."""
    if b"-----BEGIN PGP" in data:
        data = dearmor(data.decode("ascii", "replace"))
    found = [fingerprint(body) for tag, body in packets(data) if tag == PUBLIC_KEY_TAG]
    if not found:
        raise KeyProblem("no public key in the key data")
    return found


def normal_fingerprint(text: str) -> str:
    return re.sub(r"\s+", "", text).upper()


# --- apt sources: one-line (.list) and deb822 (.sources) ---


def _one_line_entries(text: str, path: str) -> list[dict]:
    entries = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        options = {}
        match = re.match(r"^(deb|deb-src)\s+\[([^\]]*)\]\s+(.*)$", line)
        if match:
            kind, opts, rest = match.groups()
            for opt in opts.split():
                key, _, value = opt.partition("=")
                options[key.lower()] = value
        else:
            kind, _, rest = line.partition(" ")
        fields = rest.split()
        if kind not in ("deb", "deb-src") or len(fields) < 2:
            continue
        entries.append(
            {
                "file": path,
                "types": [kind],
                "uris": [fields[0]],
                "suites": [fields[1]],
                "components": fields[2:],
                "signed_by": options.get("signed-by", ""),
                "enabled": True,
            }
        )
    return entries


def _deb822_entries(text: str, path: str) -> list[dict]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
        if "uris" not in fields:
            continue
        entries.append(
            {
                "file": path,
                "types": fields.get("types", "").split(),
                "uris": fields["uris"].split(),
                "suites": fields.get("suites", "").split(),
                "components": fields.get("components", "").split(),
                "signed_by": fields.get("signed-by", "").strip(),
                "enabled": fields.get("enabled", "yes").lower() not in ("no", "false", "0"),
            }
        )
    return entries


def read_entries(apt_root: str) -> list[dict]:
    files = [os.path.join(apt_root, "sources.list")]
    files += sorted(glob.glob(os.path.join(apt_root, "sources.list.d", "*.list")))
    files += sorted(glob.glob(os.path.join(apt_root, "sources.list.d", "*.sources")))
    entries = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            continue
        parse = _deb822_entries if path.endswith(".sources") else _one_line_entries
        entries += [e for e in parse(text, path) if e["enabled"] and "deb" in e["types"]]
    return entries


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def render_sources(url: str, keyring: str, what: str) -> str:
    return f"{OWN_HEADER}{what}\nTypes: deb\nURIs: {url}\nSuites: /\nSigned-By: {keyring}\n"


def render_component(entries: list[dict], release: str, component: str) -> str:
    """One deb822 stanza per Debian archive entry, offering `component` beside it."""
    stanzas, seen = [], set()
    for entry in entries:
        suites = [s for s in entry["suites"] if s == release or s.startswith(release + "-")]
        key = (tuple(entry["uris"]), tuple(suites), entry["signed_by"])
        if key in seen:
            continue
        seen.add(key)
        lines = [
            f"# Debian's {component} component beside {entry['file']}",
            "Types: deb",
            f"URIs: {' '.join(entry['uris'])}",
            f"Suites: {' '.join(suites)}",
            f"Components: {component}",
        ]
        if entry["signed_by"] and "\n" not in entry["signed_by"]:
            lines.append(f"Signed-By: {entry['signed_by']}")
        stanzas.append("\n".join(lines) + "\n")
    return f"{OWN_HEADER}Debian {release} {component}\n" + "\n".join(stanzas)


def debian_entries(entries: list[dict], release: str) -> list[dict]:
    """Entries of Debian's archive for the release: its codename as a suite, with main."""
    return [e for e in entries if release in e["suites"] and "main" in e["components"]]


# --- the module ---


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
            "key_url": {"type": "str", "default": ""},
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
    result = {"changed": False, "reused": "", "component_added": False, "diff": []}

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
        if not debian and not have:
            module.fail_json(
                msg=f"no Debian archive entry for {release} (suite {release} with main) in "
                f"{p['apt_root']}: cannot add '{component}' beside it; add Debian's archive"
            )
        current = _read(p["debian_component_file"])
        wanted_file = None if have else render_component(debian, release, component).encode()
        if current != wanted_file:
            result["changed"] = True
            result["component_added"] = wanted_file is not None
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
