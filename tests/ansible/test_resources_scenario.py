"""glm5_host_lxc_resources on a real Debian system: `molecule test -s resources`.

Debian 13 by default, or as MOLECULE_DISTRO says (GLM5_MOLECULE_ALL_DISTROS=1: Debian 12 and
13, one test each).

Check mode, converge, idempotence, then molecule/resources/verify.yml: two container configs
line by line (mpN and raw mount entry, cores/memory, NUMA cpuset from a made-up sysfs,
rlimits) above an untouched snapshot section, and the raw mount proven read-only in a real
LXC container. Needs root and LXC (scripts/setup-dev.sh).
"""

from __future__ import annotations

import pytest

from tests.support.molecule_scenario import run_scenario, scenario_distros, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


@pytest.mark.timeout(600)
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
@pytest.mark.parametrize("distro", scenario_distros("trixie"))
def test_molecule_resources_scenario(distro):
    words = run_scenario(
        "resources",
        (
            "Compare each config line by line with the expected one",
            "Check the snapshot sections, the restart and the host directory",
            "Check read-only inside, the host's file visible, mounted ro",
        ),
        distro,
    )
    assert "idempotence: Executed: Successful" in words
