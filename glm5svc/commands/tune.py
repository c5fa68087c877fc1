"""`glm5svc tune`: search the server's settings for the best throughput on your workload.

Each trial starts the engine with one candidate setting under the same supervision as
`glm5svc serve` (on private ports), waits for READY, benchmarks it with sglang's
bench_serving at your concurrency (a warm-up run discarded, then repeated runs until a
95 % interval separates it from the best so far, or its runs are spent), and stops it
with the real drain. A candidate that fails to start is recorded with its diagnosis.
Results: a run directory with the trials (trials.md), the tuned overlay (tuned.yaml),
an Ansible host_vars snippet, a plot and a bench baseline. docs/tuning.md explains it.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
from pathlib import Path

from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.json_output import emit

EXIT_INTERRUPTED = 130


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise ConfigError(f"must be at least 1 (got {value})")
    return value


def _duration(text: str) -> float:
    """Seconds, or with a unit: 90s, 45m, 2h."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        value = float(number) * unit
    except ValueError:
        raise ConfigError(f"not a duration: {text!r} (seconds, or 90s, 45m, 2h)") from None
    if not math.isfinite(value) or value <= 0 or value > 30 * 86400:
        raise ConfigError(f"a duration must be more than 0 and at most 30 days (got {text!r})")
    return value


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"not a number of milliseconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"a latency limit must be a positive number of ms (got {text!r})")
    return value


def register(subparsers):
    parser = subparsers.add_parser(
        "tune",
        help="search the server's settings for the best throughput on your workload",
        description=__doc__,
    )
    parser.set_defaults(func=_usage(parser))
    actions = parser.add_subparsers(dest="tune_action", metavar="ACTION")

    run = actions.add_parser(
        "run",
        help="run a tune (or --resume one)",
        description="Run a tune. Every option's default is in docs/tuning.md.",
    )
    workload = run.add_argument_group("the workload (what the objective is measured on)")
    workload.add_argument("--concurrency", default="256", help="target concurrency (256)")
    workload.add_argument("--input-len", help="input tokens per prompt (benchmark.input_len)")
    workload.add_argument("--output-len", help="output tokens per request (benchmark.output_len)")
    workload.add_argument(
        "--num-prompts", help="prompts per measured run (default: 4 x concurrency, >= 128)"
    )
    workload.add_argument(
        "--warmup-prompts", help="prompts of the discarded warm-up run (default: concurrency)"
    )
    limits = run.add_argument_group("latency limits (a faster setting over them cannot win)")
    limits.add_argument("--ttft-p99-ms", help="time to first token, p99, ms")
    limits.add_argument("--itl-p99-ms", help="inter-token latency, p99, ms")
    search = run.add_argument_group("the search")
    search.add_argument("--space", help="search space file (default: glm5svc's, per target)")
    search.add_argument("--budget", default="4h", help="time for the whole tune (4h)")
    search.add_argument("--max-trials", help="at most this many trials (engine starts)")
    search.add_argument("--trial-timeout", default="1h", help="time one trial may take (1h)")
    search.add_argument("--min-repeats", default="3", help="measured runs per trial, at least (3)")
    search.add_argument("--max-repeats", default="8", help="measured runs per trial, at most (8)")
    search.add_argument(
        "--confidence", default="0.95", help="confidence of the intervals: 0.9, 0.95, 0.99"
    )
    search.add_argument(
        "--prune-below",
        default="0.7",
        help="a first run under this share of the best's mean ends the trial (0.7)",
    )
    search.add_argument("--seed", default="0", help="the sampler's seed (0)")
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
        help="write a tune's overlay into the configuration and restart glm5.service",
    )
    apply.add_argument("run_dir", metavar="RUN_DIR")
    apply.add_argument("--no-restart", action="store_true", help="do not restart glm5.service")
    apply.add_argument("--json", action="store_true")
    apply.set_defaults(func=run_apply)

    show = actions.add_parser("show", help="a tune's trials and result")
    show.add_argument("run_dir", metavar="RUN_DIR")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    return parser


def _usage(parser):
    def usage(args) -> int:
        parser.print_help(sys.stderr)
        return 2

    return usage


def _request(args):
    from glm5svc.config import load_config
    from glm5svc.tune.search import SearchSettings, Workload
    from glm5svc.tune.session import TuneRequest
    from glm5svc.tune.stats import CONFIDENCE_LEVELS

    config = load_config(args.config)
    problems = []

    def read(name, convert, value):
        try:
            return convert(value) if value is not None else None
        except ConfigError as exc:
            problems.append(f"--{name}: {exc}")
            return None

    concurrency = read("concurrency", _positive_int, args.concurrency) or 1
    input_len = read("input-len", _positive_int, args.input_len) or config.benchmark.input_len
    output_len = read("output-len", _positive_int, args.output_len) or config.benchmark.output_len
    default_prompts = max(config.benchmark.min_prompts, 4 * concurrency)
    prompts = read("num-prompts", _positive_int, args.num_prompts) or default_prompts
    warmup = read("warmup-prompts", _positive_int, args.warmup_prompts) or concurrency
    min_repeats = read("min-repeats", _positive_int, args.min_repeats) or 3
    max_repeats = read("max-repeats", _positive_int, args.max_repeats) or 8
    if min_repeats < 2:
        problems.append("--min-repeats: at least 2 (one run has no interval)")
    if max_repeats < min_repeats:
        problems.append(f"--max-repeats {max_repeats} is below --min-repeats {min_repeats}")
    try:
        confidence = float(args.confidence)
    except ValueError:
        confidence = -1.0
    if confidence not in CONFIDENCE_LEVELS:
        problems.append(f"--confidence: one of {', '.join(map(str, CONFIDENCE_LEVELS))}")
    try:
        prune_below = float(args.prune_below)
    except ValueError:
        prune_below = -1.0
    if not 0 <= prune_below < 1:
        problems.append("--prune-below: a share from 0 (never prune) to below 1")
    try:
        seed = int(args.seed)
    except ValueError:
        problems.append(f"--seed: not a whole number: {args.seed!r}")
        seed = 0
    if args.resume and args.run_dir:
        problems.append("--resume and --run-dir: give one (a resumed tune keeps its directory)")
    settings = SearchSettings(
        min_repeats=min_repeats,
        max_repeats=max_repeats,
        confidence=confidence,
        max_trials=read("max-trials", _positive_int, args.max_trials),
        budget_s=read("budget", _duration, args.budget) or 1.0,
        trial_timeout_s=read("trial-timeout", _duration, args.trial_timeout) or 1.0,
        prune_below=prune_below,
        ttft_p99_ms=read("ttft-p99-ms", _milliseconds, args.ttft_p99_ms),
        itl_p99_ms=read("itl-p99-ms", _milliseconds, args.itl_p99_ms),
        seed=seed,
    )
    if problems:
        raise ConfigError("glm5svc tune run: invalid options", problems=problems)
    return TuneRequest(
        config_path=Path(args.config) if args.config else None,
        workload=Workload(concurrency, input_len, output_len, prompts, warmup),
        settings=settings,
        space_path=Path(args.space) if args.space else None,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        resume=Path(args.resume) if args.resume else None,
        take_over=args.take_over,
    )


def run_tune(args) -> int:
    from glm5svc.tune.live import LiveTable
    from glm5svc.tune.session import Tune

    request = _request(args)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, frame) -> None:
        received.append(signum)
        stop.set()

    previous = {
        s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        with LiveTable(enabled=not args.json) as live:
            tune = Tune(request, on_progress=live.update, should_stop=stop.is_set)
            summary = tune.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        summary["interrupted_by"] = signal.Signals(received[0]).name
    if args.json:
        emit(args.json_schema, summary, ok=not received)
    else:
        _print_result(summary)
    if received:
        return 128 + received[0]
    return 0


def _print_result(summary: dict) -> None:
    from glm5svc.tune.outputs import trials_markdown

    print(trials_markdown(summary["trials"]))
    best, gain = summary.get("best"), summary.get("gain")
    if best:
        print(
            f"best: trial {best['trial']} ({best['setting']}): {best['throughput_mean']:,.0f} tok/s"
        )
    if gain:
        print(
            f"gain over the start: {gain['mean']:.2f}x (95 % interval {gain['low']:.2f}-"
            f"{gain['high']:.2f})"
        )
    for line in summary.get("service") or []:
        print(line)
    print(f"stopped: {summary.get('stopped_by')}")
    print(f"run directory: {summary['run_dir']} (tuned.yaml, host_vars.yml, trials.md, plot.png)")
    if summary.get("overlay"):
        print(f"apply it: glm5svc tune apply {summary['run_dir']}")


def run_apply(args) -> int:
    from glm5svc.tune.apply import apply_tune

    result = apply_tune(Path(args.run_dir), args.config, restart=not args.no_restart)
    if args.json:
        emit(args.json_schema, result)
    else:
        for line in result["messages"]:
            print(line)
    return 0


def run_show(args) -> int:
    from glm5svc.tune.outputs import SUMMARY_FILE, trials_markdown

    path = Path(args.run_dir) / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Glm5Error(f"{path}: not a finished tune's summary ({exc})") from None
    if args.json:
        emit(args.json_schema, summary)
    else:
        print(trials_markdown(summary.get("trials") or []))
        print(f"stopped: {summary.get('stopped_by')}")
    return 0
