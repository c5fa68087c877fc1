"""glm5svc/metrics_text.py: Prometheus text through prometheus_client, on real sglang output."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glm5svc.metrics_text import MetricsTextError, parse_metrics

RECORDED = Path(__file__).parents[1] / "fixtures/real_engine/sglang-0.5.11-h200-service"
RANK0 = {"engine_type": "unified", "model_name": "tiny", "moe_ep_rank": "0", "pp_rank": "0"}


def test_the_recorded_sglang_metrics_under_load():
    samples = parse_metrics((RECORDED / "metrics-under-load.txt").read_text())
    assert samples.value("sglang:generation_tokens_total", engine_type="unified",
                         model_name="tiny") == 245776.0  # fmt: skip
    assert samples.value("sglang:num_running_reqs", **RANK0, tp_rank="0") == 0.0
    assert samples.value("sglang:num_running_reqs", **RANK0) is None  # not every label
    assert samples.total("sglang:prompt_tokens_total") == 491531.0
    assert samples.total("sglang:realtime_tokens_total") == 491635.0 + 245676.0
    assert samples.total("sglang:realtime_tokens_total", mode="decode") == 245676.0
    assert samples.total("sglang:no_such_metric") is None
    assert "sglang:prompt_tokens_histogram_bucket" in samples.names()
    assert "sglang:prompt_tokens" not in samples.names()  # counters as exposed: `_total`


def test_the_recorded_service_metrics():
    samples = parse_metrics((RECORDED / "service-metrics-under-load.txt").read_text())
    assert any(name.startswith("glm5svc_") for name in samples.names())


def test_a_brace_and_a_quote_inside_a_label_value():
    text = 'm{path="/a}b",quote="say \\"hi\\"",x="1"} 3\nm{path="/c"} 4\n'
    samples = parse_metrics(text)
    assert samples.value("m", path="/a}b", quote='say "hi"', x="1") == 3.0
    assert samples.total("m") == 7.0
    assert samples.largest("m") == 4.0


@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40).filter(
        lambda v: "\n" not in v
    )
)
def test_any_label_value_round_trips(value):
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    samples = parse_metrics(f'm{{v="{escaped}"}} 1.5\n')
    assert samples.value("m", v=value) == 1.5


@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_metrics_text_error(text):
    try:
        parse_metrics(text)
    except MetricsTextError:
        pass


@pytest.mark.parametrize(
    "text", ["sglang:num_running_reqs{a=b} 1\n", "ok 1\nbroken{\n", 'm{x="1"} not-a-number\n']
)
def test_malformed_text_names_the_line(text):
    with pytest.raises(MetricsTextError, match="not Prometheus text format at line"):
        parse_metrics(text)
