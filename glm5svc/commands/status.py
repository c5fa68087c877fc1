"""`glm5svc status`: summarise the running service from its /status (exit 0 only when ready)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from glm5svc.config import load_config

EXIT_NOT_READY = 1
EXIT_UNREACHABLE = 3  # LSB: "program is not running"


def register(subparsers):
    parser = subparsers.add_parser(
        "status",
        help="summarise the running service (exit 0 ready, 1 not ready, 3 unreachable)",
    )
    parser.add_argument("--json", action="store_true", help="print /status as JSON")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    service = load_config(args.config).service
    host = "127.0.0.1" if service.listen_host in ("0.0.0.0", "") else service.listen_host
    url = f"http://{host}:{service.listen_port}/status"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            status = json.loads(response.read())
    except (OSError, ValueError) as exc:
        print(f"glm5svc: not reachable at {url}: {exc}")
        print("  is the service running? `systemctl status glm5` / `journalctl -u glm5 -e`")
        return EXIT_UNREACHABLE
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(render(status))
    return 0 if status.get("ready") else EXIT_NOT_READY


def render(status: dict) -> str:
    phase, text = status.get("phase"), status.get("status")
    lines = [
        f"glm5svc {status.get('version', '?')}: {phase}" + (f" — {text}" if text != phase else ""),
        f"  ready: {'yes' if status.get('ready') else 'no'} ({status.get('ready_reason')})",
        f"  wrapper pid {status.get('pid')}, server pid {status.get('engine_pid')}, "
        f"up {_duration(status.get('uptime_s'))}",
    ]
    plan = status.get("launch_plan") or {}
    if plan.get("sglang_version"):
        lines.append(
            f"  sglang {plan['sglang_version']}, target {plan.get('target')}, "
            f"profile {plan.get('profile')}, {plan.get('tp_size')} GPU(s)"
        )
    if status.get("startup_seconds") is not None:
        lines.append(f"  start-up took {_duration(status['startup_seconds'])}")
    elif status.get("load_percent") is not None:
        lines.append(f"  loading weights: {status['load_percent']}%")
    probes = status.get("probes") or {}
    lines.append(
        f"  probes: {probes.get('total', 0)} sent, {probes.get('failures_total', 0)} failed "
        f"({probes.get('consecutive_failures', 0)} in a row); engine progress "
        f"{_duration(probes.get('last_progress_age_s'))} ago"
    )
    if probes.get("last_error"):
        lines.append(f"  last probe error: {probes['last_error']}")
    for diagnosis in status.get("diagnosis") or []:
        lines += _diagnosis_lines(diagnosis)
    previous = status.get("previous_run")
    if previous and previous.get("exit_status"):
        lines.append(f"  previous run: exit {previous['exit_status']}: {previous.get('message')}")
        for diagnosis in previous.get("diagnosis") or []:
            lines += _diagnosis_lines(diagnosis, indent="    ")
    bench = status.get("benchmark")
    if status.get("benchmark_running"):
        lines.append("  post-start benchmark: running")
    elif isinstance(bench, dict):
        summary = bench.get("summary", bench)
        shown = ", ".join(f"{k}={v}" for k, v in summary.items() if isinstance(v, int | float))
        lines.append(f"  post-start benchmark: {shown or bench}")
    for warning in status.get("plan_warnings") or []:
        lines.append(f"  plan warning: {warning}")
    return "\n".join(lines)


def _diagnosis_lines(d: dict, indent: str = "  ") -> list[str]:
    return [
        f"{indent}diagnosis: {d.get('title')} [{d.get('id')}]",
        f"{indent}  evidence: {d.get('evidence')}",
        f"{indent}  cause: {d.get('cause')}",
        f"{indent}  fix: {d.get('fix')}",
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
