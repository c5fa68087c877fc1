"""The custom modules pass Ansible's own checks: `ansible-doc` renders each one, and
`ansible-test sanity --test validate-modules` passes on them laid out as a collection.

validate-modules compares each module's DOCUMENTATION with the argument_spec the module really
builds (types, defaults, choices, required, elements, no_log), so the two cannot drift.
ansible-test fetches a pip bootstrap script from ci-files.testing.ansible.com, out of reach
here: the test puts a local one where ansible-test caches it (it installs pip from PyPI with
this venv's pip), under a HOME of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
MODULES = sorted([*REPO.glob("library/*.py"), *REPO.glob("roles/*/library/*.py")])
MODULE_UTILS = sorted([*REPO.glob("module_utils/*.py"), *REPO.glob("glm5svc/hostfacts/*.py")])
COLLECTION = ("glm5svc", "host")
# ansible-test's bootstrap for the pip it pins (ansible_test/_data/requirements: pip 24.2
# for ansible-core 2.19): it is run as `python get_pip.py <pip options> pip==X ...`.
LOCAL_BOOTSTRAP = """import subprocess, sys
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([{pip_python!r}, "-m", "pip", "--python", sys.executable, "install", *args])
"""


def doc_strings(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {
        name: match.group(1)
        for name in ("DOCUMENTATION", "EXAMPLES", "RETURN")
        for match in [re.search(rf'^{name} = r"""(.*?)"""', text, re.S | re.M)]
        if match
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_docs_are_yaml_and_ansible_doc_renders_them(path):
    docs = doc_strings(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    assert parsed["DOCUMENTATION"]["module"] == path.stem
    assert any(path.stem in task for task in parsed["EXAMPLES"]), "EXAMPLES use the module"
    env = dict(
        os.environ,
        ANSIBLE_LIBRARY=str(path.parent),
        ANSIBLE_MODULE_UTILS=f"{REPO / 'glm5svc' / 'hostfacts'}:{REPO / 'module_utils'}",
    )
    done = subprocess.run(
        [str(VENV_BIN / "ansible-doc"), "-t", "module", path.stem],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "OPTIONS" in done.stdout and "RETURN VALUES" in done.stdout, done.stdout[-2000:]


def lay_out_collection(root: Path) -> Path:
    """library/ and module_utils/ as ansible_collections/glm5svc/host (imports rewritten)."""
    base = root / "ansible_collections" / COLLECTION[0] / COLLECTION[1]
    modules, utils = base / "plugins" / "modules", base / "plugins" / "module_utils"
    modules.mkdir(parents=True)
    utils.mkdir(parents=True)
    names = [path.stem for path in MODULE_UTILS if path.stem != "__init__"]
    prefix = "ansible_collections.{}.{}.plugins.module_utils.".format(*COLLECTION)
    for source, target in [*((p, modules) for p in MODULES), *((p, utils) for p in MODULE_UTILS)]:
        if source.stem == "__init__":
            continue
        text = source.read_text()
        for name in names:
            text = re.sub(rf"\bansible\.module_utils\.{name}\b", prefix + name, text)
        (target / source.name).write_text(text)
    (base / "galaxy.yml").write_text(
        yaml.safe_dump({"namespace": COLLECTION[0], "name": COLLECTION[1], "version": "1.0.0",
                        "readme": "README.md", "authors": ["glm5svc contributors"]})
    )  # fmt: skip
    (base / "README.md").write_text("glm5svc's modules, laid out for ansible-test.\n")
    # The project is Apache-2.0, not GPLv3 (the one check of a license header).
    ignores = base / "tests" / "sanity" / "ignore-2.19.txt"
    ignores.parent.mkdir(parents=True)
    check = "validate-modules:missing-gplv3-license"
    ignores.write_text("".join(f"plugins/modules/{p.name} {check}\n" for p in MODULES))
    subprocess.run(["git", "init", "-q", str(base)], check=True)
    subprocess.run(["git", "-C", str(base), "add", "-A"], check=True)
    return base


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="ansible-test lists the files with git")
@pytest.mark.timeout(600)
def test_ansible_test_validate_modules_passes(tmp_path):
    base = lay_out_collection(tmp_path / "collections")
    home = tmp_path / "home"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True)
    bootstrap = LOCAL_BOOTSTRAP.format(pip_python=sys.executable)
    for version in ("24_2",):
        (cache / f"get_pip_{version}.py").write_text(bootstrap)
    env = dict(os.environ, HOME=str(home), PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    done = subprocess.run(
        [str(VENV_BIN / "ansible-test"), "sanity", "--test", "validate-modules",
         "--python", python],
        cwd=base, capture_output=True, text=True, env=env, timeout=540,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert "Download failed" not in output, output[-3000:]
    assert done.returncode == 0, "\n".join(line for line in output.splitlines() if "ERROR" in line)
    assert 'Running sanity test "validate-modules"' in output
