"""Every flag a message or hint in glm5svc/ names exists on the command that shows it.

A string that names its command (`glm5svc bench --results-dir`, "tune's --run-dir") is
checked against that command's parser; any other string against every command that can
show it: each command whose modules (imported anywhere in them, transitively) hold it.
Flags of other programs (sglang's, pip's, ansible's) are no glm5svc flag and pass, unless
the string puts them after `glm5svc <command>`.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
from pathlib import Path

import glm5svc
from glm5svc.cli import COMMAND_MODULES, build_parser

PACKAGE = Path(glm5svc.__file__).parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND = re.compile(
    r"\bglm5svc (" + "|".join(COMMAND_MODULES) + r")\b|\b(" + "|".join(COMMAND_MODULES) + r")'s\b"
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


@functools.cache
def _imports(name: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    parents = {".".join(m.split(".")[:i]) for m in found for i in range(2, m.count(".") + 1)}
    return (found | parents) & MODULES.keys()


def _reach(command: str) -> set[str]:
    seen: set[str] = set()
    todo = [f"glm5svc.commands.{command}"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += _imports(name)
    return seen


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = set()
    for action in parser._actions:
        flags |= {option for option in action.option_strings if option.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _flags(sub)
    return flags


@functools.cache
def _command_flags() -> dict[str, set[str]]:
    parser = build_parser()
    top = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: _flags(subparsers.choices[name]) | top for name in COMMAND_MODULES}


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            text = node.value
        else:
            continue
        if FLAG.search(text) and not FLAG.fullmatch(text):  # a lone flag is argv, not a hint
            found.append((node.lineno, text))
    return found


def wrong_flags(text: str, shown_by: set[str], flags: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(command, flag) for each flag the text names that its command lacks."""
    known = set().union(*flags.values())
    wrong = []
    for match in FLAG.finditer(text):
        flag = match.group()
        named = [m.group(1) or m.group(2) for m in COMMAND.finditer(text, 0, match.start())]
        if named:
            if flag not in flags[named[-1]]:
                wrong.append((named[-1], flag))
        elif flag in known:
            wrong += [(command, flag) for command in sorted(shown_by) if flag not in flags[command]]
    return wrong


def test_every_hint_names_a_flag_its_command_has():
    flags = _command_flags()
    reach = {command: _reach(command) for command in COMMAND_MODULES}
    wrong, checked = [], 0
    for name, path in sorted(MODULES.items()):
        shown_by = {command for command in COMMAND_MODULES if name in reach[command]}
        for line, text in _strings(path):
            checked += 1
            wrong += [
                f"{path.relative_to(PACKAGE.parent)}:{line}: {flag} is no flag of "
                f"`glm5svc {command}` ({text[:70]!r})"
                for command, flag in wrong_flags(text, shown_by, flags)
            ]
    assert checked > 50  # the scan sees the messages
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_a_flag_another_command_owns():
    flags = _command_flags()
    hint = "no Python interpreter: point elsewhere with --python PATH / --site-packages DIR"
    assert ("preflight", "--python") in wrong_flags(hint, {"preflight", "patch"}, flags)
    assert ("preflight", "--site-packages") in wrong_flags(hint, {"preflight"}, flags)
    assert wrong_flags(hint, {"patch"}, flags) == []
    assert wrong_flags("glm5svc bench --no-such-flag", set(), flags) == [
        ("bench", "--no-such-flag")
    ]
    assert wrong_flags("(glm5svc bench --results-dir)", {"serve"}, flags) == []
    assert wrong_flags("sglang's --tp-size", {"command"}, flags) == []
