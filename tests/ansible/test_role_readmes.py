"""Each role README quotes its defaults as defaults/main.yml and meta/argument_specs.yml have them.

A quoted default is a table row `| `<variable>` | <default> | ...` or prose
"`<variable>` (default `<value>`)" / "`<variable>`, default `<value>`". The variable must be
one of the role's (a renamed one fails), and the quote must be the value: a YAML literal in
backticks equal to the default (`...tail` for the tail of a long string). A default that is a
template is quoted in words; every variable such a quote names must be one the template uses.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "README.md").is_file())
TABLE_ROW = re.compile(r"^\|\s*`(glm5_\w+)`\s*\|([^|]*)\|", re.MULTILINE)
PROSE = re.compile(r"`(glm5_\w+)`(?:,| \()\s*default:? `([^`]+)`")


def role_values(role: str) -> dict:
    """{variable: default}: argument_specs' defaults, then defaults/main.yml over them."""
    values: dict = {}
    specs = REPO / "roles" / role / "meta" / "argument_specs.yml"
    if specs.is_file():
        for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                values[name] = spec.get("default")
    defaults = REPO / "roles" / role / "defaults" / "main.yml"
    if defaults.is_file():
        values.update(yaml.safe_load(defaults.read_text()) or {})
    return values


def quotes(role: str) -> list[tuple[str, str]]:
    """(variable, the README's default cell or quoted value) in the README's order."""
    text = (REPO / "roles" / role / "README.md").read_text()
    found = [(name, cell.strip()) for name, cell in TABLE_ROW.findall(text)]
    found += [(name, f"`{value}`") for name, value in PROSE.findall(text)]
    return found


def mismatch(quoted: str, value: object) -> str | None:
    """Why the README's quote is not the default, or None."""
    if "{{" in str(value):
        named = re.findall(r"`(glm5_\w+)", quoted)
        missing = [name for name in named if name not in str(value)]
        return f"names {missing}, which the template {value!r} does not use" if missing else None
    literals = re.findall(r"`([^`]*)`", quoted)
    if not literals:
        return f"quotes no value (in backticks) for the default {value!r}"
    literal = literals[0]
    if literal.startswith("...") and isinstance(value, str):
        return None if value.endswith(literal[3:]) else f"{literal!r} is not the tail of {value!r}"
    try:
        parsed = yaml.safe_load(literal)
    except yaml.YAMLError:
        parsed = literal
    return None if parsed == value else f"quotes {literal!r}, the default is {value!r}"


@pytest.mark.parametrize("role", ROLES)
def test_readme_quotes_the_roles_defaults(role):
    values = role_values(role)
    problems = []
    for name, quoted in quotes(role):
        if name not in values:
            problems.append(f"{name}: no such variable in defaults/main.yml or argument_specs")
        elif (why := mismatch(quoted, values[name])) is not None:
            problems.append(f"{name}: {why}")
    assert not problems, f"roles/{role}/README.md:\n" + "\n".join(problems)


def test_the_check_sees_a_wrong_quote():
    assert mismatch('`"12.8"`', "12.8") is None
    assert mismatch('`"12.9"`', "12.8") is not None
    assert mismatch("`[iommu=pt]`", ["iommu=pt"]) is None
    assert mismatch("NVIDIA's two keys", {"debian12": ["A"]}) is not None
    assert mismatch("`.../cuda/redist`", "https://x/compute/cuda/redist") is None
    assert mismatch("`glm5_other_var` or 200", "{{ glm5_host_lxc_gpu_ctid }}") is not None
    assert sum(len(quotes(role)) for role in ROLES) > 50
