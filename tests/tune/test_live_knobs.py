"""The live cap on a running engine: applied, read back, and a refusal named with its fix
(the test engine answers /set_internal_state as sglang 0.5.11 does: `[true]` even when its
scheduler refused the value)."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from glm5svc.errors import ConfigError
from glm5svc.http_fetch import fetch_json
from glm5svc.tune.live_knobs import LiveSetError, read_back, set_live
from glm5svc.tune.space import Knob, Space, read_space_file
from testkit.engine import start_engine
from testkit.http_stub import stub

CAP = "tuning.max_running_requests"


@pytest.fixture
def engine(tmp_path):
    handle = start_engine(tmp_path / "engine.log", "--max-running-requests", "64")
    yield handle
    handle.stop()


def test_a_live_cap_is_applied_and_read_back(engine):
    assert set_live(engine.base_url, {}, CAP, 8) == 8
    info = fetch_json(engine.base_url + "/server_info", timeout_s=5)
    assert info["internal_states"][0]["pp_max_micro_batch_size"] == 8
    assert set_live(engine.base_url, {}, CAP, 64) == 64


def test_a_cap_over_the_start_cap_is_refused_although_the_engine_says_updated(engine, tmp_path):
    answer = fetch_json(
        engine.base_url + "/set_internal_state", timeout_s=5, method="POST",
        body={"server_args": {"pp_max_micro_batch_size": 128}},
    )  # fmt: skip
    assert answer == [True] or "true" in json.dumps(answer).lower()  # sglang's `updated`
    with pytest.raises(LiveSetError, match="kept pp_max_micro_batch_size=64 when asked for 128"):
        set_live(engine.base_url, {}, CAP, 128)


def test_an_engine_without_the_endpoint_names_the_fix(tmp_path):
    with stub({}) as base_url, pytest.raises(LiveSetError, match="restart: true"):
        set_live(base_url, {}, CAP, 8)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=25), inner, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_any_server_info_reads_back_a_whole_number_or_nothing(info):
    value = read_back(info, "pp_max_micro_batch_size")
    assert value is None or (isinstance(value, int) and not isinstance(value, bool))


def test_caps_at_or_above_the_concurrency_count_once():
    space = Space([Knob(CAP, (1024, 64, 256, 2048), restart=False)], "test")
    collapsed = space.for_concurrency(256)
    assert collapsed.knob(CAP).values == (1024, 64)
    assert any("2048" in note and "behaves as 1024" in note for note in collapsed.left_out)


@pytest.mark.parametrize(
    ("knob", "match"),
    [
        ({"key": "tuning.cuda_graph", "values": [True, False], "restart": False}, "only for"),
        ({"key": CAP, "values": [None, 64], "restart": False}, "whole numbers"),
    ],
)
def test_a_live_knob_sglang_cannot_change_is_refused(tmp_path, knob, match):

    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"knobs": [knob]}))
    with pytest.raises(ConfigError) as refused:
        read_space_file(path)
    assert match in " ".join(refused.value.problems)
