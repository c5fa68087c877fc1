"""Every exit status a command can give is in its --help and in docs/cli.md, from one table
(glm5svc/exit_codes.py): the codes each command module returns, defines or raises (its own
EXIT_* constants, `return <n>`, the exit_status of each glm5svc error it defines or imports)
are all in its command's table, and `telemetry --once` without an NVIDIA driver exits with
the 69 its help names."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from glm5svc.cli import COMMAND_MODULES, build_parser
from glm5svc.cli_options import subparsers_of
from glm5svc.errors import Glm5Error
from glm5svc.exit_codes import EXIT_CODES, codes_of, epilog

REPO = Path(__file__).resolve().parents[2]


def documented(command: str) -> set[int]:
    """The codes of the command and of each of its sub-commands."""
    names = [n for n in EXIT_CODES if n.split()[0] == command]
    return {code for name in names for code, _ in codes_of(name)}


# Commands whose status comes from the code they hand the work to.
DELEGATES = {
    "serve": ("glm5svc.serve.supervisor", "glm5svc.serve.diagnosis", "glm5svc.serve.service"),
    "provision": ("glm5svc.provision.runner",),
}


def returned(command: str) -> set[int]:
    """The exit statuses a command module (and the code it delegates to) can give."""
    found = set()
    for name in (f"glm5svc.commands.{command}", *DELEGATES.get(command, ())):
        found |= _codes_in(importlib.import_module(name))
    return found


def _codes_in(module) -> set[int]:
    tree = ast.parse(inspect.getsource(module))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant):
            if type(node.value.value) is int:
                found.add(node.value.value)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any(n.startswith("EXIT_") for n in names) and type(node.value.value) is int:
                found.add(node.value.value)
    for value in vars(module).values():
        if inspect.isclass(value) and issubclass(value, Glm5Error):
            found.add(value.exit_status)
    return found


@pytest.mark.parametrize("command", COMMAND_MODULES)
def test_every_code_a_command_gives_is_documented(command):
    given = returned(command)
    assert given, f"no exit status found in glm5svc/commands/{command}.py"
    assert given <= documented(command), (command, sorted(given - documented(command)))


def test_every_parser_ends_its_help_with_its_exit_statuses_and_cli_md_lists_them():
    cli_md = (REPO / "docs" / "cli.md").read_text()
    for name, parser in subparsers_of(build_parser()).items():
        table = name if name in EXIT_CODES else name.split()[0]
        assert parser.epilog == epilog(table), name
        section = cli_md.split(f"\n## glm5svc {name}\n", 1)[1].split("\n## ", 1)[0]
        for code, what in codes_of(table):
            assert f"| {code} | {what} |" in section, (name, code)


def test_telemetry_once_without_a_driver_exits_with_its_documented_status(tmp_path):
    config = tmp_path / "glm5.yaml"
    config.write_text("{}\n")
    done = subprocess.run(
        [sys.executable, "-m", "glm5svc", "telemetry", "--once"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO),
             "GLM5SVC_CONFIG": str(config), "LD_LIBRARY_PATH": str(tmp_path)},
    )  # fmt: skip
    if done.returncode == 0:
        pytest.skip("this machine has an NVIDIA driver and a GPU")
    assert done.returncode == 69, done.stderr
    assert 69 in documented("telemetry")
    helped = subprocess.run([sys.executable, "-m", "glm5svc", "telemetry", "--help"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert "69 NVML cannot be used" in " ".join(helped.stdout.split())
