"""Property-based: any command line, per command, is answered with a documented exit status
and never a traceback. The options and values are drawn from each command's own parser, so
a new option is covered without touching this file.

Commands that only read (no GPU needed, no root, nothing started or changed) run in full
through glm5svc.cli.main; the others (serve, bench, tune run and apply, provision, patch
apply and revert, telemetry) are parsed only, which is where their options are checked.
"""

from __future__ import annotations

import argparse
import os
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm5svc.cli import UsageError, build_parser, main
from glm5svc.cli_options import Number, numeric_type, subparsers_of

PARSER = build_parser()
COMMANDS = {"": PARSER, **subparsers_of(PARSER)}
# 0 done, 1 failed/not ready, 2 usage, 3 unreachable/regression, 4 not a glm5svc status,
# 69 no NVML, 75 port held, 78 bad configuration or option (glm5svc.errors, the commands).
DOCUMENTED_EXITS = {0, 1, 2, 3, 4, 69, 75, 78}
RUN_IN_FULL = {
    *("validate", "command", "unit", "status", "preflight"),
    *("bench compare", "tune show", "patch status", "patch list", "patch diff"),
}
# "\udcff": a byte that is not UTF-8, as Python hands it over in sys.argv (surrogateescape).
VALUES = ["nan", "inf", "-inf", "-1", "0", "1", "0.5", "1e400", "64,256", "4h", "x", "", "--"]
VALUES += ["\udcff", "/tmp/\udcff"]
# Numbers int() would take (underscores, spaces, other scripts' digits) and broken URLs.
VALUES += ["1_000", " 8", "\u0668", "\uff11\uff10", "http://[::1", "http://h:99999", "ftp://x"]
# Real argv has no NUL byte (execve's strings end at one).
TEXT = st.text(st.characters(blacklist_characters="\0"), max_size=8)
IGNORED = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)  # noqa: SLF001


def fragments(parser: argparse.ArgumentParser):
    """Mostly well-formed: some of the parser's options, each with a value that probes
    numbers (or any text) where it takes one, then its positionals; else tokens in any order."""
    actions = [a for a in parser._actions if not isinstance(a, IGNORED)]  # noqa: SLF001
    options = [a for a in actions if a.option_strings]
    positionals = [a for a in actions if not a.option_strings]
    value = st.sampled_from(VALUES) | TEXT

    def tokens(action: argparse.Action):
        flag = st.sampled_from(action.option_strings)
        if action.nargs == 0:
            return st.builds(lambda f: [f], flag)
        given = numbers(numeric_type(action)) | value if numeric_type(action) else value
        return st.builds(lambda f, v: [f, v], flag, given) | st.builds(
            lambda f, v: [f"{f}={v}"], flag, given
        )

    chosen = st.lists(st.sampled_from(options), max_size=3) if options else st.just([])
    well_formed = st.builds(
        lambda parts, rest: [t for part in parts for t in part] + list(rest),
        chosen.flatmap(lambda acts: st.tuples(*[tokens(a) for a in acts])),
        st.tuples(*[value for _ in positionals]),
    )
    flags = [f for a in options for f in a.option_strings]
    loose = st.lists(st.sampled_from(flags) | value if flags else value, max_size=5)
    return st.one_of(well_formed, well_formed, loose)


def numbers(number: Number):
    """Numbers around and inside the option's range, written as a user might."""
    low = number.range.low or 0
    high = min(number.range.high or 1e6, 1e6)
    inside = st.floats(low, high) if number.kind is float else st.integers(int(low), int(high))
    return (inside | st.floats() | st.integers()).map(str)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def no_gpu_config(tmp_path_factory):
    """A configuration whose listener nobody holds, a missing interpreter and a temp results dir."""
    root = tmp_path_factory.mktemp("fuzz")
    path = root / "glm5.yaml"
    path.write_text(
        f"model: {{path: {root / 'model'}}}\n"
        f"server: {{host: 127.0.0.1, python: {root / 'no-python'}}}\n"
        f"service: {{listen_port: {free_port()}, results_dir: {root / 'results'}}}\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GLM5SVC_CONFIG", str(path))
        patch.chdir(root)
        yield path


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: p or "glm5svc")
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_command_line_gets_a_documented_exit_and_no_traceback(no_gpu_config, path, data):
    argv = [*path.split(), *data.draw(fragments(COMMANDS[path]), label="argv")]
    if path not in RUN_IN_FULL:
        try:
            PARSER.parse_args(argv)
        except UsageError as exc:
            assert exc.exit_status == 2 and str(exc), argv
        except SystemExit as exc:  # --help, --version
            assert exc.code == 0, argv
        return
    assert os.environ["GLM5SVC_CONFIG"] == str(no_gpu_config)
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code in DOCUMENTED_EXITS, (argv, code)


RUN_NUMERIC = [
    pytest.param(path, action, id=f"{path} {action.option_strings[-1]}")
    for path in sorted(RUN_IN_FULL)
    for action in COMMANDS[path]._actions  # noqa: SLF001
    if numeric_type(action)
]


@pytest.mark.parametrize(("path", "action"), RUN_NUMERIC)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_number_an_option_takes_runs_to_a_documented_exit(no_gpu_config, path, action, data):
    value = data.draw(numbers(numeric_type(action)), label="value")
    positionals = ["x" for a in COMMANDS[path]._actions if not a.option_strings]  # noqa: SLF001
    argv = [*path.split(), *positionals, f"{action.option_strings[-1]}={value}"]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code in DOCUMENTED_EXITS, (argv, code)
