"""Run a playbook with ansible-runner; count results per host; keep the full log on disk."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from glm5svc.errors import Glm5Error


class ProvisionError(Glm5Error):
    """ansible-runner is missing or the playbook could not be started (exit 1)."""


@dataclass
class HostTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    task: str = ""
    changed_tasks: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)  # task -> debug msg / failure


@dataclass
class Progress:
    hosts: dict[str, HostTally] = field(default_factory=dict)
    play: str = ""

    def host(self, name: str) -> HostTally:
        return self.hosts.setdefault(name, HostTally())

    def handle(self, event: dict) -> None:
        data = event.get("event_data") or {}
        kind = event.get("event", "")
        host = data.get("host")
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
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
            if "msg" in result and data.get("task_action", "").endswith("debug"):
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


def run_playbook(
    project_dir: Path,
    playbook: str,
    inventory: str | None,
    extra_args: list[str],
    log_dir: Path,
    on_event,
) -> tuple[int, Path]:
    try:
        import ansible_runner
    except ImportError:
        raise ProvisionError(
            "ansible-runner is not installed: pip install 'glm5svc[provision]'"
        ) from None
    stamp = time.strftime("%Y%m%dT%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"provision-{stamp}.log"
    cmdline = " ".join(extra_args)
    with log_path.open("w", encoding="utf-8") as log:

        def event_handler(event: dict) -> bool:
            if event.get("stdout"):
                log.write(event["stdout"] + "\n")
                log.flush()
            on_event(event)
            return True

        result = ansible_runner.run(
            private_data_dir=str(log_dir / f"runner-{stamp}"),
            project_dir=str(project_dir),
            playbook=str(project_dir / playbook),
            inventory=inventory,
            cmdline=cmdline or None,
            envvars={"ANSIBLE_CONFIG": str(project_dir / "ansible.cfg")},
            event_handler=event_handler,
            quiet=True,
        )
    return int(result.rc or 0), log_path
