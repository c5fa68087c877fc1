"""`glm5svc unit`: print glm5.service (or, with --tune, glm5-tune.service; with --fallback,
glm5-night-fallback.service) for a venv and the configuration file (role glm5_service)."""

from __future__ import annotations

import sys
from pathlib import Path

from glm5svc.config import load_config, resolve_config_path
from glm5svc.exit_codes import epilog
from glm5svc.unit_file import (
    render_fallback_unit,
    render_tune_unit,
    render_unit,
    writable_folders,
)


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
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--tune",
        action="store_true",
        help="print glm5-tune.service instead: the unattended night (`glm5svc night`)",
    )
    which.add_argument(
        "--fallback",
        action="store_true",
        help="print glm5-night-fallback.service instead: the night's way back when systemd "
        "gives up on it (glm5-tune.service's OnFailure=)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    path = resolve_config_path(args.config)
    if args.tune or args.fallback:
        results = load_config(path).service.results_dir if path.exists() else None
        extra = {"results_dir": Path(results)} if results else {}
        render = render_tune_unit if args.tune else render_fallback_unit
        sys.stdout.write(render(Path(args.venv), path, **extra))
        return 0
    # The folders the configuration names (results, caches) stay writable under the
    # unit's ProtectSystem=strict; without the file yet, the managed defaults.
    writable = writable_folders(load_config(path)) if path.exists() else []
    sys.stdout.write(render_unit(Path(args.venv), path, writable))
    return 0
