"""`glm5svc command`: print the launch plan (copy-pasteable), or explain every part of it."""

from __future__ import annotations

from glm5svc.config import load_config, rules_of
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit
from glm5svc.launch_plan import plan_for_service
from glm5svc.records import to_dict


def register(subparsers):
    parser = subparsers.add_parser(
        "command",
        epilog=epilog("command"),
        help="print the exact sglang launch command the service would run",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--explain", action="store_true", help="every flag and variable with the reason for it"
    )
    output.add_argument("--json", action="store_true", help="the plan as JSON")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    config = load_config(args.config)
    with rules_of(args.config):
        plan = plan_for_service(config)
    if args.json:
        emit(args.json_schema, to_dict(plan.summary()))
    elif args.explain:
        print(plan.explain())
    else:
        for warning in plan.warnings:
            print(f"# WARNING: {warning}")
        print(plan.shell_command())
    return 0
