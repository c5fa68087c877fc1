"""Preflight's RLIMIT_NOFILE and RLIMIT_MEMLOCK rows: the server's hard limits, and whose."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

from glm5svc.hostfacts.limits import MIN_NOFILE, NOFILE
from glm5svc.preflight.rows import OK, WARN, CheckRow, PreflightContext
from glm5svc.proc_limits import read_proc_limits

SERVICE_UNIT = "glm5.service"


def check_rlimits(ctx: PreflightContext) -> list[CheckRow]:
    """The server's RLIMIT_NOFILE and RLIMIT_MEMLOCK hard limits, saying whose they are:
    this process's under systemd (`glm5svc serve` in the unit: the unit's own), else what
    the running unit got, else the unit's settings, else this shell's."""
    if os.environ.get("INVOCATION_ID"):  # systemd sets it for a unit's processes
        return rlimit_rows(*_process_limits(), "this process, run by systemd")
    unit = read_unit_limits()
    if unit is not None:
        return rlimit_rows(*unit)
    return rlimit_rows(
        *_process_limits(),
        f"this shell's: {SERVICE_UNIT} is not installed here, and sets its own",
    )


def _process_limits() -> tuple[int, int]:
    return (
        resource.getrlimit(resource.RLIMIT_NOFILE)[1],
        resource.getrlimit(resource.RLIMIT_MEMLOCK)[1],
    )


def read_unit_limits(
    run=subprocess.run, proc_root: Path = Path("/proc")
) -> tuple[int, int, str] | None:
    """(nofile, memlock, whose) hard limits of the installed unit; None without it."""
    try:
        out = run(
            ["systemctl", "show", SERVICE_UNIT, "-p", "LoadState,MainPID,LimitNOFILE,LimitMEMLOCK"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return unit_limits(out.stdout, proc_root) if out.returncode == 0 else None


def unit_limits(text: str, proc_root: Path = Path("/proc")) -> tuple[int, int, str] | None:
    """The running unit's limits from /proc/<MainPID>/limits (what it really got: a
    container's hard limits may cap the unit's settings), else the unit's settings."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if values.get("LoadState") != "loaded":
        return None
    pid = values.get("MainPID", "0")
    if pid.isdigit() and pid != "0":
        running = read_proc_limits(proc_root, pid)
        if {"nofile", "memlock"} <= running.keys():
            return (
                _systemd_limit(running["nofile"][1]),
                _systemd_limit(running["memlock"][1]),
                f"the running {SERVICE_UNIT}, /proc/{pid}/limits",
            )
    try:
        return (
            _systemd_limit(values["LimitNOFILE"]),
            _systemd_limit(values["LimitMEMLOCK"]),
            f"{SERVICE_UNIT}'s settings (it is not running), from systemctl show",
        )
    except (KeyError, ValueError):
        return None


def _systemd_limit(text: str) -> int:
    """A limit as systemd ("infinity") or /proc/<pid>/limits ("unlimited") writes it."""
    return resource.RLIM_INFINITY if text in ("infinity", "unlimited") else int(text)


def rlimit_rows(nofile: int, memlock: int, whose: str) -> list[CheckRow]:
    nofile_ok = nofile == resource.RLIM_INFINITY or nofile >= MIN_NOFILE
    memlock_ok = memlock == resource.RLIM_INFINITY
    return [
        CheckRow(
            "RLIMIT_NOFILE",
            OK if nofile_ok else WARN,
            f"hard limit {_limit(nofile)} ({whose}); sglang raises its soft limit to {MIN_NOFILE} "
            "and needs a hard limit at least that high",
            ""
            if nofile_ok
            else f"LimitNOFILE={NOFILE} in {SERVICE_UNIT} (the shipped unit has it); in a "
            "container its hard limit caps that: lxc.prlimit.nofile (container rlimits row)",
        ),
        CheckRow(
            "RLIMIT_MEMLOCK",
            OK if memlock_ok else WARN,
            f"hard limit {_limit(memlock)} ({whose}); NCCL and pinned memory want unlimited",
            ""
            if memlock_ok
            else f"LimitMEMLOCK=infinity in {SERVICE_UNIT} (the shipped unit has it); in a "
            "container its hard limit caps that: lxc.prlimit.memlock (container rlimits row)",
        ),
    ]


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)
