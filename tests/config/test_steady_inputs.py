"""The steady measurement's inputs: benchmark.steady, window_s, windows,
warmup_tolerance_pct, warmup_max_s, prefix_sharing, and tune's --window and --min-effect.
Any value is refused with the key (or option) named, or accepted and then usable: a
window the engine's counters can measure, a warm-up that can compare two windows, a
plan bench and tune can run."""

from __future__ import annotations

import math

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from glm5svc.bench.measure import MAX_PROMPTS, Measurer
from glm5svc.bench.plan import BenchPlan, plan_from_config
from glm5svc.bench.steady import EngineSample, SteadyWindow, prompts_for_window, window_for_prompts
from glm5svc.cli import UsageError, build_parser
from glm5svc.cli_options import model_values
from glm5svc.config import ENGINE_READ_INTERVAL_S, MAX_WINDOW_S, BenchmarkSection, parse_config
from glm5svc.errors import ConfigError
from glm5svc.tune.settings import SearchSettings, window_problems

KEYS = ("steady", "window_s", "windows", "warmup_tolerance_pct", "warmup_max_s",
        "prefix_sharing")  # fmt: skip
values = (
    st.none()
    | st.booleans()
    | st.integers(-10, 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(0, 200_000)
    | st.sampled_from(["30", "yes", "1e3", "", "0.5"])
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=len(KEYS)))
def test_any_steady_setting_is_refused_by_key_or_gives_a_usable_plan(given_values):
    text = yaml.safe_dump({"server": {"host": "127.0.0.1"}, "benchmark": given_values})
    try:
        config = parse_config(text)
    except ConfigError as exc:
        lines = exc.problems or [str(exc)]
        assert all(any(f"benchmark.{key}" in line for key in KEYS) for line in lines), lines
        return
    bench = config.benchmark
    assert isinstance(bench.steady, bool) and 1 <= bench.windows <= 100
    assert ENGINE_READ_INTERVAL_S <= bench.window_s <= MAX_WINDOW_S
    assert bench.warmup_max_s == 0 or bench.warmup_max_s >= 2 * bench.window_s
    assert 0 <= bench.prefix_sharing <= 1 and 0 < bench.warmup_tolerance_pct <= 50
    plan = plan_from_config(config, api_key=None)
    assert plan.window_s == bench.window_s and math.isfinite(plan.timeout_for(plan.ladder[0]))


def tune_run(argv: list[str]):
    """`tune run` argv: the UsageError argparse raised, the problems the settings have
    against the default configuration, or the settings."""
    parser = build_parser(only="tune")
    try:
        args = parser.parse_args(["tune", "run", *argv])
    except UsageError as exc:
        return exc
    settings = SearchSettings.model_validate(model_values(args, SearchSettings))
    return window_problems(settings, BenchmarkSection()) or settings


option_text = st.one_of(
    st.from_regex(r"-?[0-9]{0,6}(\.[0-9]{0,4})?(e-?[0-9]{1,3})?[smh]?", fullmatch=True),
    st.sampled_from(["nan", "inf", "-inf", "1_0", "٣", "0x10", " 3", "30d", "1e400"]),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["--window", "--min-effect"]), option_text)
def test_window_and_min_effect_are_refused_by_name_or_within_their_bounds(option, value):
    found = tune_run([f"{option}={value}"])
    if isinstance(found, UsageError):
        assert f"argument {option}" in str(found) and "is not allowed" in str(found)
        return
    if isinstance(found, list):
        assert all(line.startswith("--") and "benchmark.warmup_max_s" in line or
                   "--trial-timeout" in line for line in found), found  # fmt: skip
        return
    assert found.window_s is None or ENGINE_READ_INTERVAL_S <= found.window_s <= MAX_WINDOW_S
    assert 0 <= found.min_effect < 1
    window = found.window_s or BenchmarkSection().window_s
    assert found.min_repeats * window <= found.trial_timeout_s
    assert found.window_s is None or found.window_s * 2 <= BenchmarkSection().warmup_max_s


def test_the_configured_window_must_fit_the_trial_timeout_too():
    settings = SearchSettings(trial_timeout_s=1000, min_repeats=2)
    (problem,) = window_problems(settings, BenchmarkSection(window_s=600, warmup_max_s=0))
    assert problem.startswith("--min-repeats 2 windows of benchmark.window_s (600 s)")
    assert "raise --trial-timeout to at least 1200 s, or give a shorter --window" in problem
    assert window_problems(SearchSettings(trial_timeout_s=1200), BenchmarkSection()) == []


def test_a_window_given_must_fit_the_configured_warmup_bound():
    bound = BenchmarkSection().warmup_max_s
    window = round(bound * 0.55)  # over half the default bound, three within --trial-timeout
    (problem,) = window_problems(SearchSettings(window_s=window), BenchmarkSection())
    assert problem.startswith(f"--window {window:g} s: benchmark.warmup_max_s ({bound:g} s) holds")
    assert f"at least {2 * window:g}" in problem


@settings(max_examples=300, deadline=None)
@given(st.floats(0.001, 1e5), st.integers(1, 4096), st.integers(1, 10**6))
def test_the_longest_window_a_run_gives_is_what_its_prompts_can_fill(rate, concurrency, prompts):
    window = window_for_prompts(rate, concurrency, prompts)
    assert window >= 0
    if window > 0:
        assert prompts_for_window(rate, concurrency, window) <= prompts + 1  # ceil's one


def test_a_window_no_run_can_fill_says_which_window_would_do(tmp_path):
    plan = BenchPlan(base_url="http://127.0.0.1:1", python="p", tokenizer="t", model="m",
                     ladder=(8,), input_len=8, output_len=8, steady=True,
                     window_s=MAX_WINDOW_S, warmup_max_s=0)  # fmt: skip
    measurer = Measurer(plan, 8, tmp_path)
    samples = [EngineSample(float(t), 8, 0, 100.0 * t, 0, 0, 0) for t in range(11)]
    window = SteadyWindow(0.0, 10.0, None, 8.0, reason="the steady window lasted 10.0 s")
    measurer._resize(samples, window, level=None)
    longest = window_for_prompts(100.0, 8, MAX_PROMPTS)
    assert measurer.prompts == MAX_PROMPTS
    assert f"set benchmark.window_s to at most {longest:g}" in measurer.too_long
    assert "86400 s window needs about" in measurer.too_long
