"""Import this repository's Ansible modules in pytest, with their module_utils resolved.

ansible.cfg's `module_utils = glm5svc/hostfacts:module_utils` makes
`ansible.module_utils.<name>` the file glm5svc/hostfacts/<name>.py (or module_utils/<name>.py);
here the same files are registered under those names, so a module loaded by path imports
exactly the code glm5svc imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import glm5svc.hostfacts

REPO = Path(__file__).resolve().parents[2]


def register_module_utils() -> None:
    for info in pkgutil.iter_modules(glm5svc.hostfacts.__path__):
        shared = importlib.import_module(f"glm5svc.hostfacts.{info.name}")
        sys.modules.setdefault(f"ansible.module_utils.{info.name}", shared)
    for path in sorted((REPO / "module_utils").glob("*.py")):
        name = f"ansible.module_utils.{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)


def load_module(relative_path: str):
    """The module at REPO/relative_path (e.g. library/glm5_gpu_numa_facts.py), imported."""
    register_module_utils()
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BOOTSTRAP = (
    "import runpy, sys; from tests.support.ansible_modules import register_module_utils; "
    "register_module_utils(); sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_module(relative_path: str, params: dict, work: Path) -> dict:
    """Run a module as Ansible would (arguments in a file), in a child process; its result."""
    args = work / "module-args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_tmpdir": str(work), **params}}))
    done = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, str(REPO / relative_path), str(args)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError(
            f"no module result: {done.stdout[-2000:]} {done.stderr[-2000:]}"
        ) from None
