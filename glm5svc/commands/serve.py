"""`glm5svc serve`: run and supervise the SGLang server (what `systemctl start glm5` runs)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from glm5svc.bench.post_start import post_start_hook
from glm5svc.config import load_config, resolve_config_path, rules_of
from glm5svc.config_yaml import read_regular_bytes
from glm5svc.exit_codes import epilog
from glm5svc.serve.service import build_service


def register(subparsers):
    parser = subparsers.add_parser(
        "serve",
        epilog=epilog("serve"),
        help="run the SGLang server under supervision (systemd Type=notify service)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    # What the night compares with the file's (a rerun restarts unless they match); read
    # before the file is loaded, so that a write in between shows as a difference.
    try:
        sha = hashlib.sha256(read_regular_bytes(Path(resolve_config_path(args.config)))).hexdigest()
    except OSError:
        sha = None  # not a regular file, or unreadable: load_config says what is wrong
    config = load_config(args.config)
    hook = post_start_hook if config.benchmark.post_start.enabled else None
    with rules_of(args.config):
        service = build_service(config, post_ready_hook=hook, config_sha256=sha)
    return service.run()
