"""The `glm5svc` command line: one sub-command per module in glm5svc.commands."""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

from glm5svc import __version__
from glm5svc.cli_options import config_path
from glm5svc.completion import SHELLS, script
from glm5svc.errors import Glm5Error
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit_error, schema_name

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
USAGE_SCHEMA = schema_name(["usage"])
HELP_WIDTH = 88

# Each module defines register(subparsers) -> parser with set_defaults(func=run).
COMMAND_MODULES = [
    "bench",
    "command",
    "night",
    "patch",
    "preflight",
    "provision",
    "rules",
    "serve",
    "status",
    "telemetry",
    "tune",
    "unit",
    "validate",
]
# Commands cli.py itself adds, after the modules': they need the whole parser.
PARSER_COMMANDS = ["completion"]
# `glm5svc --help` lists the commands by task, in this order (tests/common/test_cli.py
# checks that every command is in exactly one).
COMMAND_GROUPS = {
    "deploy": ["provision", "validate", "preflight", "patch", "unit", "completion"],
    "run": ["serve", "command"],
    "measure": ["bench"],
    "tune": ["tune"],
    "night": ["night"],
    "observe": ["status", "telemetry", "rules"],
}
DOCS_POINTER = (
    "Every command's options: docs/cli.md (or `glm5svc COMMAND --help`); deploying, the "
    "first run, upgrades and one unattended night: docs/operations.md."
)


class UsageError(Glm5Error):
    """argparse refused the command line (its usage is on stderr already): exit 2."""

    exit_status = EXIT_USAGE


class ArgumentParser(argparse.ArgumentParser):
    """argparse's, whose refusals reach `main` (for --json) instead of exiting."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        command = self.prog.removeprefix("glm5svc").strip()
        raise UsageError(f"{command}: {message}" if command else message)

    def _get_values(self, action, arg_strings):
        # Python 3.11's argparse reads `--opt=--` as an empty list where one value is meant.
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, not '--'")
        return super()._get_values(action, arg_strings)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that sub-command's module is imported (fast start)."""
    parser = ArgumentParser(
        prog="glm5svc",
        description="Launch, supervise, benchmark and observe SGLang serving GLM-5-NVFP4.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"glm5svc {__version__}")
    parser.add_argument(
        "--config",
        metavar="PATH",
        type=config_path,
        help="service configuration (default: $GLM5SVC_CONFIG, else /etc/glm5/glm5.yaml)",
    )
    # The commands are listed by task in the epilog (grouped_commands), not argparse's one list.
    subparsers = parser.add_subparsers(
        dest="command_name", metavar="COMMAND", required=True, help=argparse.SUPPRESS
    )
    for name in [only] if only else COMMAND_MODULES:
        importlib.import_module(f"glm5svc.commands.{name}").register(subparsers)
    if not only:  # completion needs the whole parser
        completion = subparsers.add_parser(
            "completion",
            epilog=epilog("completion"),
            help="print the shell completion script, generated from this parser "
            '(bash: eval "$(glm5svc completion bash)"; zsh likewise, after compinit)',
        )
        completion.add_argument("shell", choices=SHELLS, help="the shell the script is for")
        completion.set_defaults(func=lambda args: print(script(parser, args.shell)))
    for path, command in json_commands(parser).items():
        command.set_defaults(json_schema=schema_name(path))
    # Set after the sub-commands took their prog from the usage argparse makes.
    parser.usage = "glm5svc [-h] [--version] [--config PATH] COMMAND ..."
    if not only:
        parser.epilog = grouped_commands(subparsers)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def grouped_commands(subparsers: argparse._SubParsersAction) -> str:
    """The commands by task (COMMAND_GROUPS), each with its one-line help, then where the
    docs are: what `glm5svc --help` ends with."""
    helps = {action.dest: action.help or "" for action in subparsers._choices_actions}  # noqa: SLF001
    width = max(map(len, helps)) + 2
    lines = []
    for task, names in COMMAND_GROUPS.items():
        lines += ["", f"{task}:"]
        for name in names:
            lines += _wrapped(name, helps.pop(name), width)
    for name in helps:  # a command no group names (the test above fails on it)
        lines += _wrapped(name, helps[name], width)
    return "\n".join([*lines[1:], "", *textwrap.wrap(DOCS_POINTER, HELP_WIDTH)])


def _wrapped(name: str, text: str, width: int) -> list[str]:
    indent = " " * (width + 2)
    return textwrap.wrap(
        text, HELP_WIDTH, initial_indent=f"  {name:<{width}}", subsequent_indent=indent
    )


def json_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub-)command that has --json, by its path of names: ("bench", "compare")."""
    found = {}
    if path and any("--json" in action.option_strings for action in parser._actions):
        found[path] = parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(json_commands(sub, (*path, name)))
    return found


def chosen_command(argv: list[str]) -> str | None:
    """The sub-command named on the command line, if any (skipping `--config PATH`)."""
    tokens = iter(argv)
    for token in tokens:
        if token == "--config":
            next(tokens, None)
        elif not token.startswith("-"):
            return token if token in COMMAND_MODULES else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=chosen_command(argv))
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _failed(exc, USAGE_SCHEMA if "--json" in argv else None)
    try:
        return int(args.func(args) or 0)
    except Glm5Error as exc:
        return _failed(exc, _schema(args))
    except KeyboardInterrupt:
        if schema := _schema(args):
            emit_error(schema, "interrupted", EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED


def _schema(args: argparse.Namespace) -> str | None:
    """The document --json asked for (a command may narrow it, as status --fleet does)."""
    return args.json_schema if getattr(args, "json", False) else None


def _failed(exc: Glm5Error, schema: str | None) -> int:
    """The error on stderr; with --json also its document on stdout."""
    if schema:
        emit_error(schema, str(exc), exc.exit_status, exc.problems, **exc.fields)
    else:
        print(f"glm5svc: {exc.render()}", file=sys.stderr)
    return exc.exit_status
