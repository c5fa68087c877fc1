"""The `glm5svc` command line: one sub-command per module in glm5svc.commands."""

from __future__ import annotations

import argparse
import importlib
import sys

from glm5svc import __version__
from glm5svc.errors import Glm5Error

# Each module defines register(subparsers) -> parser with set_defaults(func=run).
COMMAND_MODULES = [
    "bench",
    "command",
    "patch",
    "preflight",
    "provision",
    "serve",
    "status",
    "telemetry",
    "tune",
    "unit",
    "validate",
]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that sub-command's module is imported (fast start)."""
    parser = argparse.ArgumentParser(
        prog="glm5svc",
        description="Launch, supervise, benchmark and observe SGLang serving GLM-5-NVFP4.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"glm5svc {__version__}")
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="service configuration (default: $GLM5SVC_CONFIG, else /etc/glm5/glm5.yaml)",
    )
    subparsers = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True)
    for name in [only] if only else COMMAND_MODULES:
        importlib.import_module(f"glm5svc.commands.{name}").register(subparsers)
    return parser


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
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Glm5Error as exc:
        print(f"glm5svc: {exc.render()}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
