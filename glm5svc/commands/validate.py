"""`glm5svc validate`: check a configuration file and report every problem (exit 78)."""

from __future__ import annotations

import sys

from glm5svc.config import exposure_warning, load_config, read_api_key, resolve_config_path
from glm5svc.json_output import emit
from glm5svc.launch_plan import plan_for_service


def register(subparsers):
    parser = subparsers.add_parser(
        "validate", help="check the configuration file; exit 78 with every problem listed"
    )
    parser.add_argument("path", nargs="?", help="file to check (default: the --config file)")
    parser.add_argument("--json", action="store_true", help="the verdict as JSON")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    path = args.path or args.config
    config = load_config(path)
    read_api_key(config.server.api_key_file)  # unreadable or unusable keys: exit 78
    plan_for_service(config)  # the plan's rules (extra_args, ports per sglang): exit 78
    warning = exposure_warning(config)
    if args.json:
        emit(
            args.json_schema,
            {"path": str(resolve_config_path(path)), "warnings": [warning] if warning else []},
        )
        return 0
    print(f"{resolve_config_path(path)}: valid")
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0
