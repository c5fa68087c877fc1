"""apt's sources: one-line (.list) and deb822 (.sources) entries, read and written; stdlib only.

Module_utils for library/glm5_apt_signed_source.py (see sources.list(5)).
"""

from __future__ import annotations

import glob
import os
import re

OWN_HEADER = "# Managed by Ansible (glm5_apt_signed_source): "


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
