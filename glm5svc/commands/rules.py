"""`glm5svc rules`: print glm5svc's Prometheus rules for the configuration's objectives.

The `monitoring:` section of the --config file (its defaults when there is no file), or the
mapping given with --objectives (what the monitoring role passes: no file on its host). A
bad objective is refused as `validate` refuses it (exit 78), naming the key and the fix.
"""

from __future__ import annotations

import os
import sys

import yaml

from glm5svc.config import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_PATH,
    MonitoringSection,
    config_from_mapping,
    load_config,
)
from glm5svc.errors import ConfigError
from glm5svc.exit_codes import epilog
from glm5svc.monitoring_rules import render_text


def register(subparsers):
    parser = subparsers.add_parser(
        "rules",
        epilog=epilog("rules"),
        help="print the Prometheus rules and alerts for the configuration's objectives "
        "(monitoring:)",
    )
    parser.add_argument(
        "--objectives",
        metavar="MAPPING",
        help="the monitoring: section as a JSON or YAML mapping, e.g. "
        "'{ttft: {threshold_s: 10, target: 0.99}}', instead of the --config file's",
    )
    parser.set_defaults(func=run)
    return parser


def objectives(args) -> MonitoringSection:
    if args.objectives is not None:
        try:
            data = yaml.safe_load(args.objectives)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--objectives: not YAML or JSON: {exc}") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(
                "--objectives: give a mapping of the monitoring: section's keys, e.g. "
                "'{start_budget_s: 1200}'"
            )
        return config_from_mapping({"monitoring": data or {}}, "--objectives").monitoring
    if args.config or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_PATH.exists():
        return load_config(args.config).monitoring
    return MonitoringSection()


def run(args) -> int:
    sys.stdout.write(render_text(objectives(args)))
    return 0
