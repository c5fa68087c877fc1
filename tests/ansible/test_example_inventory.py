"""inventory/example carries only what a site decides: no value equal to a role's default.

A value restated in the inventory stays behind when the default changes, and a variable no
role reads (a renamed one) silently does nothing: both fail here. Defaults are the roles'
defaults/main.yml and the plays' own `vars:` (playbooks/*.yml).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventory" / "example"
# Set in the inventory without being a role's or play's variable: the connection, its
# glm5_pct plugin (connection_plugins/glm5_pct.py) and the vaulted secrets.
NOT_ROLE_VARIABLES = ("ansible_", "glm5_pct_", "vault_")


def defaults() -> dict:
    found: dict = {}
    for path in sorted(REPO.glob("roles/*/defaults/main.yml")):
        found.update(yaml.safe_load(path.read_text()) or {})
    for path in sorted(REPO.glob("playbooks/*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            found.update(play.get("vars") or {})
    return found


def inventory_values() -> list[tuple[str, str, object]]:
    """(where, variable, value) for every variable inventory/example sets."""
    values = []
    for path in sorted((INVENTORY / "group_vars").glob("*.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            values.append((f"group_vars/{path.name}", name, value))

    def walk(group: str, node: dict) -> None:
        for name, value in (node.get("vars") or {}).items():
            values.append((f"hosts.yml group {group}", name, value))
        for host, host_vars in (node.get("hosts") or {}).items():
            for name, value in (host_vars or {}).items():
                values.append((f"hosts.yml host {host}", name, value))
        for child, child_node in (node.get("children") or {}).items():
            walk(child, child_node or {})

    for group, node in yaml.safe_load((INVENTORY / "hosts.yml").read_text()).items():
        walk(group, node)
    return values


def read_by_a_role(name: str) -> bool:
    """A variable a role reads with no default (a replica's address, read by the gateway)."""
    return any(name in path.read_text() for path in REPO.glob("roles/*/tasks/*.yml"))


VALUES = inventory_values()


@pytest.mark.parametrize(("where", "name", "value"), VALUES, ids=[f"{w}:{n}" for w, n, _ in VALUES])
def test_inventory_value_is_no_role_default(where, name, value):
    known = defaults()
    if name.startswith(NOT_ROLE_VARIABLES) or (name not in known and read_by_a_role(name)):
        return
    assert name in known, f"{where}: {name} is no role's or play's variable (renamed? a typo?)"
    assert value != known[name], (
        f"{where}: {name}: {value!r} is the default; delete it from the inventory "
        f"(the role's README lists it)"
    )


def test_the_check_would_see_a_restated_default():
    """The comparison itself: a default restated anywhere in the example is caught."""
    known = defaults()
    assert known["glm5_service_port"] == 30000 and known["glm5_stack_profile"] == "cu128"
    assert len(VALUES) >= 10 and {"glm5_service_api_key", "glm5_gateway_api_key"} <= {
        name for _, name, _ in VALUES
    }
