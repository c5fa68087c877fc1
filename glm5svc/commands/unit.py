"""`glm5svc unit`: print glm5.service for a venv and the configuration file (role glm5_service)."""

from __future__ import annotations

import sys
from pathlib import Path

from glm5svc.config import load_config, resolve_config_path
from glm5svc.exit_codes import epilog
from glm5svc.unit_file import render_unit, writable_folders


def register(subparsers):
    parser = subparsers.add_parser(
        "unit",
        epilog=epilog("unit"),
        help="print glm5.service for a venv and the --config file (systemd unit)",
    )
    parser.add_argument(
        "--venv",
        metavar="PATH",
        default=sys.prefix,
        help="venv whose bin/glm5svc the unit runs (default: this one, %(default)s)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    path = resolve_config_path(args.config)
    # The folders the configuration names (results, caches) stay writable under the
    # unit's ProtectSystem=strict; without the file yet, the managed defaults.
    writable = writable_folders(load_config(path)) if path.exists() else []
    sys.stdout.write(render_unit(Path(args.venv), path, writable))
    return 0
