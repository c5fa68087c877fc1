"""The container play on real Debian systems: `molecule test -s container`.

Boots Debian 12 and 13 with systemd in LXC, runs playbooks/glm5_container.yml against them
(stand-in NVIDIA repository, real sglang 0.5.10.post1 patched by the real patch engine, the
test engine in place of sglang's server), checks idempotence, then molecule/container/
verify.yml: glm5.service active (Type=notify, glm5svc as main process), /readyz, patches
applied, a config change restarts it, a bad value is refused with the old file kept, and
`systemctl stop` leaves no engine process. Needs root, LXC and mmdebstrap (scripts/setup-dev.sh).
"""

from __future__ import annotations

import pytest

from tests.support.molecule_scenario import run_scenario, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


@pytest.mark.timeout(1500)
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
def test_molecule_container_scenario():
    words = run_scenario(
        "container",
        (
            "Check apt is clean, the entries, the branch and where CUDA 12.8 came from",
            "Check that it is a notify unit whose main process is glm5svc",
            "Check that every patch is applied to sglang 0.5.10.post1",
            "Check that the bad value failed clearly and the old file stayed",
            "Check that the change restarted the service",
            "Look for engine processes after the stop",
        ),
    )
    assert "idempotence: Executed: Successful" in words
