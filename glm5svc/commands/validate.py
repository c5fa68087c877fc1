"""`glm5svc validate`: check a configuration file and report every problem (exit 78)."""

from __future__ import annotations

from glm5svc.config import load_config, resolve_config_path


def register(subparsers):
    parser = subparsers.add_parser(
        "validate", help="check the configuration file; exit 78 with every problem listed"
    )
    parser.add_argument("path", nargs="?", help="file to check (default: the --config file)")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    path = args.path or args.config
    load_config(path)
    print(f"{resolve_config_path(path)}: valid")
    return 0
