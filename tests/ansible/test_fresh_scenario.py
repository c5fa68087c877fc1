"""site.yml on a fresh stand-in Proxmox host, then the driver upgrade: `molecule test -s fresh`.

One platform (MOLECULE_DISTRO, trixie by default). First the preconditions: site.yml without
the vaulted API key, then without the container template, each stops before anything changes
and names its fix (the fix for the template, `pveam download`, is then run). The first
site.yml run ends with REBOOT REQUIRED and no failed task (nouveau holds a GPU, the driver is
new, container 200 is created);
the stand-in system restarts; the second run writes the GPU lines, starts the container and runs
the whole container play in it through the host (its user-space driver at the host's release,
the venv, glm5.service with the test engine: active as glm5, /readyz 200). The upgrade play stops
before any drain when the container's repository lacks the release, rescues a DKMS build failure
back to the old release with glm5.service running, moves host and container to the new release
(glm5.service ready again), and stops nothing when run again (molecule/fresh/converge.yml).
Verify finds the container running with its GPU lines, driver and glm5.service (ready), its /run
emptied by the restart (verify.yml). Needs root, LXC, mmdebstrap, gpg, dpkg-dev and PyPI (pip's
cache is kept).
"""

from __future__ import annotations

import pytest

from tests.support.molecule_scenario import run_scenario, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


@pytest.mark.timeout(1200)
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
def test_molecule_fresh_scenario():
    run_scenario(
        "fresh",
        (
            "Check the refusals (the key, then the template; each names its fix, nothing changed)",
            "Check the first run (REBOOT REQUIRED and why, no failed task, container created, "
            "no GPU lines yet)",
            "Check the second run (no reboot needed, GPU lines in, the container started, its "
            "driver in)",
            "Check glm5.service in container 200 (active, enabled, glm5svc as glm5, ready)",
            "Check that the play stopped before any drain (nothing stopped, the host untouched)",
            "Check the rescue (play stopped, host back on the old release, glm5.service running "
            "on it)",
            "Check the upgrade (both modules and the container's packages at the new release, "
            "service started)",
            "Check that a run with nothing to upgrade stops nothing",
            "Check the container (running, GPU lines, driver, glm5.service, /run emptied by the "
            "reboot)",
        ),
    )
