"""The import layers of docs/architecture.md hold, nothing imports in a cycle, and no
module of the package hides an import in a function (except the CLI's sub-commands)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# A sub-command module is imported to build `glm5svc --help`; it loads its implementation
# only when it runs, so that every other command starts fast.
LAZY_ALLOWED = REPO / "glm5svc" / "commands"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter with the contracts in pyproject.toml, on the packages under root."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )


def test_the_import_contracts_hold():
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_contracts_catch_an_upward_import(tmp_path):
    """Copy the packages, make errors.py (the lowest layer) import serve: must fail."""
    for package in ("glm5svc", "testkit", "bench", "tests"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("data"))
    errors = tmp_path / "glm5svc" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport glm5svc.serve.state  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "glm5svc.errors -> glm5svc.serve.state" in done.stdout


def find_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    imported = graph.find_modules_directly_imported_by(child)
                    work.append((child, iter(sorted(imported))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycles():
    graph = grimp.build_graph("glm5svc", "testkit", "bench", cache_dir=None)
    assert find_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert find_cycles(graph) == [["p.a", "p.b", "p.c"]]


def function_level_package_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            names = []
            if isinstance(inner, ast.Import):
                names = [alias.name for alias in inner.names]
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0:
                names = [inner.module or ""]
            elif isinstance(inner, ast.ImportFrom):
                names = ["(relative)"]
            found += [
                f"{path.name}:{inner.lineno} {name}"
                for name in names
                if name.split(".")[0] in ("glm5svc", "(relative)")
            ]
    return found


def test_no_package_import_inside_a_function():
    modules = [
        path
        for path in sorted((REPO / "glm5svc").rglob("*.py"))
        if LAZY_ALLOWED not in path.parents
    ]
    assert [hit for path in modules for hit in function_level_package_imports(path)] == []


def test_the_function_import_finder_finds_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import json\n\ndef f():\n    import os\n    from glm5svc import x\n")
    assert function_level_package_imports(module) == ["m.py:5 glm5svc"]


def test_the_architecture_document_shows_the_contract_s_layers():
    """Each layers contract is a table in docs/architecture.md: the package's under "Layers",
    a sub-package's under the heading that names it ("### Inside `preflight`")."""
    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layered = {
        c["containers"][0]: c["layers"] for c in contract["contracts"] if c["type"] == "layers"
    }
    text = (REPO / "docs" / "architecture.md").read_text()
    inside = re.split(r"^### Inside `(\w+)`.*$", text, flags=re.MULTILINE)
    sections = {"glm5svc": inside[0]}
    sections.update(
        {f"glm5svc.{name}": body for name, body in zip(inside[1::2], inside[2::2], strict=True)}
    )
    assert set(layered) == set(sections)
    for container, layers in layered.items():
        rows = re.findall(r"^\| \d+ \| (.+?) \| .+ \|$", sections[container], re.MULTILINE)
        shown = [" | ".join(re.findall(r"`([\w.]+)`", row)) for row in rows]
        assert shown == layers, container
