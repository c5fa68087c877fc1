"""The tunes recorded on an H200 (sglang 0.5.11): their studies resume here, their serve
logs give the KV pool the trials recorded, and the decisions read as they were made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from glm5svc.tune.search import Search, SearchSettings
from glm5svc.tune.space import space_from_dict
from glm5svc.tune.trial import _kv_pool_from_log

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "real_engine"


def resumed(name: str, tmp_path: Path) -> Search:
    run_dir = tmp_path / name
    shutil.copytree(RECORDED / f"sglang-0.5.11-h200-tune-{name}" / "tune-run", run_dir)
    saved = json.loads((run_dir / "tune.json").read_text())

    def no_engine_here(*args):
        raise AssertionError("a replay runs no trial")

    search = Search(
        space_from_dict(saved["space"]),
        {},
        saved["start"],
        SearchSettings(**saved["settings"]),
        run_dir,
        no_engine_here,
    )
    search.replay()
    return search


def test_the_tune_from_the_before_settings_resumes_with_its_best(tmp_path):
    search = resumed("before", tmp_path)
    assert [r.status for r in search.records] == ["measured", "measured", "failed", "measured"]
    assert search.best.number == 1
    assert search.best.candidate["tuning.max_running_requests"] == 1024
    assert search.records[3].verdict == "no measurable difference"
    assert search.planned_left() == 0  # the first pass is done: a resume goes on to Optuna


def test_the_tune_from_the_defaults_pruned_the_cap_after_one_run(tmp_path):
    search = resumed("defaults", tmp_path)
    pruned = search.records[1]
    assert pruned.status == "pruned" and len(pruned.samples) == 1
    assert pruned.samples[0] < 0.7 * sum(search.best.samples) / len(search.best.samples)
    assert "bound by the running-request cap" in " ".join(pruned.outcome["diagnosis"])


@pytest.mark.parametrize("name", ["before", "defaults"])
def test_the_kv_pool_in_each_real_serve_log_is_the_one_recorded(name):
    trials = RECORDED / f"sglang-0.5.11-h200-tune-{name}" / "tune-run" / "trials"
    for record_file in sorted(trials.glob("*.json")):
        record = json.loads(record_file.read_text())
        log = trials / record_file.stem / "serve.log"
        if record["status"] != "failed" and log.exists():
            assert _kv_pool_from_log(log) == record["outcome"]["kv_pool_tokens"] == 909550


# The tune against its peer (sglang.auto_benchmark, tier 3) on the same H200, start, space
# and workload, by the new method: one continuous load per engine start, windows from the
# engine's counters, a confirming start (lab/gpu/comparison.py built comparison.json).
VS_PEER = RECORDED / "sglang-0.5.11-h200-tune-vs-peer"
TUNES = ["tune-before", "tune-before-confirm", "tune-defaults"]


def vs_peer_runs() -> dict[str, dict]:
    runs = json.loads((VS_PEER / "comparison.json").read_text())["runs"]
    return {f"{r['tool']}-{r['start']}": r for r in runs}


def test_the_comparison_is_the_one_its_script_builds_from_the_recordings():
    from lab.gpu.comparison import comparison

    assert json.loads((VS_PEER / "comparison.json").read_text()) == comparison(VS_PEER)


def test_both_tunes_pick_the_peers_setting_confirmed_and_decided_before_the_peer_ended():
    runs = vs_peer_runs()
    peer = runs["auto_benchmark-before"]
    assert peer["pick"] == {"max_running_requests": 1024, "cuda_graph": True}
    for name in ("glm5svc-before", "glm5svc-defaults"):
        tune = runs[name]
        assert tune["pick"] == {"max_running_requests": 1024, "cuda_graph": True}, name
        assert tune["confirmed"] is True and tune["confirmation"].startswith("confirmed"), name
        assert tune["decided_s"] <= peer["wall_s"], name
        assert tune["max_cached_share"] <= 0.01, name
        # The plan (printed before the first start) within a quarter of the wall time.
        assert abs(tune["plan_s"] - tune["wall_s"]) <= 0.25 * tune["wall_s"], name


@pytest.mark.parametrize("name", TUNES)
def test_every_window_of_the_continuous_load_found_nothing_cached(name):
    """Random token ids: the radix cache finds (almost) nothing to reuse in any window."""
    windows = sorted((VS_PEER / name / "tune-run" / "trials").glob("*/runs/*.json"))
    assert windows
    for path in windows:
        window = json.loads(path.read_text())
        assert window["cached_share"] <= 0.01, path
        assert window["throughput"] > 0, path
