"""Who listens on a TCP port: /proc/net/tcp{,6} LISTEN sockets matched to /proc/PID/fd.

Used by `glm5svc serve` (is the engine port bound by *our* engine's process group?)
and by preflight (is the engine port already taken, and by whom? whose are the processes
holding GPU memory?). Linux only; a process of another user whose fds we cannot read is
reported as unknown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


@dataclass(frozen=True)
class PortHolder:
    pid: int
    command: str


def listening_inodes(port: int, proc: Path = PROC) -> set[int]:
    """Socket inodes of TCP sockets in LISTEN state on `port` (any address, v4 or v6)."""
    inodes: set[int] = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != TCP_LISTEN:
                continue
            local_port = fields[1].rsplit(":", 1)[-1]
            try:
                if int(local_port, 16) == port:
                    inodes.add(int(fields[9]))
            except ValueError:
                continue
    return inodes


def holders(port: int, pids: list[int] | None = None, proc: Path = PROC) -> list[PortHolder]:
    """Processes (among `pids`, default all) holding a LISTEN socket on `port`."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    candidates = pids if pids is not None else _all_pids(proc)
    found = []
    for pid in candidates:
        fd_dir = proc / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target in wanted:
                found.append(PortHolder(pid, command_of(pid, proc)))
                break
    return found


def port_listened(port: int, proc: Path = PROC) -> bool:
    return bool(listening_inodes(port, proc))


def _all_pids(proc: Path) -> list[int]:
    return [int(entry.name) for entry in proc.iterdir() if entry.name.isdigit()]


def command_of(pid: int, proc: Path = PROC) -> str:
    """A process's command line (200 characters at most); "?" when it cannot be read."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)[:200]
