"""Run a playbook with ansible-runner; count results per host; keep the full log on disk.

What the summary shows besides the counts: the message of every `ansible.builtin.debug`
task (the roles use debug only to report to the operator: verdicts, reports, what check
mode cannot know) and of every failed or unreachable task.

A run in which no host matched (ansible-playbook skips such a play with exit 0, or refuses
a `--limit` that leaves nothing with exit 1) is an error naming the plays' host patterns,
the `--limit` and the inventory's groups (`ansible-inventory --list`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from glm5svc.errors import Glm5Error


class ProvisionError(Glm5Error):
    """ansible-runner is missing or the playbook could not be started (exit 1)."""


DEBUG_ACTIONS = ("ansible.builtin.debug", "debug")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class HostTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    task: str = ""
    changed_tasks: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)  # task -> report or failure


@dataclass
class Progress:
    hosts: dict[str, HostTally] = field(default_factory=dict)
    play: str = ""
    patterns: list[str] = field(default_factory=list)  # each play's host pattern
    unmatched: list[str] = field(default_factory=list)  # patterns of plays no host matched
    ansible_errors: list[str] = field(default_factory=list)  # ansible's own ERROR lines

    def host(self, name: str) -> HostTally:
        return self.hosts.setdefault(name, HostTally())

    def handle(self, event: dict) -> None:
        data = event.get("event_data") or {}
        kind = event.get("event", "")
        host = data.get("host")
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
            self.patterns.append(str(data.get("play_pattern", "")))
        elif kind == "playbook_on_no_hosts_matched":
            self.unmatched.append(str(data.get("play_pattern", "")))
        elif kind in ("verbose", "error") and "ERROR" in event.get("stdout", ""):
            self.ansible_errors.append(_ANSI.sub("", event["stdout"]).strip())
        if not host:
            return
        tally = self.host(host)
        task = data.get("task", "")
        result = data.get("res") or {}
        if kind == "runner_on_start":
            tally.task = task
        elif kind == "runner_on_ok":
            tally.ok += 1
            if result.get("changed"):
                tally.changed += 1
                tally.changed_tasks.append(task)
            if "msg" in result and data.get("task_action") in DEBUG_ACTIONS:
                tally.messages[task] = _text(result["msg"])
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            tally.failed += 1
            tally.messages[task] = _text(result.get("msg") or result.get("stderr") or result)
        elif kind == "runner_on_unreachable":
            tally.unreachable += 1
            tally.messages[task] = _text(result.get("msg", "unreachable"))


def _text(value) -> str:
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return str(value)


def ansible_bin_dir() -> Path | None:
    """Where ansible-playbook is: beside this interpreter (the same venv, activated or
    not), else on PATH."""
    beside = Path(sys.executable).parent
    if (beside / "ansible-playbook").is_file():
        return beside
    found = shutil.which("ansible-playbook")
    return Path(found).parent if found else None


def new_log_path(project_dir: Path, playbook: str, log_dir: Path) -> Path:
    """Check what the run needs before anything is shown or written; the log's path."""
    if not (project_dir / playbook).is_file():
        raise ProvisionError(
            f"no playbook {project_dir / playbook}: pass --project (the glm5svc checkout "
            "holding site.yml) or the playbook (PLAYBOOK or --playbook)"
        )
    if importlib.util.find_spec("ansible_runner") is None:
        raise ProvisionError("ansible-runner is not installed: pip install 'glm5svc[provision]'")
    if ansible_bin_dir() is None:
        raise ProvisionError(
            "ansible-playbook is neither beside this Python nor on PATH: "
            "pip install 'glm5svc[provision]' (it brings ansible-core)"
        )
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProvisionError(
            f"cannot create the log directory {log_dir}: {exc.strerror}; pass --log-dir"
        ) from None
    return log_dir / f"provision-{time.strftime('%Y%m%dT%H%M%S')}.log"


def run_playbook(
    project_dir: Path,
    playbook: str,
    inventory: str | None,
    extra_args: list[str],
    log_path: Path,
    on_event,
    passwords: dict[str, str] | None = None,
) -> int:
    """ansible-runner over the playbook; every event to on_event, its output to log_path;
    `passwords`: ansible-runner's answers to ansible's prompts (pattern -> answer), kept in
    memory only."""
    import ansible_runner  # an optional dependency (glm5svc[provision]), checked above

    cmdline = shlex.join(extra_args)
    # ansible-runner's working directory (env/, artifacts/ with every event again): the log
    # keeps the output, so it goes once the run is over.
    with (
        tempfile.TemporaryDirectory(prefix="glm5svc-runner-") as private_data_dir,
        log_path.open("w", encoding="utf-8") as log,
    ):

        def event_handler(event: dict) -> bool:
            if event.get("stdout"):
                log.write(event["stdout"] + "\n")
                log.flush()
            on_event(event)
            return True

        result = ansible_runner.run(
            private_data_dir=private_data_dir,
            project_dir=str(project_dir),
            playbook=str(project_dir / playbook),
            inventory=inventory,
            cmdline=cmdline or None,
            envvars=_ansible_env(project_dir),
            event_handler=event_handler,
            passwords=passwords or None,
            quiet=True,
        )
    return int(result.rc or 0)


def _ansible_env(project_dir: Path) -> dict[str, str]:
    return {
        "ANSIBLE_CONFIG": str(project_dir / "ansible.cfg"),
        "PATH": f"{ansible_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def unreachable_hints(progress: Progress) -> list[str]:
    """For a run with unreachable hosts: each one with Ansible's message, and what to check."""
    hosts = {name: tally for name, tally in progress.hosts.items() if tally.unreachable}
    if not hosts:
        return []
    lines = [
        f"unreachable: {name} ({' '.join(list(tally.messages.values())[-1:]).strip()[:200]})"
        for name, tally in hosts.items()
    ]
    check = (
        "check for each: ansible_host in the inventory is the machine's address; "
        "`ssh root@<address> true` works from here (key loaded, host key known); a container "
        "reached through its host (glm5_pct) needs that host reachable and the container "
        "running (`pct status <CTID>` there); then run again, or --limit the hosts that are up"
    )
    return [*lines, check]


def no_host_matched(progress: Progress) -> bool:
    """Nothing ran on any host: every play was skipped, or ansible refused the --limit."""
    if progress.hosts:
        return False
    return bool(progress.unmatched) or any("no hosts" in e for e in progress.ansible_errors)


def inventory_groups(project_dir: Path, inventory: str | None) -> list[str]:
    """The inventory's groups with at least one host, as ansible-inventory reads them."""
    cmd = [str(ansible_bin_dir() / "ansible-inventory"), "--list"]
    if inventory:
        cmd += ["-i", inventory]
    try:
        listed = subprocess.run(
            cmd, cwd=project_dir, env={**os.environ, **_ansible_env(project_dir)},
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        data = json.loads(listed.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return sorted(
        name
        for name, group in data.items()
        if name not in ("_meta", "all") and isinstance(group, dict) and _has_hosts(data, name)
    )


def _has_hosts(data: dict, name: str, seen: frozenset[str] = frozenset()) -> bool:
    group = data.get(name) or {}
    if group.get("hosts"):
        return True
    children = [c for c in group.get("children", []) if c not in seen]
    return any(_has_hosts(data, child, seen | {name}) for child in children)


def no_hosts_error(
    progress: Progress, limit: str | None, inventory: str | None, groups: list[str]
) -> ProvisionError:
    patterns = ", ".join(sorted(set(progress.unmatched or progress.patterns))) or "?"
    where = inventory or "the inventory (none given: pass -i)"
    problems = [
        f"the plays' host patterns: {patterns}" + (f"; --limit {limit}" if limit else ""),
        f"the groups with hosts in {where}: {', '.join(groups) if groups else 'none'}",
        "fix: pass -i with the site's inventory (inventory/<site>/hosts.yml), or a --limit "
        "naming one of those groups or hosts",
    ]
    problems += progress.ansible_errors[-2:]
    return ProvisionError("no hosts matched: nothing was provisioned", problems=problems)
