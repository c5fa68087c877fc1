"""Find the sglang to patch: by running a venv's interpreter, or in a site-packages dir."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from glm5svc.errors import Glm5Error

# Reads metadata and the package's location without importing sglang (0.5.11+ imports torch).
_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
spec = iu.find_spec("sglang")
try:
    version = md.version("sglang")
except md.PackageNotFoundError:
    version = None
location = None
if spec is not None and spec.submodule_search_locations:
    location = list(spec.submodule_search_locations)[0]
print(json.dumps({"version": version, "package_dir": location, "python": sys.version.split()[0]}))
"""


class SglangNotFound(Glm5Error):
    """No sglang where we were told to look (exit 1)."""


@dataclass(frozen=True)
class SglangInstall:
    site_packages: Path  # the directory that holds sglang/
    version: str
    python: Path | None = None  # the interpreter that found it, if one did

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "site_packages": str(self.site_packages),
            "python": str(self.python) if self.python else None,
        }


def locate_sglang(
    python: Path | str | None = None,
    site_packages: Path | str | None = None,
    pythonpath: str | None = None,
):
    """The sglang installed for `python` or in `site_packages` (exactly one must be given).
    `pythonpath`: the server's PYTHONPATH (server.env), so the interpreter looks where the
    server will (a stack installed with `pip install --target DIR`)."""
    if (python is None) == (site_packages is None):
        raise ValueError("give exactly one of python= or site_packages=")
    if site_packages is not None:
        return _from_site_packages(Path(site_packages))
    return _from_python(Path(python), pythonpath)


def _from_python(python: Path, pythonpath: str | None = None) -> SglangInstall:
    if not python.exists():
        raise SglangNotFound(
            f"no Python interpreter at {python}: create the service venv (container role) "
            "or set server.python to the venv's interpreter"
        )
    # -I ignores PYTHON* variables and the user site; with a PYTHONPATH: -s and only that one.
    isolation = ["-I"] if not pythonpath else ["-s"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        proc = subprocess.run(
            [str(python), *isolation, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SglangNotFound(f"could not run {python}: {exc}") from None
    if proc.returncode != 0:
        raise SglangNotFound(f"{python} failed to report sglang: {proc.stderr.strip()[-500:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    if not found["package_dir"] or not found["version"]:
        raise SglangNotFound(
            f"sglang is not installed for {python} (Python {found['python']}): install the "
            "stack profile's requirements (glm5svc/data/profiles/<profile>.txt)"
        )
    return SglangInstall(Path(found["package_dir"]).parent, found["version"], python)


def _from_site_packages(root: Path) -> SglangInstall:
    if not (root / "sglang").is_dir():
        raise SglangNotFound(f"{root}: no sglang/ package directory here")
    dist_infos = sorted(root.glob("sglang-*.dist-info"))
    if len(dist_infos) != 1:
        found = ", ".join(p.name for p in dist_infos) or "none"
        raise SglangNotFound(
            f"{root}: expected one sglang-*.dist-info to read the version from, found {found}"
        )
    metadata = dist_infos[0] / "METADATA"
    try:
        headers = HeaderParser().parsestr(metadata.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SglangNotFound(f"{metadata}: cannot read: {exc.strerror}") from None
    version = headers.get("Version")
    if not version:
        raise SglangNotFound(f"{metadata}: no Version field")
    return SglangInstall(root, version.strip())
