"""Values the roles and glm5svc both state are the same: limits, service defaults, argument specs.

Where Ansible cannot read glm5svc's value at run time (role defaults are plain YAML), the
copies are checked here against the one source: glm5svc.hostfacts.limits for the limits,
glm5svc.config for the service configuration.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from glm5svc.config import DEFAULT_CONFIG_PATH, Config
from glm5svc.hostfacts.limits import MEMLOCK, NOFILE

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


def role_defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}


def role_options(role: str) -> dict:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options: dict = {}
    for entry_point in specs["argument_specs"].values():
        options.update(entry_point.get("options") or {})
    return options


def test_container_limits_are_the_hostfacts_values_everywhere():
    options = role_options("glm5_host_lxc_resources")
    defaults = role_defaults("glm5_host_lxc_resources")
    for source in (defaults, {k: v.get("default") for k, v in options.items()}):
        assert source["glm5_host_lxc_resources_nofile"] == NOFILE
        assert source["glm5_host_lxc_resources_memlock"] == MEMLOCK


def test_no_other_copy_of_the_open_file_limit_in_glm5svc():
    found = subprocess.run(
        ["grep", "-rlI", "--exclude-dir=__pycache__", str(NOFILE), "glm5svc"],
        cwd=REPO, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    assert found == ["glm5svc/hostfacts/limits.py"]


# glm5_service's variables and the config key each one sets.
SERVICE_KEYS = {
    "glm5_service_model_path": ("model", "path"),
    "glm5_service_served_name": ("model", "served_name"),
    "glm5_service_host": ("server", "host"),
    "glm5_service_port": ("server", "port"),
    "glm5_service_api_key_file": ("server", "api_key_file"),
    "glm5_service_gpu_count": ("gpus", "expected_count"),
    "glm5_service_visible_devices": ("gpus", "visible_devices"),
    "glm5_service_nccl_p2p_level": ("gpus", "nccl_p2p_level"),
    "glm5_service_listen_port": ("service", "listen_port"),
}


def test_service_role_defaults_are_glm5svc_defaults():
    config = Config().model_dump(mode="json")
    defaults = role_defaults("glm5_service")
    options = role_options("glm5_service")
    inventory = yaml.safe_load(
        (REPO / "inventory/example/group_vars/glm5_containers.yml").read_text()
    )
    for variable, (section, key) in SERVICE_KEYS.items():
        assert defaults[variable] == config[section][key], variable
        assert options[variable].get("default") == config[section][key], variable
        # The example fleet serves its gateway over the network (with its vaulted key).
        served = variable == "glm5_service_host" and inventory.get(variable) == "0.0.0.0"
        if variable in inventory and "{{" not in str(inventory[variable]) and not served:
            assert inventory[variable] == config[section][key], variable
    assert defaults["glm5_service_config_path"] == str(DEFAULT_CONFIG_PATH)
    # server.profile is the one stack variable's default.
    assert role_defaults("glm5_stack")["glm5_stack_profile"] == config["server"]["profile"]
    # The venv whose python server.python names by default.
    venv = role_defaults("glm5_venv")["glm5_venv_path"]
    assert f"{venv}/bin/python" == config["server"]["python"]
    assert f"default('{venv}')" in defaults["glm5_service_venv_path"]


@pytest.mark.parametrize(
    "role", sorted(p.name for p in ROLES.iterdir() if (p / "defaults").is_dir())
)
def test_argument_specs_list_every_default_with_its_value(role):
    options = role_options(role)
    for variable, value in role_defaults(role).items():
        assert variable in options, f"{role}: {variable} missing from meta/argument_specs.yml"
        spec = options[variable]
        if "{{" in str(value) or spec.get("required"):
            continue  # templated defaults are described in words there
        assert spec.get("default") == value, f"{role}: {variable}"
