"""`glm5svc provision`: site.yml through ansible-runner, a live view, a final summary.

It takes ansible-playbook's spelling of what an operator's run needs (docs/operations.md):
`-i`, the playbook (positional, or --playbook), --check, --diff, --limit, --tags,
--skip-tags, -e, and the vault's --ask-vault-pass (asked here, with no echo, and given to
ansible-playbook's own prompt: never in argv or the log), --vault-password-file and
--vault-id (and ansible's short forms -C, -D, -l, -t, -J). Any other ansible-playbook option
is refused (exit 2) naming it.

Exit status: ansible-playbook's (0 done, 2 a host failed, 4 unreachable, ...); 1 when
nothing ran because no host matched, or ansible-runner could not start the playbook.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit
from glm5svc.provision.runner import (
    Progress,
    inventory_groups,
    new_log_path,
    no_host_matched,
    no_hosts_error,
    run_playbook,
    unreachable_hints,
)

DEFAULT_LOG_DIR = Path(os.environ.get("GLM5SVC_PROVISION_LOGS", "/var/log/glm5svc"))
SITE = "site.yml"
# ansible-playbook's prompts for a vault password (ansible-core 2.19's ansible/cli/__init__.py):
# "Vault password: " for --ask-vault-pass, "Vault password (<id>): " for --vault-id <id>@prompt.
VAULT_PROMPT = r"^Vault password:\s*?$"


def register(subparsers):
    parser = subparsers.add_parser(
        "provision",
        epilog=epilog("provision"),
        help="run site.yml (host, then container) with a live view and a summary",
        description="Run site.yml (or the playbook named) through ansible-runner with a live "
        "table and a summary. It takes ansible-playbook's spelling of -i, the playbook, "
        "--check, --diff, --limit, --tags, --skip-tags, -e and the vault options, and "
        "refuses any other ansible-playbook option. docs/operations.md is the operator's guide.",
    )
    parser.add_argument("--project", default=".", help="the glm5svc checkout holding site.yml")
    parser.add_argument(
        "-i", "--inventory", help="the site's inventory, e.g. inventory/<site>/hosts.yml"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "playbook_file",
        nargs="?",
        metavar="PLAYBOOK",
        help=f"the playbook, in --project, as ansible-playbook takes it (default: {SITE})",
    )
    which.add_argument("--playbook", help="the same as PLAYBOOK")
    # ansible-playbook's short forms too (-C, -D, -l, -t, -J), and its one refusal among
    # these: a vault password asked for and given in a file at once.
    ansible = parser.add_argument_group("passed to ansible-playbook as they are")
    ansible.add_argument("-C", "--check", action="store_true", help="change nothing, report")
    ansible.add_argument("-D", "--diff", action="store_true", help="show what files change")
    ansible.add_argument("-l", "--limit", metavar="PATTERN", help="only these hosts or groups")
    ansible.add_argument("-t", "--tags", metavar="TAGS", help="only tasks with these tags (a,b)")
    ansible.add_argument("--skip-tags", metavar="TAGS", help="no task with these tags (a,b)")
    ansible.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        metavar="VARS",
        help="key=value, a JSON/YAML string or @file (repeat)",
    )
    vault = ansible.add_mutually_exclusive_group()
    vault.add_argument(
        "-J",
        "--ask-vault-pass",
        action="store_true",
        help="ask for the vault password here (no echo) and answer ansible-playbook's prompt "
        "with it: never in argv or the log",
    )
    vault.add_argument(
        "--vault-password-file", metavar="FILE", action="append",
        help="a file holding the vault password (repeat)",
    )  # fmt: skip
    ansible.add_argument(
        "--vault-id", metavar="ID", action="append", help="a vault identity, e.g. prod@prompt"
    )
    parser.add_argument("--log-dir", default=str(DEFAULT_LOG_DIR), help="full logs kept here")
    parser.add_argument("--json", action="store_true", help="no live view; the summary as JSON")
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


def ansible_arguments(args) -> list[str]:
    """The ansible-playbook options given, as ansible-playbook takes them."""
    extra = [flag for flag in ("--check", "--diff") if getattr(args, flag[2:])]
    for name, value in (("--limit", args.limit), ("--tags", args.tags),
                        ("--skip-tags", args.skip_tags)):  # fmt: skip
        if value:
            extra += [name, value]
    for value in args.extra_vars or []:
        extra += ["--extra-vars", value]
    if args.ask_vault_pass:
        extra.append("--ask-vault-pass")
    for name, values in (("--vault-password-file", args.vault_password_file),
                         ("--vault-id", args.vault_id)):  # fmt: skip
        for value in values or []:
            extra += [name, value]
    return extra


def chosen_playbook(args) -> str:
    return args.playbook_file or args.playbook or SITE


def vault_passwords(args) -> dict[str, str]:
    """The vault passwords ansible-playbook will prompt for (--ask-vault-pass, a --vault-id
    ID@prompt), asked here without echo, as ansible-runner's answers to those prompts: with
    no answer, ansible-playbook would wait for one under ansible-runner's pseudo-terminal."""
    answers = {}
    if args.ask_vault_pass:
        answers[VAULT_PROMPT] = getpass.getpass("Vault password: ")
    for vault_id in args.vault_id or []:
        label, _, source = vault_id.rpartition("@")
        if source == "prompt" and label:
            pattern = rf"^Vault password \({re.escape(label)}\):\s*?$"
            answers[pattern] = getpass.getpass(f"Vault password ({label}): ")
    return answers


def run(args) -> int:
    project = Path(args.project).resolve()
    extra = ansible_arguments(args)
    playbook = chosen_playbook(args)
    log_path = new_log_path(project, playbook, Path(args.log_dir))
    passwords = vault_passwords(args)
    progress = Progress()

    def run_it(on_event) -> int:
        return run_playbook(
            project, playbook, args.inventory, extra, log_path, on_event, passwords=passwords
        )

    if args.json:
        rc = run_it(progress.handle)
    else:
        console = Console()
        with Live(_table(progress), console=console, refresh_per_second=4) as live:

            def on_event(event):
                progress.handle(event)
                live.update(_table(progress))

            rc = run_it(on_event)
    if no_host_matched(progress):
        groups = inventory_groups(project, args.inventory)
        error = no_hosts_error(progress, args.limit, args.inventory, groups)
        error.problems.append(f"full log: {log_path}")
        raise error
    if args.json:
        emit(args.json_schema, _summary_dict(progress, rc, log_path, extra), ok=rc == 0)
    else:
        _summary(console, progress, rc, log_path)
    return rc


def _summary_dict(progress: Progress, rc: int, log_path: Path, extra: list[str]) -> dict:
    return {
        "ansible_rc": rc,
        "ansible_arguments": extra,
        "log": str(log_path),
        "hints": unreachable_hints(progress),
        "hosts": {
            name: {
                "ok": tally.ok,
                "changed": tally.changed,
                "failed": tally.failed,
                "unreachable": tally.unreachable,
                "changed_tasks": tally.changed_tasks,
                "messages": tally.messages,
            }
            for name, tally in progress.hosts.items()
        },
    }


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
    for hint in unreachable_hints(progress):
        console.print(f"[yellow]{hint}[/]", highlight=False)
    console.print(f"full log: {log_path}")
    console.print("[green]provisioned[/]" if rc == 0 else f"[red]failed (ansible rc {rc})[/]")
