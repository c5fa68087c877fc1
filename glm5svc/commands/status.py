"""`glm5svc status`: the running service, from its /status: phase, readiness, the KV pool
the engine allocated; `--fleet`: every replica's /status and the gateway's view of them in
one table; the last unattended night's outcome (`glm5svc night`) below the service's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from glm5svc import fleet
from glm5svc.cli_options import Range, add_number, http_url
from glm5svc.config import MAX_SECONDS, FleetSection, describe_error, load_config, read_api_key
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.exit_codes import epilog
from glm5svc.http_fetch import FetchError, fetch_bytes
from glm5svc.json_output import emit, schema_name
from glm5svc.records import BenchmarkStatus, Diagnosis, LastNight, RecordError, StatusDocument
from glm5svc.records import to_dict as records_to_dict

EXIT_NOT_READY = 1
EXIT_UNREACHABLE = 3  # LSB: "program is not running"
EXIT_UNKNOWN = 4  # LSB: "program or service status is unknown"
FLEET_SCHEMA = schema_name(["status", "fleet"])
RESET_HINT = (
    '  if systemd gave up restarting it ("Start request repeated too quickly"): '
    "`systemctl reset-failed glm5 && systemctl start glm5`"
)


def register(subparsers):
    parser = subparsers.add_parser(
        "status",
        epilog=epilog("status"),
        help=(
            "summarise the running service (exit 0 ready, 1 not ready, 3 unreachable, "
            "4 the answer is not a glm5svc status)"
        ),
        description=__doc__,
    )
    parser.add_argument("--json", action="store_true", help="print /status as JSON")
    add_number(
        parser,
        "--timeout",
        unit="seconds",
        default=5.0,
        range=Range(0, True, MAX_SECONDS),
        help="how long to wait for each answer",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="every replica and the gateway (config's fleet section, or --replica/--gateway)",
    )
    parser.add_argument(
        "--replica",
        action="append",
        type=http_url,
        metavar="URL",
        help="a replica's glm5svc listener, e.g. http://10.0.0.11:9400 (repeat; implies --fleet)",
    )
    parser.add_argument(
        "--gateway",
        type=http_url,
        metavar="URL",
        help="the gateway, e.g. http://10.0.0.10:30000 (implies --fleet)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    if args.fleet or args.replica or args.gateway:
        return run_fleet(args)
    service = load_config(args.config).service
    host = "127.0.0.1" if service.listen_host in ("0.0.0.0", "") else service.listen_host
    url = f"http://{host}:{service.listen_port}/status"
    try:
        _, raw = fetch_bytes(url, timeout_s=args.timeout)
    except FetchError as exc:
        # The last night's line all the same: it may be why nothing serves.
        last = last_night(service.results_dir)
        if last and not args.json:
            print(night_line(last))
        raise Unreachable(
            f"not reachable at {exc}",
            problems=[
                "is the service running? `systemctl status glm5` / `journalctl -u glm5 -e`",
                RESET_HINT.strip(),
            ],
            fields={"last_night": records_to_dict(last)} if last else None,
        ) from None
    try:
        status = json.loads(raw)
    except ValueError as exc:
        raise NotAStatus(
            f"{url} answered something that is not JSON ({exc})",
            problems=[other_program(service.listen_port)],
        ) from None
    try:
        document = StatusDocument.from_dict(status)
    except RecordError as exc:
        raise NotAStatus(
            f"{url} answered JSON that is not a glm5svc status: {exc}",
            problems=[other_program(service.listen_port)],
        ) from None
    last = last_night(service.results_dir)
    if args.json:
        night = {"last_night": records_to_dict(last)} if last else {}
        emit(args.json_schema, {**document.to_dict(), **night}, ok=document.ready)
    else:
        print(render(document))
        if last:
            print(night_line(last))
    return 0 if document.ready else EXIT_NOT_READY


def last_night(results_dir) -> LastNight | None:
    """The last night's record; a broken one is said on stderr, never fatal to status."""
    try:
        return LastNight.read(results_dir)
    except RecordError as exc:
        print(f"glm5svc: {exc}", file=sys.stderr)
        return None


def night_line(night: LastNight) -> str:
    """`glm5svc status`'s line for the last night (glm5svc night)."""
    figures = ""
    if night.night_ratio is not None:
        figures = (
            f"; morning/evening {night.night_ratio:.3f}x "
            f"({night.night_ratio_low:.3f}-{night.night_ratio_high:.3f})"
        )
    return (
        f"last night: {night.night_outcome} (ended {night.night_ended_at}){figures}: "
        f"{night.night_headline}; report: {night.night_dir}/report.md"
    )


class Unreachable(Glm5Error):
    exit_status = EXIT_UNREACHABLE


class NotAStatus(Glm5Error):
    exit_status = EXIT_UNKNOWN


def other_program(port: int) -> str:
    return f"is another program listening on service.listen_port {port}?"


def run_fleet(args) -> int:
    args.json_schema = FLEET_SCHEMA
    config = load_config(args.config)
    try:
        listed = FleetSection(
            replicas=args.replica or list(config.fleet.replicas),
            gateway=args.gateway or config.fleet.gateway,
        )
    except ValidationError as exc:
        problems = [
            describe_error(error, schema=FleetSection) for error in exc.errors(include_url=False)
        ]
        raise ConfigError("--replica/--gateway: not usable", problems=problems) from None
    if not listed.replicas and not listed.gateway:
        raise ConfigError(
            "status --fleet: no replicas and no gateway; list them in the config's fleet "
            "section (fleet.replicas, fleet.gateway) or give --replica URL / --gateway URL"
        )
    view = fleet.read_fleet(
        listed.replicas, listed.gateway, args.timeout, read_api_key(config.server.api_key_file)
    )
    gateway = view.gateway
    all_in = not listed.gateway or all(row.in_gateway == "healthy" for row in view.replicas)
    if listed.gateway and not gateway.get("reachable"):
        exit_status = EXIT_UNREACHABLE
    else:
        exit_status = 0 if view.ready_count == len(view.replicas) and all_in else EXIT_NOT_READY
    if args.json:
        emit(args.json_schema, view.to_dict(), ok=exit_status == 0)
    else:
        print(fleet.render(view))
    return exit_status


def stand_in_engine(argv: tuple[str, ...]) -> str | None:
    """The program server.command runs instead of sglang.launch_server (the script a Python
    runs, else the executable), e.g. the try-out's CPU test engine; None for sglang."""
    if "sglang.launch_server" in argv[:3] or not argv:
        return None
    program = argv[1] if len(argv) > 1 and Path(argv[0]).name.startswith("python") else argv[0]
    return Path(program).name


def render(status: StatusDocument) -> str:
    phase, text = status.phase, status.status
    lines = [
        f"glm5svc {status.version or '?'}: {phase}" + (f" — {text}" if text != phase else ""),
        f"  ready: {'yes' if status.ready else 'no'} ({status.ready_reason})",
        f"  wrapper pid {status.pid}, server pid {status.engine_pid}, "
        f"up {_duration(status.uptime_s)}",
    ]
    plan = status.launch_plan
    if plan is not None and stand_in_engine(plan.argv):
        lines.append(
            f"  engine: {stand_in_engine(plan.argv)} from server.command, not "
            "sglang.launch_server (no sglang version or GPU count to report)"
        )
    elif plan is not None and plan.sglang_version:
        lines.append(
            f"  sglang {plan.sglang_version}, target {plan.target}, "
            f"profile {plan.profile}, {plan.tp_size} GPU(s)"
        )
    if status.startup_seconds is not None:
        lines.append(f"  start-up took {_duration(status.startup_seconds)}")
    elif status.load_percent is not None:
        lines.append(f"  loading weights: {status.load_percent}%")
    if status.kv_pool_tokens is not None:
        lines.append(f"  KV pool: {status.kv_pool_tokens} tokens")
    probes = status.probes
    if probes is not None:
        lines.append(
            f"  probes: {probes.total} sent, {probes.failures_total} failed "
            f"({probes.consecutive_failures} in a row); engine progress "
            f"{_duration(probes.last_progress_age_s)} ago"
        )
        if probes.last_error:
            lines.append(f"  last probe error: {probes.last_error}")
    else:
        lines.append("  probes: 0 sent, 0 failed (0 in a row); engine progress ? ago")
    for diagnosis in status.diagnosis:
        lines += _diagnosis_lines(diagnosis)
    drain = status.drain
    if drain:
        lines.append(
            f"  drain: {drain.in_flight} request(s) in flight "
            f"(at the stop {drain.in_flight_at_start}, most {drain.most_in_flight}), "
            f"{_duration(drain.seconds)}" + (f", {drain.outcome}" if drain.outcome else "")
        )
    previous = status.previous_run
    if previous and previous.exit_status:
        lines.append(f"  previous run: exit {previous.exit_status}: {previous.message}")
        lines.append(RESET_HINT)
        for diagnosis in previous.diagnosis:
            lines += _diagnosis_lines(diagnosis, indent="    ")
    if status.benchmark_running:
        lines.append("  post-start benchmark: running")
    elif status.benchmark is not None:
        lines += _benchmark_lines(status.benchmark)
    for warning in status.plan_warnings:
        lines.append(f"  plan warning: {warning}")
    return "\n".join(lines)


def _benchmark_lines(bench: BenchmarkStatus) -> list[str]:
    """The post-start benchmark in words: failed, stopped, or its best level's figures."""
    where = f" (results: {bench.results_dir})" if bench.results_dir else ""
    if bench.error:
        return [
            f"  post-start benchmark: failed: {bench.error}",
            "    the service serves on; `journalctl -u glm5 -e` has its log, "
            "`glm5svc bench` runs it by hand",
        ]
    shown = ", ".join(f"{name}={value:,.1f}" for name, value in bench.summary.items())
    if bench.stopped_reason:
        text = f"stopped: {bench.stopped_reason}" + (f"; before it: {shown}" if shown else "")
    else:
        text = shown or "no level measured"
    return [f"  post-start benchmark: {text}{where}"]


def _diagnosis_lines(d: Diagnosis, indent: str = "  ") -> list[str]:
    return [
        f"{indent}diagnosis: {d.title} [{d.id}]",
        f"{indent}  evidence: {d.evidence}",
        f"{indent}  cause: {d.cause}",
        f"{indent}  fix: {d.fix}",
    ]


def _duration(seconds) -> str:
    if seconds is None:
        return "?"
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
