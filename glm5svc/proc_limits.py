"""The memlock and nofile lines of /proc/<pid>/limits (preflight's container and unit rows)."""

from __future__ import annotations

from pathlib import Path


def read_proc_limits(
    proc_root: Path = Path("/proc"), pid: str = "self"
) -> dict[str, tuple[str, str]]:
    """{"memlock": (soft, hard), "nofile": (soft, hard)} from /proc/<pid>/limits."""
    names = {"Max locked memory": "memlock", "Max open files": "nofile"}
    found = {}
    for line in _text(proc_root / pid / "limits").splitlines():
        for label, key in names.items():
            if line.startswith(label):
                fields = line[len(label) :].split()
                if len(fields) >= 2:
                    found[key] = (fields[0], fields[1])
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return ""
