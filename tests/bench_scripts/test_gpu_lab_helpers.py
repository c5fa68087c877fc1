"""The GPU lab's arithmetic and file handling, without servers: the ratio's interval, the
pair order, the configurations the ratio and tune scenarios write, the tune run's copy,
and `scripts/gpu-lab record` of a run with folders under recorded/."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
import yaml

from lab.gpu import models, ratio_scenario, record, tune_scenario


@pytest.mark.parametrize(
    ("df", "expected"), [(1, 12.706), (5, 2.571), (30, 2.042), (40, 2.021), (120, 1.980)]
)
def test_t_quantile_matches_the_tables(df, expected):
    assert ratio_scenario.t_975(df) == pytest.approx(expected, abs=0.001)


def test_interval_of_pair_ratios():
    summary = ratio_scenario.interval([0.99, 1.01, 1.00, 1.00])
    assert summary["mean"] == pytest.approx(1.0)
    # sd 0.008165, t(3) 3.182: half-width 3.182 * 0.008165 / 2
    assert summary["half_width_95"] == pytest.approx(0.01299, abs=1e-5)
    assert ratio_scenario.interval([1.0]) == {"n": 1, "mean": 1.0, "half_width_95": None}


def test_which_goes_first_alternates_at_each_level():
    runs: list[dict] = []
    firsts = []
    for level in (32, 128, 32, 128, 32):
        order = ratio_scenario.pair_order(runs, level)
        firsts.append((level, order[0]))
        runs += [{"level": level}, {"level": level}]
    assert firsts == [(32, "bare"), (128, "bare"), (32, "serve"), (128, "serve"), (32, "bare")]


def test_the_ratio_configuration_pins_the_pool(tmp_path):
    path = ratio_scenario.write_ratio_config(
        tmp_path / "c.yaml", tmp_path / "qwen3-moe", tmp_path / "results"
    )
    config = yaml.safe_load(path.read_text())
    extra = config["server"]["extra_args"]
    assert extra[extra.index("--max-total-tokens") + 1] == str(ratio_scenario.MAX_TOTAL_TOKENS)
    assert "--disable-piecewise-cuda-graph" in extra
    assert config["tuning"]["mem_fraction_static"] == ratio_scenario.MEM_FRACTION
    assert config["benchmark"]["post_start"] == {"enabled": False}


@pytest.mark.parametrize("start", ["before", "defaults"])
def test_the_tune_configuration_starts_where_asked(tmp_path, start):
    path = tune_scenario.write_tune_config(
        tmp_path / "c.yaml", tmp_path / "qwen3-moe", tmp_path / "results", start
    )
    config = yaml.safe_load(path.read_text())
    assert {k: config["tuning"][k] for k in tune_scenario.STARTS[start]} == (
        tune_scenario.STARTS[start]
    )
    assert config["tuning"]["attention_backend"] == "triton"
    assert config["gpus"]["expected_count"] == 1
    assert config["service"]["run_preflight"] is False
    assert config["server"]["extra_args"][-1] == "--disable-piecewise-cuda-graph"
    space = yaml.safe_load(tune_scenario.SPACE.read_text())
    assert [k["key"] for k in space["knobs"]][0] == "tuning.max_running_requests"


def test_the_testbed_model_has_qwen3_moe_shapes():
    config = models.MODELS["qwen3-moe"]
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert (config["num_experts"], config["num_experts_per_tok"]) == (128, 8)
    assert config["num_hidden_layers"] * config["num_experts"] * 3 * 2048 * 768 > 14e9


def test_the_tune_summary_is_the_last_json_object():
    text = 'trial 1 ...\n{"not": "this"}\nmore\n{\n  "trials": 3,\n  "gain": 1.9\n}\n'
    assert tune_scenario.last_json_object(text) == {"trials": 3, "gain": 1.9}
    assert tune_scenario.last_json_object("no json here\n") is None


def test_the_tune_run_copy_cuts_big_logs(tmp_path, monkeypatch):
    monkeypatch.setattr(tune_scenario, "KEEP_BYTES", 100)
    run_dir = tmp_path / "run"
    (run_dir / "trials" / "001").mkdir(parents=True)
    (run_dir / "summary.json").write_text("{}")
    (run_dir / "trials" / "001" / "server.log").write_text("x" * 1000)
    (run_dir / "study.db").write_bytes(b"\0" * 1000)
    notes = tune_scenario.copy_run_dir(run_dir, tmp_path / "copy")
    assert notes == ["trials/001/server.log: 1000 bytes, cut to its ends"]
    assert (tmp_path / "copy" / "study.db").stat().st_size == 1000
    assert (tmp_path / "copy" / "trials" / "001" / "server.log").stat().st_size < 200


def test_record_keeps_the_folders_under_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "FIXTURES", tmp_path / "fixtures")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    results = {"machine": {"sglang": "0.5.11"}, "tune": {"start": "before", "exit": 0}}
    (run_dir / "results.json").write_text(json.dumps(results))
    with tarfile.open(run_dir / "recorded.tar.gz", "w:gz") as tar:
        for name, data in {
            "recorded/tune-stderr.log": b"   1.000 line\n",
            "recorded/tune-run/trials/001/server.log": b"[2026] up\n",
            "recorded/tune-run/study.db": b"\0\1",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    name = record.default_name(results)
    assert name == "sglang-0.5.11-h200-tune-before"
    dest = record.record(run_dir, name)
    assert (dest / "tune-stderr.log").read_text() == "line\n"
    assert (dest / "tune-run" / "trials" / "001" / "server.log").exists()
    assert (dest / "tune-run" / "study.db").read_bytes() == b"\0\1"
    assert record.default_name({"machine": {"sglang": "0.5.11"}, "ratio": {}}) == (
        "sglang-0.5.11-h200-ratio"
    )
    h100 = {"sglang": "0.5.11", "gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"]}
    assert record.default_name({"machine": h100, "noise": {}}) == "sglang-0.5.11-h100-noise"
