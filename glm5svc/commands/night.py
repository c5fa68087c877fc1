"""`glm5svc night`: one unattended night on the box: the evening's baseline, a tune, only a
confirmed overlay applied, the morning measured the same way, and the evening's
configuration back when the morning is worse beyond the noise or does not come up.

    glm5svc night plan  [--budget 8h] [WORKLOAD] [-- TUNE OPTIONS]   what the budget holds
    glm5svc night begin [--budget 8h] [WORKLOAD] [-- TUNE OPTIONS]   start it (glm5-tune.service)
    glm5svc night resume [DIR]     what glm5-tune.service runs: the night in progress, from
                                   its state file, where it stopped
    glm5svc night status [DIR]     the night in progress (or the last one), step by step
    glm5svc night report [DIR]     the morning report (report.md)
    glm5svc night stop             stop it cleanly: the evening's configuration serves
    glm5svc night fallback         what glm5-night-fallback.service runs when systemd gives
                                   up on the night: the evening's configuration back and
                                   glm5.service started, without the night's state

One `glm5svc night` process at a time (begin, resume, fallback): a second is refused (75).
A night whose state file cannot be read, or whose configuration file does not load, is
ended by `night resume`: the evening's configuration back (the file it replaces kept beside
it), glm5.service started, the night recorded as failed; a new `begin` may follow.

docs/operations.md, "One unattended night", is the operator's guide.

Longer than 400 lines: seven actions and their options in one command; what they run is in
glm5svc/night/.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from glm5svc import paths
from glm5svc.cli_options import Range, add_number
from glm5svc.errors import ConfigError
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit

NIGHT_BUDGET_S = 8 * 3600.0
# The tune's own default (WorkloadOptions.concurrency; tests/night checks they agree).
DEFAULT_CONCURRENCY = 256
DEFAULT_WINDOWS = 3
DEFAULT_VERDICT_STARTS = 1
# What each action's --help says above its options (docs/operations.md has the whole story).
DESCRIPTIONS = {
    "plan": "Print the night's plan and run nothing: the budget split between the evening's "
    "fresh starts, each benched, the tune (with its own plan: the starts it makes and the "
    "knobs it drops to fit) and the morning's apply and as many starts and benches, with a "
    "rollback's restart kept in reserve; and what the morning's verdict can tell with that "
    "many starts. The same options as `night begin`.",
    "begin": "Start a night: make its folder under service.results_dir/night/, print its "
    "plan and start glm5-tune.service, which runs it on the box (the caller may go away).",
    "resume": "What glm5-tune.service runs: the night in progress (service.results_dir/"
    "night-current), from its state file, where it stopped; after a crash or a reboot too.",
    "status": "Show a night step by step (default: the one in progress, else the last one): "
    "each step's state, what it said, and the outcome once it ended.",
    "report": "Print a night's morning report (report.md; --json: report.json): the outcome "
    "and why, evening and morning with their intervals, what changed, what the plan dropped.",
    "stop": "Stop the night cleanly (systemctl stop glm5-tune): the running step stops, the "
    "evening's configuration goes back if it changed and glm5.service is checked serving; "
    "the report says stopped. Never kill -9 the night: systemd starts it again.",
}


def register(subparsers):
    parser = subparsers.add_parser(
        "night",
        epilog=epilog("night"),
        help="one unattended night: baseline, tune, apply the confirmed, compare, roll back",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=_usage(parser))
    actions = parser.add_subparsers(dest="night_action", metavar="ACTION")
    for name, help_text, func in (
        ("plan", "print what the night's budget holds, then exit", run_plan),
        ("begin", "start a night: its folder, its plan, then glm5-tune.service", run_begin),
    ):
        action = actions.add_parser(
            name, help=help_text, description=DESCRIPTIONS[name], epilog=epilog(f"night {name}")
        )
        _night_options(action)
        action.set_defaults(func=func)
    resume = actions.add_parser(
        "resume", help="run the night in progress from where it stopped",
        description=DESCRIPTIONS["resume"], epilog=epilog("night resume"),
    )  # fmt: skip
    resume.add_argument("night_dir", nargs="?", metavar="DIR", help="default: the one in progress")
    fallback = actions.add_parser(
        "fallback", help="the evening's configuration back and glm5.service started (the unit's)",
        epilog=epilog("night fallback"),
    )  # fmt: skip
    for action in (resume, fallback):
        action.add_argument(
            "--current",
            metavar="FILE",
            help="the file naming the night in progress (the units pass it, so that the night "
            "is found when the configuration does not load; default: in service.results_dir)",
        )
    resume.set_defaults(func=run_resume)
    fallback.set_defaults(func=run_fallback)
    for name, help_text, func in (
        ("status", "the night in progress (or the last one), step by step", run_status),
        ("report", "print the morning report of a night (default: the last one)", run_report),
    ):
        action = actions.add_parser(
            name, help=help_text, description=DESCRIPTIONS[name], epilog=epilog(f"night {name}")
        )
        action.add_argument("night_dir", nargs="?", metavar="DIR", help="a night's folder")
        action.add_argument("--json", action="store_true", help="print it as JSON")
        action.set_defaults(func=func)
    stop = actions.add_parser(
        "stop", help="stop the night cleanly (systemctl stop glm5-tune)",
        description=DESCRIPTIONS["stop"], epilog=epilog("night stop"),
    )  # fmt: skip
    stop.set_defaults(func=run_stop)
    return parser


def _usage(parser):
    def usage(args) -> int:
        parser.print_help(sys.stderr)
        return 2

    return usage


def _night_options(parser) -> None:
    add_number(
        parser,
        "--budget",
        dest="budget_s",
        duration=True,
        default=NIGHT_BUDGET_S,
        range=Range(0, True),
        help="the whole night, a bound",
    )
    add_number(
        parser,
        "--windows",
        kind=int,
        default=DEFAULT_WINDOWS,
        range=Range(2, False, 100),
        help="steady windows of each bench (evening, morning): the interval's replicates",
    )
    add_number(
        parser,
        "--verdict-starts",
        kind=int,
        default=DEFAULT_VERDICT_STARTS,
        range=Range(1, False, 20),
        help="engine starts of each side (evening, morning), each benched: the morning "
        "verdict's replicates (the start-to-start spread is most of the noise)",
    )
    workload = parser.add_argument_group("the workload the tune and both benches use")
    add_number(
        workload,
        "--concurrency",
        kind=int,
        range=Range(1, False),
        default=DEFAULT_CONCURRENCY,
        help="target concurrency",
    )
    add_number(
        workload, "--input-len", config="benchmark.input_len", help="input tokens per prompt"
    )
    add_number(
        workload, "--output-len", config="benchmark.output_len", help="output tokens per request"
    )
    workload.add_argument(
        "--request-file", metavar="FILE", help="a recorded workload instead of the fixed lengths"
    )
    parser.add_argument(
        "--night-dir", help="the night's folder (default: results_dir/night/<time>)"
    )
    parser.add_argument(
        "tune_args",
        nargs="*",
        metavar="-- TUNE OPTIONS",
        help="given to `glm5svc tune run` as they are (--space, --max-trials, ...)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _prepared(args):
    from glm5svc.config import load_config, resolve_config_path

    config_path = resolve_config_path(args.config).absolute()
    config = load_config(config_path)
    if args.request_file:
        paths.REQUEST_FILE.check(args.request_file)
    bench = config.benchmark
    workload = {
        "concurrency": args.concurrency,
        "input_len": args.input_len or bench.input_len,
        "output_len": args.output_len or bench.output_len,
        "request_file": str(Path(args.request_file).absolute()) if args.request_file else None,
    }
    reserved = {"--budget", "--run-dir", "--resume", "--take-over", "--json", "--plan"}
    clash = sorted(a.split("=")[0] for a in args.tune_args if a.split("=")[0] in reserved)
    if clash:
        raise ConfigError(
            f"glm5svc night: {', '.join(clash)} after `--`: the night sets these itself "
            "(--budget is the night's; the tune gets what the benches and restarts leave)"
        )
    return config, str(config_path), workload


def _plan(args):
    """The night's plan; the tune's --plan runs leave their logs in a scratch folder."""
    import tempfile

    from glm5svc.night.measure import workload_args
    from glm5svc.night.plan import night_plan

    config, config_path, workload = _prepared(args)
    with tempfile.TemporaryDirectory(prefix="glm5svc-night-plan-") as scratch:
        plan = night_plan(
            config,
            config_path,
            workload_args(workload, tune=True),
            args.tune_args,
            args.windows,
            args.budget_s,
            Path(scratch),
            args.verdict_starts,
        )
    return config, config_path, workload, plan


def run_plan(args) -> int:
    from glm5svc.night.plan import plan_lines

    _, _, workload, plan = _plan(args)
    if args.json:
        emit(args.json_schema, {**plan, "workload": workload})
    else:
        print("\n".join(plan_lines(plan, args.windows)))
    return 0


def run_begin(args) -> int:
    from glm5svc.night.lock import night_lock
    from glm5svc.records import LastNight, RecordError

    config, _, _ = _prepared(args)
    results = Path(config.service.results_dir)
    with night_lock(results, "night begin") as unlocked:
        if unlocked:
            raise ConfigError(f"night begin: cannot take the night's lock ({unlocked}); "
                              "free space there or make it writable")  # fmt: skip
        state, plan = _begun(args, results)
    from glm5svc.night import units

    try:
        last = LastNight.read(results)
    except RecordError:
        last = None
    if last is not None and last.night_outcome == "failed" and not args.json:
        print(f"night: the last night ({last.night_dir}) failed: {last.night_headline}")
    units.act("start", units.NIGHT_UNIT, "--no-block")
    from glm5svc.night.plan import plan_lines

    if args.json:
        emit(args.json_schema, {"night_dir": str(state.night_dir), "plan": plan})
    else:
        print("\n".join(plan_lines(plan, args.windows)))
        print(
            f"night: {state.night_dir}; it runs in {units.NIGHT_UNIT} "
            "(`glm5svc night status`, `journalctl -u glm5-tune -f`)"
        )
    return 0


def _begun(args, results: Path):
    """The night's folder, state and marker, under the lock."""
    from glm5svc.bench.sweep import new_run_dir
    from glm5svc.json_output import now_utc
    from glm5svc.night.plan import plan_lines
    from glm5svc.night.report import write_textfile
    from glm5svc.night.state import (
        NIGHTS_FOLDER,
        NightState,
        UnreadableNight,
        current_night,
        holds_a_night,
        set_current,
    )

    running = current_night(results)
    if running is not None:
        try:
            NightState.load(running)
            hint = "`glm5svc night status` shows it, `glm5svc night stop` ends it"
        except UnreadableNight as exc:
            hint = (f"its state cannot be read ({exc}): `glm5svc night resume` puts the "
                    "evening's configuration back and ends it, then begin again")  # fmt: skip
        raise ConfigError(f"a night is in progress: {running}; {hint}")
    if args.night_dir and holds_a_night(Path(args.night_dir)):
        raise ConfigError(
            f"--night-dir {args.night_dir}: it holds a night already (night.json or "
            "evening.yaml); give a new folder, or leave --night-dir out for a fresh one"
        )
    config, config_path, workload, plan = _plan(args)
    folder = Path(args.night_dir) if args.night_dir else new_run_dir(results, "", NIGHTS_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    began = datetime.now(UTC)
    state = NightState(
        night_dir=folder.absolute(),
        config_path=config_path,
        began_at=now_utc(),
        deadline_at=(began + timedelta(seconds=args.budget_s)).isoformat(timespec="seconds"),
        budget_s=args.budget_s,
        workload=workload,
        windows=args.windows,
        tune_args=list(args.tune_args),
        plan=plan,
    )
    state.note("began: " + "; ".join(line.strip() for line in plan_lines(plan, args.windows)))
    set_current(results, state.night_dir)
    write_textfile(config.service.night_textfile, results, state)
    return state, plan


def run_resume(args) -> int:
    from glm5svc.config import load_config
    from glm5svc.night.chain import Night
    from glm5svc.night.lock import night_lock
    from glm5svc.night.state import UnreadableNight, read_current

    config, broken = _config_or_why(args)
    current = _current_file(args, config)
    with night_lock(current.parent, "night resume") as unlocked:
        if unlocked:
            _log(f"night: without the lock ({unlocked})")
        folder = Path(args.night_dir) if args.night_dir else read_current(current)
        if folder is None:
            print("night: no night in progress")
            return 0
        from glm5svc.night.state import NightState

        try:
            state = NightState.load(folder)
        except UnreadableNight as exc:
            return _recovered(current, folder, args, f"the night's state cannot be read: {exc}")
        if broken is None:
            try:
                night_config = load_config(state.config_path)
            except ConfigError as exc:
                broken = str(exc).splitlines()[0]
        if broken is not None:
            why = f"the configuration does not load: {broken}"
            return _recovered(current, folder, args, why, Path(state.config_path))
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: stop.set())
        night = Night(state, night_config, stop, log=_log)
        outcome = night.run()
    print(f"night: {outcome}: {state.headline}")
    print(f"night: report: {state.night_dir / 'report.md'}")
    if not night.recorded:
        print("night: the outcome could not be recorded (said above); systemd runs "
              "glm5-tune.service again to write it", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def run_fallback(args) -> int:
    from glm5svc.night.lock import NightBusy, night_lock

    config, broken = _config_or_why(args)
    current = _current_file(args, config)
    try:
        with night_lock(current.parent, "night fallback") as unlocked:
            if unlocked:
                _log(f"night: without the lock ({unlocked})")
            return _recovered(current, None, args, "systemd gave up on the night's unit "
                              "(`journalctl -u glm5-tune -b` says why)")  # fmt: skip
    except NightBusy as exc:
        print(f"night: nothing done: {exc}")  # that process is alive, and ends the night
        return 0


def _config_or_why(args):
    from glm5svc.night.fallback import config_or_why

    return config_or_why(args.config)


def _current_file(args, config) -> Path:
    from glm5svc.night.fallback import current_file_of

    return current_file_of(args.current, config)


def _recovered(current: Path, folder: Path | None, args, why: str, config_path=None) -> int:
    from glm5svc.config import resolve_config_path
    from glm5svc.night.fallback import recover_and_say

    config_path = config_path or resolve_config_path(args.config).absolute()
    return recover_and_say(current, folder, config_path, why, log=_log)


def _log(text: str) -> None:
    print(text, flush=True)


def _chosen(args) -> Path:
    from glm5svc.config import load_config
    from glm5svc.night.state import current_night
    from glm5svc.records import LastNight

    if args.night_dir:
        return Path(args.night_dir)
    results = load_config(args.config).service.results_dir
    found = current_night(results)
    last = LastNight.read(results)
    if found is None and last is None:
        raise ConfigError(f"no night in {results}: `glm5svc night begin` starts one")
    return found or Path(last.night_dir)


def run_status(args) -> int:
    from glm5svc.night.state import NightState

    state = NightState.load(_chosen(args))
    if args.json:
        emit(args.json_schema, state.to_dict())
        return 0
    print(
        f"night {state.night_dir}: {state.outcome or 'in progress'}"
        + (f": {state.headline}" if state.headline else "")
    )
    print(f"began {state.began_at}, deadline {state.deadline_at}")
    for name, step in state.steps.items():
        print(f"  {name:9} {step.get('status'):8} {step.get('detail') or ''}")
    return 0


def run_report(args) -> int:
    import json

    folder = _chosen(args)
    name = "report.json" if args.json else "report.md"
    try:
        text = (folder / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{folder / name}: no report yet; `glm5svc night status`") from None
    if args.json:
        emit(args.json_schema, json.loads(text))
    else:
        print(text, end="")
    return 0


def run_stop(args) -> int:
    from glm5svc.night import units

    units.act("stop", units.NIGHT_UNIT)
    print(f"night: stopped {units.NIGHT_UNIT}; `glm5svc night status` says how it ended")
    return 0
