"""`glm5svc completion bash|zsh`: generated from the parser, and it completes in bash."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

import pytest

from glm5svc.cli import build_parser
from glm5svc.completion import script

COMPLETE = """
source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
_glm5svc
printf '%s\\n' "${COMPREPLY[@]}"
"""


def completions(words: list[str], shell_script: str, tmp_path) -> list[str]:
    path = tmp_path / "completion.sh"
    path.write_text(shell_script)
    done = subprocess.run(
        ["bash", "-c", COMPLETE, "complete", str(path), *words],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    return done.stdout.split()


@pytest.fixture(scope="module")
def bash_script() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "glm5svc", "completion", "bash"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["glm5svc", "st"], ["status"]),
        (["glm5svc", "--config", "/etc/glm5/glm5.yaml", "tune", ""], ["apply", "run", "show"]),
        (["glm5svc", "status", "--fl"], ["--fleet"]),
        (["glm5svc", "completion", ""], ["bash", "zsh"]),
        (["glm5svc", "bench", "compare", "--fail-on-"], ["--fail-on-regression"]),
    ],
)
def test_bash_completes_commands_options_and_choices(bash_script, tmp_path, words, expected):
    assert sorted(completions(words, bash_script, tmp_path)) == expected


def test_an_option_taking_a_value_completes_files(bash_script, tmp_path):
    (tmp_path / "glm5.yaml").write_text("{}\n")
    assert completions(["glm5svc", "--config", "glm5"], bash_script, tmp_path) == ["glm5.yaml"]


def test_every_command_and_option_of_the_parser_is_offered(tmp_path):
    parser = build_parser()
    text = script(parser, "bash")
    for action in parser._subparsers._group_actions:
        for name, sub in action.choices.items():
            assert f"['glm5svc {name}']=" in text or f"[glm5svc\\ {name}]=" in text
            offered = completions(["glm5svc", name, "--"], text, tmp_path)
            declared = {o for a in sub._actions for o in a.option_strings if o.startswith("--")}
            assert declared <= set(offered), name


def test_a_new_option_completes_once_declared(tmp_path):
    parser = argparse.ArgumentParser(prog="glm5svc")
    parser.add_subparsers().add_parser("serve").add_argument("--brand-new", choices=["a", "b"])
    text = script(parser, "bash")
    assert completions(["glm5svc", "serve", "--br"], text, tmp_path) == ["--brand-new"]
    assert completions(["glm5svc", "serve", "--brand-new", ""], text, tmp_path) == ["a", "b"]


def test_an_unknown_shell_is_refused():
    with pytest.raises(ValueError, match="one of bash, zsh"):
        script(build_parser(), "fish")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here")
def test_zsh_loads_the_script(tmp_path):
    path = tmp_path / "_glm5svc"
    path.write_text(script(build_parser(), "zsh"))
    done = subprocess.run(
        ["zsh", "-c", f"autoload -U compinit && compinit -u && source {path} && echo loaded"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.stdout.strip() == "loaded", done.stderr


def test_the_zsh_script_is_the_bash_one_through_bashcompinit():
    text = script(build_parser(), "zsh")
    assert text.startswith("#compdef glm5svc\n") and "bashcompinit" in text
    assert text.endswith(script(build_parser(), "bash").split("\n", 1)[1])
