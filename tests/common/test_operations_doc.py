"""Every command line of docs/operations.md and the README is one glm5svc reads: each
`glm5svc ...` (in a fenced block or inline) is parsed by glm5svc's own parser, in-process,
each `ansible-playbook ...` as `glm5svc provision ...` with the same options (the page says
provision takes them), and what a `glm5svc provision` line passes on by ansible-playbook's
own parser. An unknown command or option, or a value the option refuses,
fails here. A synopsis (`[--budget 8h] [... | --request-file FILE]`) has each option it
names checked against its command."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from glm5svc.cli import UsageError, build_parser
from glm5svc.cli_options import subparsers_of
from glm5svc.commands.provision import ansible_arguments, chosen_playbook

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "docs" / "operations.md", REPO / "README.md"]
PROGRAMS = ("glm5svc", "ansible-playbook")
FENCE = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.M | re.S)
INLINE = re.compile(r"`([^`]+)`")
PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def synopsis(line: str) -> bool:
    """A usage synopsis (`[--budget 8h]`, `A | B`, `...`) outside quoted values."""
    return bool(re.search(r"[\[|]|\.\.\.", QUOTED.sub("", line)))


def command_lines(text: str) -> list[str]:
    """The shell lines of the fenced blocks (continuations joined, comments dropped) and the
    inline code spans (line breaks inside them joined) that run one of PROGRAMS."""
    found = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            found.append(line.split("  #")[0].strip())
    for span in INLINE.findall(FENCE.sub("", text)):
        found.append(" ".join(span.split()))
    lines = []
    for line in found:
        words = line.split(" ")
        start = _program_at(words)
        if start is None or any(w.endswith(":") for w in words[start : start + 2]):
            continue  # no program, or what one prints (`glm5svc bench: benchmarking ...`)
        lines.append(" ".join(words[start:]))  # from the program on: `pct exec 200 -- ...`
    return lines


def _program_at(words: list[str]) -> int | None:
    """Where glm5svc or ansible-playbook starts in a line's words (`.venv/bin/glm5svc`)."""
    for index, word in enumerate(words):
        if word.rsplit("/", 1)[-1] in PROGRAMS:
            return index
    return None


def glm5svc_argv(line: str) -> list[str]:
    """The line as glm5svc's argv: placeholders given a value, ansible-playbook's options
    given to `glm5svc provision`."""
    words = shlex.split(PLACEHOLDER.sub("x", line))
    program, argv = words[0].rsplit("/", 1)[-1], words[1:]
    return ["provision", *argv] if program == "ansible-playbook" else argv


LINES = sorted({line for page in PAGES for line in command_lines(page.read_text())})


def test_the_walk_finds_the_pages_commands():
    """What the walk must see (a walker that finds nothing passes vacuously)."""
    programs = {line.split()[0].rsplit("/", 1)[-1] for line in LINES}
    assert programs == {"glm5svc", "ansible-playbook"}
    nights = [line for line in LINES if line.startswith("glm5svc provision") and "night" in line]
    assert nights and not any(synopsis(line) for line in nights)  # parsed, not skimmed
    assert any("--fail-on-regression" in line for line in LINES)
    assert len(LINES) > 30


def ansible_problem(argv: list[str]) -> str | None:
    """What ansible-playbook's own parser says of its options (in-process, no run)."""
    playbook_cli = pytest.importorskip("ansible.cli.playbook")
    cli = playbook_cli.PlaybookCLI(["ansible-playbook", *argv])
    cli.init_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            cli.parser.parse_args(argv)
    except SystemExit:
        return "ansible-playbook: " + errors.getvalue().strip().splitlines()[-1]
    return None


def problem(line: str) -> str | None:
    """What glm5svc's parser says of a command line; None when it reads it. A span that
    only names a command (`glm5svc patch`, `glm5svc tune apply`) needs the command to be."""
    argv = glm5svc_argv(line)
    if argv in ([], ["--version"], ["--help"]) or " ".join(argv) in subparsers_of(build_parser()):
        return None  # the program, argparse's own actions (which exit), a command's name
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "tune_args", None):  # night's `-- TUNE OPTIONS` go to `tune run`
            build_parser().parse_args(["tune", "run", *args.tune_args])
        for value in getattr(args, "extra_vars", None) or []:  # the night playbook's options
            options = _json(value).get("glm5_night_options")
            if isinstance(options, list):
                build_parser().parse_args(["night", "begin", *options])
    except UsageError as exc:
        return str(exc)
    if argv[0] == "provision":  # what it passes, ansible-playbook must take as it is
        given = ["-i", args.inventory] if args.inventory else []
        return ansible_problem([*given, *ansible_arguments(args), chosen_playbook(args)])
    return None


def _json(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def synopsis_problem(line: str) -> str | None:
    """An option a synopsis names that its command (or `tune run`, after `--`) lacks, or an
    alternative (`tune run|apply|show`, `completion bash|zsh`) that is neither a sub-command
    nor a value its command takes."""
    line = line.replace("\\|", "|")  # a Markdown table's escaped bar
    words = glm5svc_argv(re.sub(r"[\[\]]", " ", line).replace("...", " "))
    head, _, tune = " ".join(words).partition(" -- ")
    bare = [w for w in head.split() if not w.startswith("-")]
    commands = subparsers_of(build_parser())
    path = [w.split("|")[0] for w in bare]
    while path and " ".join(path) not in commands:
        path.pop()  # the words after the command are values (8h, N, FILE)
    if not path:
        return "no such command"
    for word in bare[len(path) - 1 : len(path) + 1]:  # the last command word, or the next
        if "|" not in word:
            continue
        parent = path[: bare.index(word)]
        for alternative in word.split("|"):
            as_command = " ".join([*parent, alternative]) in commands
            choices = {c for a in commands[" ".join(parent)]._actions for c in a.choices or ()}  # noqa: SLF001
            if not as_command and alternative not in choices:
                return f"{' '.join(parent)} has no {alternative}"
    for command, options in ((" ".join(path), head.replace("|", " ")), ("tune run", tune)):
        known = {flag for action in commands[command]._actions for flag in action.option_strings}  # noqa: SLF001
        for option in re.findall(r"(?<!\S)--?[a-z][a-z0-9-]*", options):
            if option not in known:
                return f"{command} has no {option}"
    return None


@pytest.mark.parametrize("line", LINES)
def test_each_command_line_is_one_glm5svc_reads(line):
    said = synopsis_problem(line) if synopsis(line) else problem(line)
    assert said is None, f"docs/operations.md or README.md: `{line}`: {said}"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("`glm5svc night begin --nonsense 1`", "unrecognized arguments: --nonsense"),
        ("`glm5svc nightly`", "invalid choice: 'nightly'"),
        ("`glm5svc tune applied`", "invalid choice: 'applied'"),
        ("`ansible-playbook -i x site.yml --forks=5`", "unrecognized arguments: --forks=5"),
        ("`glm5svc night begin --budget 0`", "--budget"),
        ("`glm5svc provision -J --vault-password-file F`", "not allowed with argument"),
        ("`glm5svc tune run --resume`", "expected one argument"),
        ("""`glm5svc provision -e '{"glm5_night_options": ["--budget", "0"]}'`""", "--budget"),
        ("`glm5svc night plan [--budget 8h] [-- --spaces F]`", "tune run has no --spaces"),
        ("`glm5svc night plan [--budgets 8h]`", "night plan has no --budgets"),
        ("`glm5svc tune run\\|apply\\|shows`", "tune has no shows"),
        ("`glm5svc completion bash|fish`", "completion has no fish"),
        ("`glm5svc command [--explain|--jason]`", "command has no --jason"),
    ],
)
def test_a_mismatch_fails(line, said):
    [found] = command_lines(line)
    assert said in ((synopsis_problem if synopsis(found) else problem)(found) or "")


def test_ansible_playbooks_own_parser_is_asked():
    said = ansible_problem(["-i", "x", "--bogus", "site.yml"]) or ""
    assert "unrecognized arguments: --bogus" in said
    assert ansible_problem(["-i", "x", "-C", "-D", "-l", "a", "-J", "site.yml"]) is None
