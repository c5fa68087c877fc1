"""`glm5svc provision`: site.yml through ansible-runner, a live view, a final summary."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from glm5svc.provision.runner import Progress, new_log_path, run_playbook

DEFAULT_LOG_DIR = Path(os.environ.get("GLM5SVC_PROVISION_LOGS", "/var/log/glm5svc"))


def register(subparsers):
    parser = subparsers.add_parser(
        "provision", help="run site.yml (host, then container) with a live view and a summary"
    )
    parser.add_argument("--project", default=".", help="the glm5svc checkout holding site.yml")
    parser.add_argument("-i", "--inventory", help="inventory (default: ansible.cfg's)")
    parser.add_argument("--playbook", default="site.yml")
    parser.add_argument("--check", action="store_true", help="ansible --check --diff")
    parser.add_argument("--limit", help="ansible --limit")
    parser.add_argument("--log-dir", default=str(DEFAULT_LOG_DIR), help="full logs kept here")
    parser.set_defaults(func=run)
    return parser


def _table(progress: Progress) -> Table:
    table = Table(title=f"glm5svc provision - {progress.play}", expand=True)
    for column in ("host", "task", "ok", "changed", "failed"):
        table.add_column(column)
    for name, tally in progress.hosts.items():
        table.add_row(
            name,
            tally.task[-70:],
            str(tally.ok),
            str(tally.changed),
            str(tally.failed + tally.unreachable),
        )
    return table


def run(args) -> int:
    project = Path(args.project).resolve()
    extra = []
    if args.check:
        extra += ["--check", "--diff"]
    if args.limit:
        extra += ["--limit", args.limit]
    log_path = new_log_path(project, args.playbook, Path(args.log_dir))
    progress = Progress()
    console = Console()
    with Live(_table(progress), console=console, refresh_per_second=4) as live:

        def on_event(event):
            progress.handle(event)
            live.update(_table(progress))

        rc = run_playbook(project, args.playbook, args.inventory, extra, log_path, on_event)
    _summary(console, progress, rc, log_path)
    return rc


def _summary(console: Console, progress: Progress, rc: int, log_path: Path) -> None:
    console.rule("summary")
    for name, tally in progress.hosts.items():
        console.print(
            f"[bold]{name}[/]: {tally.changed} changed, {tally.failed + tally.unreachable} failed"
        )
        for task in tally.changed_tasks:
            console.print(f"  changed: {task}")
        for task, message in tally.messages.items():
            console.print(f"  {task}:\n    " + message.replace("\n", "\n    "), highlight=False)
    console.print(f"full log: {log_path}")
    console.print("[green]provisioned[/]" if rc == 0 else f"[red]failed (ansible rc {rc})[/]")
