"""Every numeric option of every command, found in the parsers, is range-checked when the
command line is read: nan, inf, out-of-range values end with exit 2 and a message that
names the option, what it accepts and an example that is itself accepted."""

from __future__ import annotations

import argparse

import pytest

from glm5svc.cli import UsageError, build_parser
from glm5svc.cli_options import Number, numeric_type, subparsers_of

PARSER = build_parser()


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    return {"": PARSER, **subparsers_of(PARSER)}


def options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if a.option_strings]  # noqa: SLF001


NUMERIC = [
    pytest.param(path, action, id=f"{path} {action.option_strings[-1]}".strip())
    for path, parser in all_parsers().items()
    for action in options(parser)
    if numeric_type(action)
]


def positionals(path: str) -> list[str]:
    """A value for each positional argument of the command (what parsing needs besides)."""
    parser = all_parsers()[path]
    return [
        "x"
        for a in parser._actions  # noqa: SLF001
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
    ]


def parse(argv: list[str], capsys) -> tuple[int, argparse.Namespace | None, str]:
    try:
        args = PARSER.parse_args(argv)
    except UsageError as exc:
        return exc.exit_status, None, f"{capsys.readouterr().err}{exc}"
    return 0, args, ""


def test_the_parsers_have_the_numeric_options_this_test_is_about():
    found = {f"{p} {a.option_strings[-1]}".strip() for p, a in (n.values for n in NUMERIC)}
    assert {"status --timeout", "bench compare --threshold", "telemetry --period"} <= found
    assert {"bench --ladder", "bench --level-timeout", "tune run --budget"} <= found


@pytest.mark.parametrize(("path", "parser"), all_parsers().items(), ids=lambda x: str(x))
def test_no_option_takes_an_unchecked_number(path, parser):
    for action in options(parser):
        assert action.type not in (int, float), (
            f"`glm5svc {path} {action.option_strings[-1]}` uses a bare {action.type.__name__}: "
            "declare it with glm5svc.cli_options.add_number so its range is checked"
        )
        if action.type is None and action.nargs != 0:
            assert not isinstance(action.default, int | float), (path, action.option_strings)


@pytest.mark.parametrize(("path", "action"), NUMERIC)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "NaN", "x", ""])
def test_a_numeric_option_refuses_what_is_not_a_finite_number(path, action, value, capsys):
    flag = action.option_strings[-1]
    code, _, err = parse([*path.split(), f"{flag}={value}"], capsys)
    assert code == 2
    assert flag in err and "is not allowed: give" in err and "for example" in err


@pytest.mark.parametrize(("path", "action"), NUMERIC)
def test_a_numeric_option_states_a_floor_and_refuses_below_it(path, action, capsys):
    number: Number = numeric_type(action)
    low = number.range.low
    assert low is not None and low >= 0, "every numeric option has a floor of 0 or more"
    for below in ([low] if number.range.low_open else []) + [low - 1, -1, -1e-9]:
        code, _, err = parse([*path.split(), f"{action.option_strings[-1]}={below}"], capsys)
        assert code == 2 and action.option_strings[-1] in err, below


@pytest.mark.parametrize(("path", "action"), NUMERIC)
def test_the_example_a_refusal_gives_is_accepted(path, action, capsys):
    number: Number = numeric_type(action)
    flag = action.option_strings[-1]
    _, _, err = parse([*path.split(), f"{flag}=nan"], capsys)
    example = err.rsplit("(for example ", 1)[1].split(")")[0]
    code, args, _ = parse([*path.split(), *positionals(path), f"{flag}={example}"], capsys)
    assert code == 0, err
    value = getattr(args, action.dest)
    items = [n for part in value for n in part] if action.nargs else [value]
    assert items and all(number.range.contains(item) for item in items)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["status", "--timeout", "-1"], "--timeout"),
        (["status", "--timeout", "0"], "--timeout"),
        (["bench", "compare", "a", "b", "--threshold", "-50", "--fail-on-regression"],
         "--threshold"),
        (["bench", "compare", "a", "b", "--threshold", "nan"], "--threshold"),
        (["telemetry", "--period", "-1"], "--period"),
        (["telemetry", "--period", "0.001"], "--period"),
        (["bench", "--ladder", "64,0"], "--ladder"),
        (["tune", "run", "--trial-timeout", "0s"], "--trial-timeout"),
    ],
)  # fmt: skip
def test_the_reported_values_are_refused_before_anything_runs(argv, flag, capsys):
    code, _, err = parse(argv, capsys)
    assert code == 2
    assert f"argument {flag}" in err


def test_config_keys_give_the_options_their_range_and_default(capsys):
    from glm5svc.config import Config

    code, args, _ = parse(["telemetry", "--period", "0.05"], capsys)
    assert code == 0 and args.period == 0.05
    assert parse(["telemetry", "--period", "0.049"], capsys)[0] == 2  # the config's floor
    help_text = build_parser().format_help()  # the top level still parses
    assert "COMMAND" in help_text
    bench_help = subparsers_of(build_parser())["bench"].format_help()
    assert f"benchmark.input_len, {Config().benchmark.input_len}" in bench_help


def test_bench_options_override_the_plan_fields_of_the_same_name(capsys):
    from dataclasses import fields

    from glm5svc.bench.plan import BenchPlan

    code, args, _ = parse(
        ["bench", "--ladder", "8,16", "32", "--input-len", "7", "--level-timeout", "9"], capsys
    )
    assert code == 0
    given = {f.name for f in fields(BenchPlan) if getattr(args, f.name, None) is not None}
    assert given == {"ladder", "input_len", "level_timeout_s"}
    assert args.ladder == [[8, 16], [32]] and args.level_timeout_s == 9.0
