"""The host play on a real Debian system: `molecule test -s host`.

Boots Debian 12 (Proxmox VE 8 base; the default) or Debian 13 (Proxmox VE 9 base), as
MOLECULE_DISTRO says, with systemd in LXC, then: check mode on the fresh target (must change
nothing), converge (playbooks/proxmox_host.yml against a signed stand-in NVIDIA repository
and stand-in pct, pveversion, boot tools), idempotence, and molecule/host/verify.yml
(container config line by line, exact pinning, units, device nodes by minor, reboot report).
On Debian 12 also: an enterprise entry and Secure Boot refused at the first task, an upgrade
within the branch, state absent, and the raw lxc keys proven in a real LXC container. On
Debian 13: pct create, a locked container and a pending change refused, branch 580 refused,
the enterprise repositories switched, an earlier run's no-subscription file moved, the boot
kernel pinned while a newer kernel lacks the module and unpinned once it has it, a branch
switch, and live pct set. GLM5_MOLECULE_ALL_DISTROS=1 runs both, one test each. Needs root,
LXC, mmdebstrap, gpg and dpkg-dev (scripts/setup-dev.sh).
"""

from __future__ import annotations

import pytest

from tests.support.molecule_scenario import run_scenario, scenario_distros, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


# Checked on either release (molecule/host/verify.yml's first play, side_effect.yml).
COMMON_TASKS = (
    "Compare the container config line by line with the expected one",
    "Check repository, key, pinning and packages",
    "Check the units and that they created the nodes",
    "Check that nothing was written",
)
# What each release's target is for; verify.yml picks them by the target's facts.
RELEASE_TASKS = {
    "bookworm": (
        "Check every node inside (right numbers, and the cgroup lets it through)",
        "Check the refusal (first task, both fixes, the file left alone)",
        "Check the Secure Boot refusal (first task, its procedure, /etc/apt byte for byte)",
        "Check the upgrade (the exact pin moved, the old module a reboot reason)",
        "Check that state absent gave the config back as it was (uvm and caps allow lines too)",
    ),
    "trixie": (
        "Check the creation arguments and the GPU lines",
        "Check that the locked container was refused and left alone",
        "Check that the pending change to a GPU line was refused and the config left alone",
        "Check that 580 on Debian 13 failed with the branches apt offers and the fix",
        "Check that the enterprise entries are off and the no-subscription ones read by apt",
        "Check that the old file is gone and no entry is doubled",
        "Check that the boot is pinned to the running kernel, which has the module",
        "Check that the pin is gone once the newest kernel has the module",
        "Check the switch (one pin, every package on 610, the loaded 595 a reboot reason)",
        "Check live changes through pct set, the file for a stopped container, no restart",
    ),
}


@pytest.mark.timeout(1200)
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
# Each release has checks of its own (RELEASE_TASKS): both run by default, one after the
# other on one worker (the runs share the scenario's ephemeral directory).
@pytest.mark.parametrize("distro", scenario_distros("bookworm", "trixie"))
def test_molecule_host_scenario(distro):
    words = run_scenario("host", COMMON_TASKS + RELEASE_TASKS[distro], distro)
    # The return code covers every step of the test sequence (idempotence included).
    assert "idempotence: Executed: Successful" in words
    # The other release's checks were left out by the target's facts, not run against it.
    for release, tasks in RELEASE_TASKS.items():
        if release != distro:
            ran = [task for task in tasks if f"TASK [{task}]" in words]
            assert not ran, f"{release}'s checks ran on {distro}: {ran}"
