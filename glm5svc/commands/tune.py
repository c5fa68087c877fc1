"""`glm5svc tune`: search the server's settings for the best throughput on your workload.

Each engine start runs one combination of the settings that need a restart under the
same supervision as `glm5svc serve` (on private ports). Once READY, one continuous load
holds your concurrency (fresh random prompts, lengths that vary) until the start's last
window; each window is read from the engine's own token counters, and the live values
(the running-request cap) are switched between windows in A B B A order. A warm-up waits
for two agreeing windows. Verdicts come from a confidence sequence (valid however often
the search looks): live values by their paired windows, restart settings by engine
starts. Every combination is screened by one start (stopped early once clearly behind),
contenders get more starts, and the winner's confirming start gates the overlay. A
candidate that fails to start is recorded with its diagnosis. Results: a run directory
with the trials (trials.md), the tuned overlay (tuned.yaml), an Ansible host_vars snippet
and a plot. docs/tuning.md explains it.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from pydantic import ValidationError

from glm5svc import paths
from glm5svc.cli_options import (
    Range,
    add_model_options,
    add_number,
    model_values,
    option_of,
)
from glm5svc.errors import ConfigError
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit
from glm5svc.tune.settings import (
    LIMITS,
    RESUME_OVERRIDES,
    SEARCH,
    WORKLOAD,
    SearchSettings,
    WorkloadOptions,
    window_problems,
)

RESUME_FLAGS = tuple(option_of(SearchSettings.model_fields[n]).flag for n in RESUME_OVERRIDES)
EXIT_INTERRUPTED = 130
EXIT_NOTHING_MEASURED = 1


def register(subparsers):
    parser = subparsers.add_parser(
        "tune",
        epilog=epilog("tune"),
        help="search the server's settings for the best throughput on your workload",
        description=__doc__,
    )
    parser.set_defaults(func=_usage(parser))
    actions = parser.add_subparsers(dest="tune_action", metavar="ACTION")

    run = actions.add_parser(
        "run",
        epilog=epilog("tune run"),
        help="run a tune (or --resume one)",
        description="Run a tune: docs/tuning.md explains the options.",
    )
    groups = {
        WORKLOAD: run.add_argument_group("the workload (what the objective is measured on)"),
        LIMITS: run.add_argument_group("latency limits (a faster setting over them cannot win)"),
        SEARCH: run.add_argument_group("the search"),
    }
    add_model_options(groups, WorkloadOptions)
    groups[WORKLOAD].add_argument(
        "--request-file",
        metavar="FILE",
        help=WorkloadOptions.model_fields["request_file"].description
        + ': JSON Lines, one request a line, e.g. {"input_len": 812, "output_len": 230}',
    )
    add_model_options(groups, SearchSettings)
    # None when left out: a resume then gets what its run left of the budget it was given.
    run.set_defaults(budget_s=None)
    groups[SEARCH].add_argument(
        "--space", help="search space file (default: glm5svc's, per target)"
    )
    plan = run.add_argument_group("the plan (printed first by every run)")
    plan.add_argument(
        "--plan",
        action="store_true",
        help="print the estimate of the tune's length and what the budget allows, then exit",
    )
    add_number(plan, "--disk-read-gbps", range=Range(0, True, 1000), metavar="GB/S",
               help="the disk's read speed for the estimate (default: measured with a short "
               "read of the model's largest shard)")  # fmt: skip
    where = run.add_argument_group("where and how")
    where.add_argument("--run-dir", help="the run directory (default: results_dir/tune/<time>)")
    where.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped tune")
    where.add_argument(
        "--take-over",
        action="store_true",
        help="drain and stop a serving glm5.service for the tune; it is started again at the end",
    )
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.set_defaults(func=run_tune)

    apply = actions.add_parser(
        "apply",
        epilog=epilog("tune apply"),
        help="write a tune's overlay into the configuration and restart glm5.service",
    )
    apply.add_argument("run_dir", metavar="RUN_DIR", help="the tune's run directory")
    apply.add_argument("--no-restart", action="store_true", help="do not restart glm5.service")
    apply.add_argument(
        "--force",
        action="store_true",
        help="apply a tune measured on other GPUs, another model or another sglang than this "
        "configuration's",
    )
    apply.add_argument("--json", action="store_true", help="print the result as JSON")
    apply.set_defaults(func=run_apply)

    show = actions.add_parser("show", help="a tune's trials and result", epilog=epilog("tune show"))
    show.add_argument("run_dir", metavar="RUN_DIR", help="the tune's run directory")
    show.add_argument("--json", action="store_true", help="print the tune's summary as JSON")
    show.set_defaults(func=run_show)
    return parser


def _usage(parser):
    def usage(args) -> int:
        parser.print_help(sys.stderr)
        return 2

    return usage


def _request(args):
    from glm5svc.bench.plan import plan_from_config
    from glm5svc.commands.validate import check_config
    from glm5svc.config import load_config
    from glm5svc.tune.outputs import STUDY_FILE
    from glm5svc.tune.search import Workload
    from glm5svc.tune.session import STUDY_DB, TuneRequest, read_study
    from glm5svc.tune.space import DEFAULT_SPACE

    config = load_config(args.config)
    for rule, given in ((paths.SPACE, args.space), (paths.REQUEST_FILE, args.request_file),
                        (paths.RUN_DIR, args.run_dir), (paths.RESUME, args.resume)):  # fmt: skip
        if given:
            rule.check(given)
    if args.resume:
        paths.STUDY_DB.check(Path(args.resume) / STUDY_DB)
    saved = read_study(Path(args.resume)) if args.resume else None
    # Refused as validate refuses it (the space as `validate --space` does), before any
    # trial; a resume searches the space its run directory saved.
    space = Path(args.space) if args.space else (None if saved else DEFAULT_SPACE)
    check_config(config, args.config, space=space)
    problems = []
    if args.resume and args.run_dir:
        problems.append("--resume and --run-dir: give one (a resumed tune keeps its directory)")
    if saved is not None:
        study = Path(args.resume) / STUDY_FILE
        problems += resume_conflicts(args, saved, study) + changed_starts(config, saved, study)
    try:
        settings = SearchSettings.model_validate(model_values(args, SearchSettings))
    except ValidationError as exc:
        settings = None
        problems += [error["msg"].removeprefix("Value error, ") for error in exc.errors()]
    if settings is not None:
        problems += window_problems(settings, config.benchmark)
    if problems:
        raise ConfigError("glm5svc tune run: invalid options", problems=problems)
    options = WorkloadOptions.model_validate(
        {**model_values(args, WorkloadOptions), "request_file": args.request_file}
    )
    if args.request_file:
        if args.input_len or args.output_len:
            raise ConfigError(
                "glm5svc tune run: --request-file gives each request's input and output "
                "length: leave out --input-len and --output-len, or the request file"
            )
        plan_from_config(config, request_file=args.request_file)  # refused before any trial
    return TuneRequest(
        config_path=Path(args.config) if args.config else None,
        workload=Workload(**options.resolved(config.benchmark)),
        settings=settings,
        space_path=Path(args.space) if args.space else None,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        resume=Path(args.resume) if args.resume else None,
        take_over=args.take_over,
        disk_read_gbps=args.disk_read_gbps,
        budget_given=args.budget_s is not None,
    )


def resume_conflicts(args, saved: dict, study: Path) -> list[str]:
    """The options given to `--resume` that contradict what the run directory saved (its
    workload, its search settings but the budget and trial limits, its space file)."""
    given: list[tuple[str, object, object]] = []
    for model, saved_values in ((WorkloadOptions, saved["workload"]),
                                (SearchSettings, saved["settings"])):  # fmt: skip
        for name, value in model_values(args, model).items():
            field = model.model_fields[name]
            if name in RESUME_OVERRIDES or value == field.default or name not in saved_values:
                continue  # left out (argparse gave the default), or may change on a resume
            given.append((option_of(field).flag, value, saved_values[name]))
    if args.request_file:
        request_file = str(Path(args.request_file).absolute())
        given.append(("--request-file", request_file, saved["workload"].get("request_file")))
    if args.space and "space_file" in saved:  # saved since the space could be resumed
        space_file = str(Path(args.space).absolute())
        given.append(("--space", space_file, saved.get("space_file") or "the shipped space"))
    return [
        f"{flag} {value}: this run saved {was} ({study}); leave {flag} out to resume it (only "
        f"{', '.join(RESUME_FLAGS)} may change), or start a new tune"
        for flag, value, was in given
        if value != was
    ]


def changed_starts(config, saved: dict, study: Path) -> list[str]:
    """The searched settings whose value in the configuration is not the one the study
    started from (each trial is measured against that start)."""
    from glm5svc.tune.space import space_from_dict, start_value

    try:
        knobs = space_from_dict(saved["space"]).knobs
    except (KeyError, TypeError, ValueError):
        return []  # a malformed tune.json: the tune refuses it naming the key
    started = saved.get("start") or {}
    problems = []
    for knob in knobs:
        now = json.loads(json.dumps(start_value(config, knob.name), default=str))
        if started.get(knob.name) != now:
            problems.append(
                f"{knob.name}: this study started from {started.get(knob.name)!r} ({study}), "
                f"the configuration has {now!r}; resume with the configuration the study "
                "started from, or start a new tune"
            )
    return problems


def run_tune(args) -> int:
    from glm5svc.tune.live import Progress
    from glm5svc.tune.session import Tune

    request = _request(args)
    if args.plan:
        return _print_plan(args, Tune(request))
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, frame) -> None:
        received.append(signum)
        stop.set()

    previous = {
        s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        with Progress(live_table=sys.stderr.isatty() and not args.json) as progress:
            tune = Tune(request, on_progress=progress.update, should_stop=stop.is_set)
            summary = tune.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        summary["interrupted_by"] = signal.Signals(received[0]).name
    nothing = nothing_measured(summary)
    if nothing:
        summary["error"] = nothing
    if args.json:
        emit(args.json_schema, summary, ok=not received and not nothing)
    else:
        _print_result(summary)
    if received:
        return 128 + received[0]
    if nothing:
        print(f"glm5svc: {nothing}", file=sys.stderr)
        return EXIT_NOTHING_MEASURED
    return 0


def nothing_measured(summary: dict) -> str | None:
    """Why a tune measured nothing (each trial's verdict), or None when one trial did."""
    trials = summary.get("trials") or []
    if any(t.get("throughput_mean") is not None for t in trials):
        return None
    if not trials:
        return f"no trial measured anything: none ran ({summary.get('stopped_by')})"
    reasons = "; ".join(f"trial {t['trial']}: {t.get('verdict') or t['status']}" for t in trials)
    return f"no trial measured anything ({reasons})"


def _print_plan(args, tune) -> int:
    planned, notes = tune.plan()
    if args.json:
        emit(args.json_schema, {**planned.to_dict(), "inputs": notes})
        return 0
    for line in planned.lines() + [f"plan: {note}" for note in notes]:
        print(line)
    return 0


def _print_result(summary: dict) -> None:
    from glm5svc.tune.outputs import confidence_label, trials_markdown
    from glm5svc.tune.report import result_lines

    print(trials_markdown(summary["trials"], confidence_label(summary)))
    for line in result_lines(summary):
        print(line)


def run_apply(args) -> int:
    from glm5svc.tune.apply import apply_tune

    paths.TUNED_RUN.check(args.run_dir)
    result = apply_tune(
        Path(args.run_dir), args.config, restart=not args.no_restart, force=args.force
    )
    if args.json:
        emit(args.json_schema, result)
    else:
        for line in result["messages"]:
            print(line)
    return 0


def run_show(args) -> int:
    from glm5svc.tune.outputs import confidence_label, read_summary, trials_markdown
    from glm5svc.tune.report import result_lines

    paths.TUNED_RUN.check(args.run_dir)
    summary = read_summary(Path(args.run_dir))
    if args.json:
        emit(args.json_schema, summary)
        return 0
    if summary.get("running"):
        print(f"running: {len(summary['trials'])} trial(s) so far (no summary yet)")
    print(trials_markdown(summary.get("trials") or [], confidence_label(summary)))
    trials_of: dict[int, list[str]] = {}
    for row in summary.get("trials") or []:
        if isinstance(row, dict) and isinstance(row.get("start"), int):
            trials_of.setdefault(row["start"], []).append(str(row.get("trial")))
    for start in summary.get("starts") or []:
        rows = ", ".join(trials_of.get(start["start"], [])) or "none"
        print(f"engine start {start['start']} (trial(s) {rows}): {start['text']}")
    if not summary.get("running"):
        for line in result_lines(summary):
            print(line)
    return 0
