"""The command line: every sub-command registers; a chosen one loads alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from glm5svc.cli import (
    COMMAND_GROUPS,
    COMMAND_MODULES,
    DOCS_POINTER,
    PARSER_COMMANDS,
    build_parser,
    chosen_command,
    main,
)
from glm5svc.commands import status


def test_help_lists_every_command():
    text = build_parser().format_help()
    for name in COMMAND_MODULES:
        assert name in text


def test_help_groups_the_commands_by_task_and_points_to_the_docs():
    grouped = [name for names in COMMAND_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(COMMAND_MODULES + PARSER_COMMANDS)  # each exactly once
    lines = build_parser().format_help().splitlines()
    headings = [line[:-1] for line in lines if line.endswith(":") and line[:-1] in COMMAND_GROUPS]
    assert headings == ["deploy", "run", "measure", "tune", "night", "observe"]
    for task, names in COMMAND_GROUPS.items():
        start = lines.index(f"{task}:")
        listed = []
        for line in lines[start + 1 :]:
            if not line.strip():
                break
            if not line.startswith("   "):
                listed.append(line.split()[0])
        assert listed == names, task
    assert " ".join(DOCS_POINTER.split()) in " ".join(" ".join(lines).split())


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench", "--ladder", "64"], "bench"),
        (["--config", "command", "validate"], "validate"),  # a config file named "command"
        (["--config=/x.yaml", "preflight", "--json"], "preflight"),
        (["--help"], None),
        (["nonsense"], None),
    ],
)
def test_chosen_command(argv, expected):
    assert chosen_command(argv) == expected


def test_unknown_command_lists_the_real_ones():
    result = subprocess.run(
        [sys.executable, "-m", "glm5svc", "frobnicate"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr and "preflight" in result.stderr


@pytest.mark.parametrize("argv", [["unit", "--venv=--"], ["--config=--", "validate"]])
def test_a_double_dash_as_an_options_value_is_a_usage_error(argv, capsys):
    assert main(argv) == 2
    assert "expected a value, not '--'" in capsys.readouterr().err


def test_status_help_describes_the_command_and_each_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "the running service, from its /status" in said
    for code, meaning in ((0, "ready"), (status.EXIT_NOT_READY, "not ready"),
                          (status.EXIT_UNREACHABLE, "unreachable"),
                          (status.EXIT_UNKNOWN, "the answer is not a glm5svc status")):  # fmt: skip
        assert f"{code} {meaning}" in said
        assert said.count(f"{code} {meaning}") == 1, f"exit status {code} listed twice"
