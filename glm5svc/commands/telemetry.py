"""`glm5svc telemetry`: live view of every GPU, or one JSON snapshot with --once --json.

Exit status: 0 on success; 69 (EX_UNAVAILABLE) when NVML cannot be used (no NVIDIA driver,
no library, no GPU), after printing why; 78 for a bad configuration file.
"""

from __future__ import annotations

import os
import sys

from glm5svc.cli_options import add_number
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit, emit_error
from glm5svc.telemetry.sampler import Sampler

EXIT_NO_DRIVER = 69  # sysexits.h EX_UNAVAILABLE
ONCE_PERIOD_S = 0.25


def register(subparsers):
    parser = subparsers.add_parser(
        "telemetry",
        epilog=epilog("telemetry"),
        help="live GPU power, clocks, PCIe and memory view (exit 69 without an NVIDIA driver)",
    )
    parser.add_argument("--once", action="store_true", help="take one sample, print, exit")
    parser.add_argument(
        "--json", action="store_true", help="print one snapshot as JSON (implies --once)"
    )
    add_number(
        parser,
        "--period",
        config="telemetry.period_s",
        unit="seconds",
        help="seconds between samples",
    )
    parser.set_defaults(func=run)
    return parser


def _periods(args) -> tuple[float, float]:
    from glm5svc.config import (
        CONFIG_ENV_VAR,
        DEFAULT_CONFIG_PATH,
        TelemetrySection,
        load_config,
    )

    if args.config or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_PATH.exists():
        section = load_config(args.config).telemetry
    else:
        section = TelemetrySection()
    return (args.period or section.period_s), section.pcie_period_s


def run(args) -> int:
    period, pcie_period = _periods(args)
    args.once = args.once or args.json
    if args.once:
        period = min(period, ONCE_PERIOD_S)
    sampler = Sampler(period_s=period, pcie_period_s=pcie_period).start()
    try:
        if not sampler.available:
            return _unavailable(sampler, args)
        if args.once:
            sampler.wait_for_sample(10)
            sampler.wait_for_sample(10)  # the second sample carries PCIe rates
            return _print_once(sampler, args)
        return _live(sampler)
    finally:
        sampler.stop()


def _unavailable(sampler: Sampler, args) -> int:
    snapshot = sampler.snapshot()
    message = f"GPU telemetry unavailable: {snapshot.reason}"
    if args.json:
        emit_error(args.json_schema, message, EXIT_NO_DRIVER, **snapshot.to_dict())
    else:
        print(f"glm5svc: {message}", file=sys.stderr)
    return EXIT_NO_DRIVER


def _print_once(sampler: Sampler, args) -> int:
    snapshot = sampler.snapshot()
    if args.json:
        emit(args.json_schema, snapshot.to_dict())
    else:
        from rich.console import Console

        from glm5svc.telemetry.view import render

        Console().print(render(snapshot))
    return 0


def _live(sampler: Sampler) -> int:
    from rich.live import Live

    from glm5svc.telemetry.view import render

    with Live(render(sampler.snapshot()), refresh_per_second=4, screen=False) as live:
        while True:
            sampler.wait_for_sample(max(2.0, 2 * sampler.period_s))
            live.update(render(sampler.snapshot()))
