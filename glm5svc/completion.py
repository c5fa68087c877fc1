"""Shell completion generated from the argparse parser: `glm5svc completion bash|zsh`.

The parser is walked once into tables (each command path's sub-commands, options, the
options that take a value and their choices, the positionals' choices); a small bash
function reads the words typed so far against them. zsh runs the same function through
its `bashcompinit`. Nothing is written by hand per command, so a new option completes as
soon as it is declared.

    eval "$(glm5svc completion bash)"   # or > /etc/bash_completion.d/glm5svc
    eval "$(glm5svc completion zsh)"    # in ~/.zshrc, after compinit
"""

from __future__ import annotations

import argparse
import shlex

SHELLS = ("bash", "zsh")

_FUNCTION = r"""
_glm5svc() {
    local cur prev path="glm5svc" word i skip=0
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        if ((skip)); then skip=0; continue; fi
        if [[ "$word" == -* ]]; then
            [[ "$word" != *=* && " ${_glm5svc_takes[$path]} " == *" $word "* ]] && skip=1
            continue
        fi
        if [[ " ${_glm5svc_commands[$path]} " == *" $word "* ]]; then
            path="$path $word"
        fi
    done
    if ((skip)); then
        local key="$path $prev"
        if [[ -n "${_glm5svc_choices[$key]+set}" ]]; then
            COMPREPLY=($(compgen -W "${_glm5svc_choices[$key]}" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "${_glm5svc_options[$path]}" -- "$cur"))
    elif [[ -n "${_glm5svc_commands[$path]}${_glm5svc_positionals[$path]}" ]]; then
        local words="${_glm5svc_commands[$path]} ${_glm5svc_positionals[$path]}"
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
}
complete -o filenames -F _glm5svc glm5svc
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` (one of SHELLS)."""
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}: one of {', '.join(SHELLS)}")
    tables = {"commands": {}, "options": {}, "takes": {}, "choices": {}, "positionals": {}}
    _walk(parser, "glm5svc", tables)
    lines = [f"# {parser.prog} {shell} completion, generated from its parser"]
    if shell == "zsh":
        lines = ["#compdef glm5svc", *lines, "autoload -U +X bashcompinit && bashcompinit"]
    for name, table in tables.items():
        lines.append(f"declare -gA _glm5svc_{name}=(")
        lines += [f"    [{shlex.quote(key)}]={shlex.quote(value)}" for key, value in table.items()]
        lines.append(")")
    return "\n".join(lines) + _FUNCTION


def _walk(parser: argparse.ArgumentParser, path: str, tables: dict[str, dict[str, str]]) -> None:
    options, takes, positionals, commands = [], [], [], []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands.append(name)
                _walk(sub, f"{path} {name}", tables)
        elif action.option_strings:
            options += action.option_strings
            if action.nargs != 0:
                takes += action.option_strings
                if action.choices:
                    for option in action.option_strings:
                        tables["choices"][f"{path} {option}"] = " ".join(map(str, action.choices))
        elif action.choices:
            positionals += map(str, action.choices)
    tables["commands"][path] = " ".join(commands)
    tables["options"][path] = " ".join(options)
    tables["takes"][path] = " ".join(takes)
    tables["positionals"][path] = " ".join(positionals)
