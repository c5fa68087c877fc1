"""`glm5svc preflight`: the doctor. Exit 1 when any check fails, 78 on a bad config."""

from __future__ import annotations

from glm5svc.config import load_config
from glm5svc.errors import Glm5Error
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit
from glm5svc.preflight.rows import FAIL
from glm5svc.preflight.run import run_preflight


def register(subparsers):
    parser = subparsers.add_parser(
        "preflight",
        epilog=epilog("preflight"),
        help="check driver, GPUs, uvm HMM, CUDA, model, stack, limits (with fixes)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    report = run_preflight(load_config(args.config))
    if args.json and report.has_failures:
        failed = [row for row in report.rows if row.status == FAIL]
        raise Glm5Error(
            f"preflight failed: {len(failed)} check(s) failed",
            problems=[f"{row.name}: {row.detail}; fix: {row.fix}" for row in failed],
            fields=report.to_dict(),
        )
    if args.json:
        emit(args.json_schema, report.to_dict())
    else:
        print(report.render())
    return 1 if report.has_failures else 0
