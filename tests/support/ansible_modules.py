"""Import this repository's Ansible modules in pytest, with their module_utils resolved.

ansible.cfg's `module_utils = glm5svc/hostfacts` makes `ansible.module_utils.<name>` the
file glm5svc/hostfacts/<name>.py; here the same modules are registered under those names,
so a module loaded by path imports exactly the code glm5svc imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

import glm5svc.hostfacts

REPO = Path(__file__).resolve().parents[2]


def _register_module_utils() -> None:
    for info in pkgutil.iter_modules(glm5svc.hostfacts.__path__):
        shared = importlib.import_module(f"glm5svc.hostfacts.{info.name}")
        sys.modules.setdefault(f"ansible.module_utils.{info.name}", shared)


def load_module(relative_path: str):
    """The module at REPO/relative_path (e.g. library/glm5_gpu_numa_facts.py), imported."""
    _register_module_utils()
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
