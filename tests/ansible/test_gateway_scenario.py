"""glm5_gateway on a real Debian system: `molecule test -s gateway`.

Debian 13 by default, or as MOLECULE_DISTRO says (GLM5_MOLECULE_ALL_DISTROS=1: Debian 12 and
13, one test each).

Check mode, converge (smg from PyPI in a venv, worker list from the inventory, API key in a
0600 environment file), idempotence, then molecule/gateway/verify.yml: requests through the
gateway reach both test engines, a request without the key gets 401, the key is in no argv
and no log, the metrics answer, and a stopped engine leaves rotation with no failed request.
Needs root and LXC (scripts/setup-dev.sh) and PyPI (or a pip cache holding smg).
"""

from __future__ import annotations

import pytest

from tests.support.molecule_scenario import run_scenario, scenario_distros, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.lxc]


@pytest.mark.timeout(600)
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
@pytest.mark.parametrize("distro", scenario_distros("trixie"))
def test_molecule_gateway_scenario(distro):
    words = run_scenario(
        "gateway",
        (
            "Check that every request succeeded and both engines served some",
            "Check that the key is in no argv and no log, its file is 0600 root, "
            "the unit waits for the network",
            "Check the health-check and request families",
            "Check that none failed and the first engine served them all",
        ),
        distro,
    )
    assert "idempotence: Executed: Successful" in words
