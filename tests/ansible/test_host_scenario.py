"""The host play on real Debian systems: `molecule test -s host`.

Boots Debian 12 (Proxmox VE 8 base) and Debian 13 (Proxmox VE 9 base) with systemd in
LXC, then: check mode on the fresh targets (must change nothing), converge
(playbooks/proxmox_host.yml against a signed stand-in NVIDIA repository and stand-in pct,
pveversion, boot tools), idempotence, and molecule/host/verify.yml (container config line
by line, exact pinning, units, device nodes by minor, reboot report, the enterprise
repositories switched or refused, an earlier run's no-subscription file moved, the boot
kernel pinned while a newer kernel lacks the module and unpinned once it has it, a branch
switch and an upgrade within the branch, Secure Boot refused, state absent, live pct set, and
the raw lxc keys proven in a real LXC container). Needs root, LXC, mmdebstrap, gpg and
dpkg-dev (scripts/setup-dev.sh).
"""

from __future__ import annotations

import pytest

from tests.support.molecule_scenario import run_scenario, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


@pytest.mark.timeout(1200)
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
def test_molecule_host_scenario():
    words = run_scenario(
        "host",
        (
            "Compare the container config line by line with the expected one",
            "Check repository, key, pinning and packages",
            "Check the units and that they created the nodes",
            "Check every node inside (right numbers, and the cgroup lets it through)",
            "Check that nothing was written",
            "Check that the locked container was refused and left alone",
            "Check that the pending change to a GPU line was refused and the config left alone",
            "Check that 580 on Debian 13 failed with the branches apt offers and the fix",
            "Check that the enterprise entries are off and the no-subscription ones read by apt",
            "Check that the old file is gone and no entry is doubled",
            "Check that the boot is pinned to the running kernel, which has the module",
            "Check that the pin is gone once the newest kernel has the module",
            "Check the switch (one pin, every package on 610, the loaded 595 a reboot reason)",
            "Check live changes through pct set, the file for a stopped container, no restart",
            "Check the refusal (first task, both fixes, the file left alone)",
            "Check the Secure Boot refusal (first task, its procedure, /etc/apt byte for byte)",
            "Check the upgrade (the exact pin moved, the old module a reboot reason)",
            "Check that state absent gave the config back as it was (uvm and caps allow lines too)",
        ),
    )
    # The return code covers every step of the test sequence (idempotence included).
    assert "idempotence: Executed: Successful" in words
