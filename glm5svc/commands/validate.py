"""`glm5svc validate`: check a configuration file and report every problem (exit 78).

It applies every rule the other commands apply to the configuration, through the same
functions and in the same order, so a file it calls valid is not refused later by
`command`, `serve`, `preflight`, `bench` or `tune` (and each refusal reads the same).
Every stage runs even when an earlier one fails, so one run lists every problem; the
warnings are the ones `command` prints.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from glm5svc import paths
from glm5svc.bench import Judgement, plan_from_config
from glm5svc.cli_options import config_path
from glm5svc.config import (
    Config,
    exposure_problem,
    load_config,
    read_api_key,
    resolve_config_path,
    rules_of,
)
from glm5svc.errors import ConfigError
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit
from glm5svc.launch_plan import check_model_path, plan_for_service
from glm5svc.tune.space import read_space_file


def register(subparsers):
    parser = subparsers.add_parser(
        "validate",
        epilog=epilog("validate"),
        help="check the configuration file; exit 78 with every problem listed",
    )
    parser.add_argument(
        "path", nargs="?", type=config_path, help="file to check (default: the --config file)"
    )
    parser.add_argument(
        "--space",
        metavar="FILE",
        help="also check a search space for `glm5svc tune run --space FILE` against this "
        "configuration's keys",
    )
    parser.add_argument("--json", action="store_true", help="the verdict as JSON")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    path = args.path or args.config
    config = load_config(path)
    warnings = check_config(config, path, space=Path(args.space) if args.space else None)
    if args.json:
        emit(args.json_schema, {"path": str(resolve_config_path(path)), "warnings": warnings})
        return 0
    print(f"{resolve_config_path(path)}: valid")
    for warning in warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0


def check_config(
    config: Config, path: str | os.PathLike | None = None, space: Path | None = None
) -> list[str]:
    """The commands' rules past loading, every stage run; the warnings `command` prints.
    `space`: a tune search space, checked too (tune run's). One failing stage raises its
    own ConfigError, several one listing each."""
    failures: list[ConfigError] = []

    def stage(rule: Callable[[], object]) -> object:
        try:
            with rules_of(path):
                return rule()
        except ConfigError as exc:
            if exc.render() not in [seen.render() for seen in failures]:
                failures.append(exc)
            return None

    plan = stage(lambda: plan_for_service(config))  # command, serve, tune
    stage(lambda: check_model_path(config))  # the plan's, even where the key stopped it
    stage(lambda: _refuse_exposure(config))  # the plan's, even where the model stopped it
    stage(lambda: read_api_key(config.server.api_key_file))  # serve, bench, status --fleet
    # bench: the request file and the results folder, before the plan reads the request file
    paths_usable = stage(lambda: paths.check_config_paths(config) or True)
    if paths_usable:
        stage(lambda: plan_from_config(config))  # bench: the benchmark plan
    stage(lambda: Judgement.from_config(config))  # bench, serve's post-start run
    post_start = config.benchmark.post_start
    if post_start.enabled and paths_usable:
        stage(
            lambda: plan_from_config(
                config, ladder=list(post_start.ladder), num_prompts=post_start.num_prompts_per_level
            )
        )
    if space is not None:
        stage(lambda: read_space_file(space))  # tune run: every knob a key the schema has
    if len(failures) == 1:
        raise failures[0]
    if failures:
        where = resolve_config_path(path)
        problems = [line for exc in failures for line in exc.render().splitlines()]
        raise ConfigError(
            f"{where}: {len(failures)} problems, each of which a command would refuse",
            problems=[p.removeprefix("  - ") for p in problems],
        )
    return list(getattr(plan, "warnings", []))


def _refuse_exposure(config: Config) -> None:
    if problem := exposure_problem(config):
        raise ConfigError(problem)
