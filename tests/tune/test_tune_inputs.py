"""Property-based: the tune's parsers and statistics take any input without a traceback."""

from __future__ import annotations

import argparse
import math

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from glm5svc.cli import UsageError, build_parser
from glm5svc.commands.tune import _request
from glm5svc.config import Config
from glm5svc.errors import ConfigError
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import apply_candidate, load_space, start_value
from glm5svc.tune.stats import BETTER, CONFIDENCE_LEVELS, UNDECIDED, WORSE, compare, mean_interval

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def space_or_clear_error(path) -> None:
    try:
        space = load_space(path, Config(), moe=True, sglang_version="0.5.11")
    except ConfigError as exc:
        assert str(path) in str(exc)
        return
    assert space.knobs


@settings(max_examples=200, deadline=None)
@given(documents)
def test_any_space_document_is_a_space_or_a_clear_error(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text(yaml.safe_dump(document))
    space_or_clear_error(path)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_a_space_file_are_a_space_or_a_clear_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_bytes(data)
    space_or_clear_error(path)


NUMERIC_RUN_OPTIONS = ["--concurrency", "--budget", "--trial-timeout", "--confidence",
                       "--min-repeats", "--max-repeats", "--prune-below", "--seed",
                       "--ttft-p99-ms", "--max-trials", "--settle", "--length-ratio",
                       "--window"]  # fmt: skip


def parse_run(argv: list[str]) -> argparse.Namespace | None:
    """`tune run` argv parsed, or None when the parser refused it (exit 2, a message)."""
    try:
        return build_parser(only="tune").parse_args(["tune", "run", *argv])
    except UsageError as exc:
        assert exc.exit_status == 2 and str(exc).startswith("tune run: argument --")
        return None


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(NUMERIC_RUN_OPTIONS), st.text(max_size=8), max_size=4))
def test_the_run_options_are_refused_or_make_a_request(tmp_path_factory, given_options):
    config = tmp_path_factory.mktemp("cfg") / "glm5.yaml"
    config.write_text("{}\n")
    argv = [f"{name}={value}" for name, value in given_options.items()]
    args = parse_run(argv)
    if args is None:
        return
    args.config = str(config)
    for name in ("budget_s", "trial_timeout_s", "ttft_p99_ms", "window_s"):
        value = getattr(args, name)
        assert value is None or (math.isfinite(value) and value > 0)
    assert math.isfinite(args.settle_s) and args.settle_s >= 0
    try:
        request = _request(args)
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:  # repeats out of order, or windows that cannot fit
            assert "--max-repeats" in problem or "window" in problem, problem
        return
    assert request.workload.concurrency >= 1
    assert 2 <= request.settings.min_repeats <= request.settings.max_repeats
    assert request.settings.confidence in CONFIDENCE_LEVELS
    assert 0 <= request.settings.prune_below < 1
    assert 0 < request.workload.length_ratio <= 1
    assert request.settings.settle_s == args.settle_s


def test_the_run_defaults_are_the_documented_ones():
    args = parse_run([])
    # --budget left out: 4 h (a resume: what its run left of the budget it was given).
    assert args.budget_s is None and SearchSettings().budget_s == 4 * 3600
    assert args.trial_timeout_s == 3600
    # Rounds of the live values per engine start: the decider looks after every two.
    assert (args.min_repeats, args.max_repeats, args.confidence) == (2, 16, 0.95)
    assert (args.settle_s, args.length_ratio, args.window_s) == (4, 0.5, None)
    assert parse_run(["--budget", "90m"]).budget_s == 5400
    assert parse_run(["--settle", "0"]).settle_s == 0  # no settle is allowed
    assert parse_run(["--settle", "1m", "--length-ratio", "1"]).settle_s == 60
    for bad in (["--budget", "nan"], ["--min-repeats", "1"], ["--confidence", "0.5"],
                ["--prune-below", "1"], ["--concurrency", "0"], ["--seed", "-1"],
                ["--settle", "-1"], ["--length-ratio", "0"],
                ["--length-ratio", "1.5"]):  # fmt: skip
        assert parse_run(bad) is None, bad


def test_the_options_of_the_prompt_counted_benchmark_are_gone():
    """The continuous load has no prompt counts: their options are refused, not ignored."""
    for gone in (["--num-prompts", "32"], ["--warmup-prompts", "8"]):
        try:
            build_parser(only="tune").parse_args(["tune", "run", *gone])
        except UsageError as exc:
            assert exc.exit_status == 2 and f"unrecognized arguments: {' '.join(gone)}" in str(exc)
        else:
            raise AssertionError(f"{gone} was accepted")


@given(st.lists(st.floats(1, 1e6), min_size=2, max_size=10))
def test_a_setting_compared_with_itself_is_undecided(values):
    assert compare(values, values)[0] == UNDECIDED


@given(
    st.lists(st.floats(1, 1e6), min_size=2, max_size=10),
    st.lists(st.floats(1, 1e6), min_size=2, max_size=10),
)
def test_compare_is_antisymmetric_and_the_interval_holds_the_mean(a, b):
    forward, backward = compare(a, b)[0], compare(b, a)[0]
    assert (forward, backward) in ((BETTER, WORSE), (WORSE, BETTER), (UNDECIDED, UNDECIDED))
    interval = mean_interval(a)
    assert interval.low <= interval.mean <= interval.high


@given(st.dictionaries(st.sampled_from(["--page-size", "--cuda-graph-max-bs", "tuning.cuda_graph",
                                        "tuning.max_running_requests"]),
                       st.none() | st.booleans() | st.integers(1, 4096), max_size=4))  # fmt: skip
def test_a_candidate_round_trips_through_the_configuration(candidate):
    mapping = apply_candidate({"server": {"extra_args": ["--page-size", "16", "--x"]}}, candidate)
    for name, value in candidate.items():
        if name.startswith("--"):
            args = mapping["server"]["extra_args"]
            assert args.count(name) == (0 if value in (None, False) else 1)
            continue
        assert mapping["tuning"][name.split(".")[1]] == value
    if "--page-size" not in candidate:
        assert "16" in mapping["server"]["extra_args"]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in candidate.values()):
        try:
            config = Config.model_validate(mapping)
        except Exception:  # noqa: BLE001 - a value out of range is the schema's business
            return
        for name, value in candidate.items():
            assert start_value(config, name) == value


def test_a_space_file_is_read_as_strictly_as_a_configuration(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("knobs:\n  - key: tuning.cuda_graph\n    key: tuning.radix_cache\n")
    try:
        load_space(path, Config(), moe=True, sglang_version="0.5.11")
    except ConfigError as exc:
        assert f"--space {path}, line 3: the key 'key' is given twice" in str(exc)
    else:
        raise AssertionError("a repeated key was read")


def test_the_run_options_are_the_settings_models_fields():
    """Declared once: each option's default, range and help are its field's."""
    from glm5svc.cli_options import option_of
    from glm5svc.tune.settings import SearchSettings, WorkloadOptions

    args = parse_run([])
    parser = build_parser(only="tune")._subparsers._group_actions[0].choices["tune"]  # noqa: SLF001
    run = parser._subparsers._group_actions[0].choices["run"]  # noqa: SLF001
    actions = {a.dest: a for a in run._actions}  # noqa: SLF001
    for model in (SearchSettings, WorkloadOptions):
        for name, field in model.model_fields.items():
            option = option_of(field)
            if option is None:
                continue
            assert actions[name].option_strings == [option.flag]
            assert field.description.replace("%", "%%") in actions[name].help
            if name == "budget_s":  # left out: None, so a resume knows it was not given
                assert getattr(args, name) is None and "(default: 4h)" in actions[name].help
            elif option.config is None:
                assert getattr(args, name) == field.default, name
    settings = SearchSettings.model_validate({})
    assert (settings.min_effect, settings.window_s) == (0.03, None)  # None: benchmark.window_s
    assert parse_run(["--min-effect", "0.05", "--window", "5m"]).window_s == 300
    assert parse_run(["--min-effect", "1"]) is None
