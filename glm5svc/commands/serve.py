"""`glm5svc serve`: run and supervise the SGLang server (what `systemctl start glm5` runs)."""

from __future__ import annotations

from glm5svc.bench.post_start import post_start_hook
from glm5svc.config import load_config, rules_of
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
    config = load_config(args.config)
    hook = post_start_hook if config.benchmark.post_start.enabled else None
    with rules_of(args.config):
        service = build_service(config, post_ready_hook=hook)
    return service.run()
