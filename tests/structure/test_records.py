"""What one layer hands another is a glm5svc.records record, never a dict read by key.

A record's field that no module but records writes as a dict key (a dict literal, an
item assignment, `dict(key=...)`) can only be read by key from a record's dict: no module
outside records may do so (`x["ready_reason"]`, `x.get("failed_runs_in_a_row")`,
`"drain" in x`). And every record has such a field: no second writer builds its dict.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from glm5svc import records

PACKAGE = Path(records.__file__).parent
RECORDS_FILE = Path(records.__file__)


def record_classes() -> list[type]:
    return [
        obj
        for obj in vars(records).values()
        if inspect.isclass(obj)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == records.__name__
    ]


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def written_keys(tree: ast.AST) -> set[str]:
    """Keys a module writes into dicts."""
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys |= {k for k in map(_constant, filter(None, node.keys)) if k}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            keys |= {_constant(node.slice)} - {None}
        elif isinstance(node, ast.Call):
            func = node.func
            named = isinstance(func, ast.Name) and func.id == "dict"
            method = isinstance(func, ast.Attribute) and func.attr in ("update", "setdefault")
            if named or method:
                keys |= {k.arg for k in node.keywords if k.arg}
            if method and func.attr == "setdefault" and node.args:
                keys |= {_constant(node.args[0])} - {None}
    return keys


def keys_read(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) for each read by key: x["k"], x.get("k"), x.pop("k"), "k" in x."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = _constant(node.slice)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and node.args
        ):
            key = _constant(node.args[0])
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn) for op in node.ops
        ):
            key = _constant(node.left)
        if key is not None:
            found.append((node.lineno, key))
    return found


def package_trees() -> dict[Path, ast.AST]:
    return {
        path: ast.parse(path.read_text(encoding="utf-8"), str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != RECORDS_FILE
    }


def record_only_keys(trees: dict[Path, ast.AST]) -> dict[type, set[str]]:
    written = set().union(*(written_keys(tree) for tree in trees.values()))
    return {cls: {f.name for f in dataclasses.fields(cls)} - written for cls in record_classes()}


def by_key_reads(trees: dict[Path, ast.AST], keys: set[str]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}: reads '{key}' by key"
        for path, tree in trees.items()
        for line, key in keys_read(tree)
        if key in keys
    ]


def test_no_module_outside_records_reads_a_records_dict_by_key():
    trees = package_trees()
    keys = set().union(*record_only_keys(trees).values())
    assert {"failed_runs_in_a_row", "ready_reason", "in_flight_at_start"} <= keys
    offences = by_key_reads(trees, keys)
    assert not offences, "use the glm5svc.records record instead:\n" + "\n".join(offences)


def test_every_record_has_a_field_no_other_module_writes():
    unique = record_only_keys(package_trees())
    shared = [cls.__name__ for cls, keys in unique.items() if not keys]
    assert not shared, f"another module builds these records' dicts by hand: {shared}"


@pytest.mark.parametrize(
    "source",
    [
        'status["ready_reason"]',
        'record.get("failed_runs_in_a_row", 0)',
        '"drain" in document',
        "document.pop('previous_run')",
    ],
)
def test_the_check_finds_a_read_by_key(source):
    tree = ast.parse(source)
    assert by_key_reads(
        {PACKAGE / "planted.py": tree},
        {"ready_reason", "failed_runs_in_a_row", "drain", "previous_run"},
    )


def test_a_hand_built_dict_of_a_record_counts_as_a_second_writer():
    tree = ast.parse('report = {"failed_runs_in_a_row": 0, "ended_at": "now"}')
    assert {"failed_runs_in_a_row", "ended_at"} <= written_keys(tree)
