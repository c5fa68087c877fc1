"""`glm5svc validate`: check a configuration file and report every problem (exit 78).

It applies every rule the other commands apply to the configuration, through the same
functions and in the same order, so a file it calls valid is not refused later by
`command`, `serve`, `preflight` or `bench` (and each refusal reads the same).
"""

from __future__ import annotations

import sys

from glm5svc.bench import Judgement, plan_from_config
from glm5svc.config import (
    Config,
    exposure_warning,
    load_config,
    read_api_key,
    resolve_config_path,
    rules_of,
)
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
    with rules_of(path):
        check_config(config)
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


def check_config(config: Config) -> None:
    """The commands' rules past loading; the first broken one raises its ConfigError."""
    plan_for_service(config)  # command, serve: extra_args, ports, flags per sglang version
    read_api_key(config.server.api_key_file)  # serve, bench: the key must reach sglang
    plan_from_config(config)  # bench: the benchmark plan
    Judgement.from_config(config)  # bench, serve's post-start run: benchmark.baseline
    post_start = config.benchmark.post_start
    if post_start.enabled:
        plan_from_config(
            config, ladder=list(post_start.ladder), num_prompts=post_start.num_prompts_per_level
        )
