"""`glm5svc bench`: sglang.bench_serving over a concurrency ladder with GPU telemetry per
level, the knee, under-use and a baseline comparison; `glm5svc bench compare A B`.

Exit status: 0 done; 1 the ladder stopped early (server died, requests failed, bench_serving
failed); 3 a regression against the baseline with --fail-on-regression; 78 bad config/flags.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import fields
from pathlib import Path

from glm5svc import paths
from glm5svc.cli_options import Range, add_number, http_url
from glm5svc.config import (
    MAX_COUNT,
    MAX_SECONDS,
    Config,
    load_config,
    resolve_config_path,
    rules_of,
)
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit

EXIT_STOPPED = 1
EXIT_REGRESSION = 3


def register(subparsers):
    parser = subparsers.add_parser(
        "bench",
        epilog=epilog("bench"),
        help="benchmark the running server over a concurrency ladder (sglang.bench_serving)",
        description=__doc__,
    )
    # Each option's dest is the BenchPlan field it overrides (run passes them by name).
    add_number(
        parser,
        "--ladder",
        dest="ladder",
        nargs="+",
        config="benchmark.ladder",
        help="concurrency levels, e.g. 64 256 or 64,256",
    )
    add_number(parser, "--input-len", config="benchmark.input_len", help="input tokens per prompt")
    add_number(
        parser, "--output-len", config="benchmark.output_len", help="output tokens per request"
    )
    parser.add_argument(
        "--request-file",
        metavar="FILE",
        help="a recorded workload instead of the fixed lengths: JSON Lines, one request a line, "
        'e.g. {"input_len": 812, "output_len": 230} (default: benchmark.request_file)',
    )
    add_number(
        parser,
        "--num-prompts",
        kind=int,
        range=Range(0, True, MAX_COUNT),
        help="prompts per level of a single-wave run (benchmark.steady: false; default: "
        "max(benchmark.min_prompts, benchmark.prompts_per_concurrency x the level)); refused "
        "with steady runs, which are sized to --window",
    )
    add_number(
        parser,
        "--warmup-requests",
        config="benchmark.warmup_requests",
        help="warm-up requests before each level",
    )
    add_number(
        parser,
        "--window",
        dest="window_s",
        config="benchmark.window_s",
        duration=True,
        help="the shortest steady window per run",
    )
    add_number(parser, "--windows", config="benchmark.windows", help="measured windows per level")
    parser.add_argument(
        "--base-url", type=http_url, help="server URL (default: from the config's server)"
    )
    parser.add_argument(
        "--python",
        help="interpreter that runs sglang.bench_serving (default: benchmark.python, else "
        "server.python)",
    )
    parser.add_argument("--tokenizer", help="tokenizer directory (default: the model's)")
    parser.add_argument("--model", help="served model name (default: model.served_name)")
    parser.add_argument("--results-dir", help="where runs go (default: service.results_dir)")
    parser.add_argument(
        "--baseline", help="shipped baseline name, run directory or file; 'none' for no comparison"
    )
    add_number(
        parser,
        "--level-timeout",
        dest="level_timeout_s",
        unit="seconds",
        range=Range(0, True, MAX_SECONDS),
        help="seconds one level may take (default: from the level's workload)",
    )
    parser.add_argument(
        "--fail-on-regression", action="store_true", help="exit 3 when below the baseline"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="bench_action", metavar="ACTION")
    compare = sub.add_parser(
        "compare",
        epilog=epilog("bench compare"),
        help="compare run A with the baseline B (A is judged against B)",
        description=(
            "Compare A (the run to judge) with B (the baseline): each figure's change is "
            "A / B - 1; a drop beyond --threshold percent is a regression. Gives no verdict "
            "when the two runs' workloads (lengths or request file) or measurements differ."
        ),
    )
    compare.add_argument(
        "a", help="A, the run to judge: run directory, summary.json or shipped baseline name"
    )
    compare.add_argument("b", help="B, the baseline (change = A / B - 1): same kinds as A")
    add_number(
        compare,
        "--threshold",
        config="benchmark.regression_threshold_pct",
        unit="percent",
        help="a drop beyond this is a regression",
    )
    compare.add_argument(
        "--fail-on-regression", action="store_true", help="exit 3 when A regressed against B"
    )
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.set_defaults(func=run_compare)
    return parser


def _config(args) -> Config:
    """The config file; its defaults when no file exists and none was asked for."""
    try:
        return load_config(args.config)
    except ConfigError:
        if args.config or not _missing(resolve_config_path(None)):
            raise
        return Config()


def _missing(path: Path) -> bool:
    return not path.exists()


def check_paths(config: Config, args) -> None:
    """The request file and the results folder, from the flags or the configuration."""
    for rule, given in (
        (paths.REQUEST_FILE, args.request_file),
        (paths.RESULTS_DIR, args.results_dir),
    ):
        if given:
            rule.check(given)
    paths.check_config_paths(
        config, request_file=not args.request_file, results=not args.results_dir
    )


def refuse_a_gate_that_cannot_judge(plan: dict, baseline_ref: str) -> None:
    """--fail-on-regression against a baseline no run of this plan can be judged against
    (another workload, or none recorded, as the shipped reference's): refused before the
    ladder runs, with the gate that works."""
    from glm5svc.bench.baselines import load_baseline
    from glm5svc.bench.verdicts import workload_difference

    why = workload_difference({"name": "this run", "plan": plan}, load_baseline(baseline_ref))
    if why:
        raise ConfigError(
            f"--fail-on-regression against the baseline {baseline_ref}: {why}, so the gate "
            "could not judge this run and would exit 3 after the whole ladder; gate on a run "
            "of your own: `glm5svc bench` once on the deployment you trust (the report names "
            "its run directory), then `glm5svc bench --fail-on-regression --baseline "
            "RUN_DIR`. Without --fail-on-regression the report shows this baseline's figures "
            "beside the run's"
        )


def run(args) -> int:
    from glm5svc.bench import BenchPlan, Judgement, plan_from_config, run_benchmark
    from glm5svc.bench.runner import raise_terminated

    config = _config(args)
    with rules_of(args.config):  # located in the file as validate locates them
        check_paths(config, args)
    if args.request_file and (args.input_len or args.output_len):
        raise ConfigError(
            "--request-file gives each request's input and output length: leave out "
            "--input-len and --output-len, or the request file for fixed lengths"
        )
    warmup = config.benchmark.warmup_max_s
    if config.benchmark.steady and args.window_s and 0 < warmup < 2 * args.window_s:
        # The configuration checks benchmark.window_s against its warm-up bound; --window too.
        raise ConfigError(
            f"glm5svc bench --window {args.window_s:g} s: benchmark.warmup_max_s ({warmup:g} s) "
            "holds fewer than two such windows, so the warm-up could never see two agree; set "
            f"benchmark.warmup_max_s to 0 (no warm-up) or at least {2 * args.window_s:g}, or "
            "shorten --window"
        )
    if config.benchmark.steady and args.num_prompts is not None:
        raise ConfigError(
            f"glm5svc bench --num-prompts {args.num_prompts}: steady runs (benchmark.steady: "
            "true) size each run to the window, so a fixed prompt count would not be what ran; "
            "make runs shorter with --window (or benchmark.window_s), or set benchmark.steady: "
            "false for single-wave runs of a fixed count"
        )
    ladder = [n for part in args.ladder for n in part] if args.ladder else None
    overrides = {f.name: getattr(args, f.name) for f in fields(BenchPlan) if hasattr(args, f.name)}
    baseline = args.baseline
    with rules_of(args.config):
        plan = plan_from_config(config, **{**overrides, "ladder": ladder})
        judgement = Judgement.from_config(config, baseline="" if baseline == "none" else baseline)
    if args.fail_on_regression and not judgement.baseline:
        raise ConfigError(
            "--fail-on-regression with no baseline (benchmark.baseline: null, or --baseline "
            "none): there is nothing to judge the run against; gate on a run of your own: "
            "`glm5svc bench` once on the deployment you trust (the report names its run "
            "directory), then `glm5svc bench --fail-on-regression --baseline RUN_DIR`"
        )
    if args.fail_on_regression:
        refuse_a_gate_that_cannot_judge(plan.describe(), judgement.baseline)
    results_root = Path(args.results_dir) if args.results_dir else config.service.results_dir
    for sig in (signal.SIGTERM, signal.SIGHUP):  # end bench_serving too, as ^C does
        signal.signal(sig, raise_terminated)
    with _Progress(enabled=not args.json) as progress:
        summary = run_benchmark(
            plan, results_root, judgement, config=config, on_progress=progress.update
        )
    if summary.stopped_reason:
        exit_status = EXIT_STOPPED
    elif args.fail_on_regression and summary.below_baseline:
        exit_status = EXIT_REGRESSION
    elif args.fail_on_regression and not summary.verdicts.get("baseline", {}).get("judged", True):
        # A gate that cannot judge (another workload, or none to compare with) must not pass.
        print(f"glm5svc bench: {summary.verdicts['baseline']['text']}", file=sys.stderr)
        exit_status = EXIT_REGRESSION
    else:
        exit_status = 0
    if args.json:
        emit(args.json_schema, summary.to_dict(), ok=exit_status == 0)
    else:
        _print_report(summary)
    return exit_status


def _print_report(summary) -> None:
    from rich.console import Console

    from glm5svc.bench.outputs import render_table, verdict_lines

    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(render_table(summary))
    for line in verdict_lines(summary):
        console.print(line, highlight=False)


class _Progress:
    """A rich progress bar over the ladder on stderr, with the current phase; where stderr is
    not a terminal (a pipe, a log file, CI), one line per phase instead, as it happens: a
    level of GLM-5 takes minutes, and a bar that draws only at its end shows nothing."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.progress = None
        self.task = None
        self.lines = False  # plain lines on stderr
        self.said = ""

    def __enter__(self) -> _Progress:
        if self.enabled and not sys.stderr.isatty():
            self.lines = True
        elif self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} levels"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.progress.start()
        return self

    def update(self, event) -> None:
        if self.lines:
            if event.message != self.said:
                self.said = event.message
                print(f"glm5svc bench: {event.message}", file=sys.stderr, flush=True)
            return
        if self.progress is None:
            return
        if self.task is None:
            self.task = self.progress.add_task("starting", total=event.total)
        if event.kind == "level-done":
            self.progress.advance(self.task)
            self.progress.console.print(event.message, highlight=False)
        self.progress.update(self.task, description=event.message)

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()


def run_compare(args) -> int:
    from glm5svc.bench.baselines import load_baseline, usable_figure
    from glm5svc.bench.verdicts import compare_figures, workload_difference

    current = load_baseline(args.a)
    baseline = load_baseline(args.b)
    threshold = args.threshold
    if threshold is None:
        threshold = _config(args).benchmark.regression_threshold_pct
    figures = {
        c: {k: v for k, v in f.items() if usable_figure(v)} for c, f in current["levels"].items()
    }
    not_judged = workload_difference(current, baseline)
    comparison = compare_figures(figures, baseline, threshold, not_judged, current.get("windows"))
    comparison["current"] = current.get("name")
    comparison["workloads_differ"] = not_judged
    if args.fail_on_regression and not_judged is not None:
        raise NothingCompared(
            f"bench compare --fail-on-regression: {comparison['text']}: the gate cannot judge "
            "runs of different workloads; compare runs of the same workload, measured the same way",
            fields=comparison,
        )
    if args.fail_on_regression and not comparison["rows"]:
        raise NothingCompared(
            f"bench compare --fail-on-regression: {comparison['text']}: the gate cannot pass "
            "on no figures; compare runs that measured the same concurrency levels",
            fields=comparison,
        )
    if args.fail_on_regression and not comparison["judged"]:
        raise NothingCompared(
            f"bench compare --fail-on-regression: {comparison['text']}; a gate that cannot "
            "judge does not pass",
            fields=comparison,
        )
    exit_status = EXIT_REGRESSION if args.fail_on_regression and comparison["regressed"] else 0
    if args.json:
        emit(args.json_schema, comparison, ok=exit_status == 0)
    else:
        _print_comparison(comparison)
    return exit_status


class NothingCompared(Glm5Error):
    """A regression gate given no common figure: it fails as a regression does."""

    exit_status = EXIT_REGRESSION


def _print_comparison(comparison: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{comparison['current']} vs {comparison['name']}", title_justify="left")
    for name in ("conc", "metric", "A", "B", "change", "interval", "verdict"):
        table.add_column(name, justify="right")
    for row in comparison["rows"]:
        change = f"{row['change_pct']:+.1f}%"
        low_high = row.get("interval_pct")
        verdict = "regressed" if row["regressed"] else "within" if row["judged"] else "not judged"
        table.add_row(
            str(row["concurrency"]),
            row["label"],
            f"{row['current']:,.2f}",
            f"{row['baseline']:,.2f}",
            f"[red]{change}[/red]" if row["regressed"] else change,
            f"{low_high[0]:+.1f}%, {low_high[1]:+.1f}%" if low_high else "-",
            verdict,
        )
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    console.print(comparison["text"], highlight=False)
    if comparison["levels_without_baseline"]:
        missing = ", ".join(map(str, comparison["levels_without_baseline"]))
        console.print(f"no figure in B for concurrency {missing}", highlight=False)
    sys.stdout.flush()
