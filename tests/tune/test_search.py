"""The search's decisions with a stand-in executor: optimum found, noise alone undecided,
crashes recorded and skipped, a stopped study resumed."""

from __future__ import annotations

import random

import pytest

from glm5svc.tune.search import ANOTHER_START, Search, SearchSettings
from glm5svc.tune.space import Knob, Space
from glm5svc.tune.trial import CONTINUE, PRUNE, RunFigures, TrialOutcome

SPACE = Space(
    [
        Knob("tuning.max_running_requests", (64, 256, 1024), restart=False),
        Knob("tuning.cuda_graph", (True, False), kv_pool=True),
        Knob("tuning.attention_backend", (None, "triton")),
    ],
    "test",
)
START = {
    "tuning.max_running_requests": 64,
    "tuning.cuda_graph": True,
    "tuning.attention_backend": None,
}
CAP = "tuning.max_running_requests"


def figures(throughput: float, **tags) -> RunFigures:
    return RunFigures(throughput, None, 100.0, 10.0, 50.0, None, None, None, None, 1.0, 8, 8,
                      **tags)  # fmt: skip


class Executor:
    """Throughput from a table of factors: each engine start draws its own effect
    (`start_noise`, lognormal), each window its own (`noise`). Live values run interleaved
    in rounds, as run_trial does."""

    def __init__(self, model, noise=0.01, start_noise=0.01, crash=lambda c: False, seed=1):
        self.model = model
        self.noise = noise
        self.start_noise = start_noise
        self.crash = crash
        self.random = random.Random(seed)
        self.calls = []  # (candidate, live values) per start

    def __call__(self, number, candidate, mapping, decide, deadline, live_values):
        self.calls.append((candidate, live_values))
        if self.crash(candidate):
            return TrialOutcome("failed", failure="the engine did not start: serve exited with 3")
        effect = self.random.lognormvariate(0, self.start_noise)
        runs = []
        for round_index in range(100):
            for value in live_values or (None,):
                setting = {**candidate, CAP: value} if value is not None else candidate
                throughput = (
                    self.model(setting) * effect * self.random.lognormvariate(0, self.noise)
                )
                runs.append(figures(throughput, live_value=value, round=round_index))
            verdict = decide(runs)
            if verdict == PRUNE:
                return TrialOutcome("pruned", runs=runs, kv_pool_tokens=1000, wall_s=1)
            if verdict != CONTINUE:
                return TrialOutcome("measured", runs=runs, kv_pool_tokens=1000, wall_s=1)
        raise AssertionError("the decider never stopped")


def capped(candidate):
    cap = candidate[CAP]
    graphs = 0.9 if candidate["tuning.cuda_graph"] else 1.0
    backend = 1.1 if candidate["tuning.attention_backend"] == "triton" else 1.0
    return 1000 * min(cap, 512) / 64 * graphs * backend


def search(tmp_path, executor, space=SPACE, **settings):
    return Search(space, {}, START, SearchSettings(**settings), tmp_path, executor)


def kinds(records):
    return [r.verdict.split(":")[0] for r in records]


def test_the_search_finds_the_models_optimum(tmp_path):
    executor = Executor(capped)
    run = search(tmp_path, executor)
    records = run.run()
    assert run.best.candidate == {CAP: 1024, "tuning.cuda_graph": False,
                                  "tuning.attention_backend": "triton"}  # fmt: skip
    assert records[0].verdict.startswith("the start")
    # The cap is live: every start measured all three caps, and no start was spent on one.
    assert all(live == (64, 256, 1024) for _, live in executor.calls)
    combos = {(c["tuning.cuda_graph"], c["tuning.attention_backend"]) for c, _ in executor.calls}
    assert combos == {(True, None), (False, None), (False, "triton"), (True, "triton")}
    assert len(executor.calls) <= 10  # the first pass and the starts that decide it


def test_a_gain_seen_in_one_start_is_started_again_before_it_wins(tmp_path):
    """Graphs off is 11 % better: promoted only after a second start of each side, the
    best's latest start after the candidate's first (the start effect is bracketed)."""
    model = lambda c: 5000.0 * (1.11 if not c["tuning.cuda_graph"] else 1.0)  # noqa: E731
    space = Space([Knob("tuning.cuda_graph", (True, False))], "test")
    executor = Executor(model)
    run = Search(space, {}, {"tuning.cuda_graph": True}, SearchSettings(), tmp_path, executor)
    run.run()
    order = [c["tuning.cuda_graph"] for c, _ in executor.calls]
    assert run.best.candidate == {"tuning.cuda_graph": False}
    won = order.index(False)
    assert order.count(False) >= 2 and True in order[won + 1 :]  # bracketed, replicated
    promoted = next(r for r in run.records if r.became_best and r.number > 0)
    assert promoted.verdict.startswith("better")
    assert "start(s)" in promoted.verdict


def test_noise_alone_promotes_nothing(tmp_path):
    """No real difference, 3 % between starts: the start stays best, and each verdict is
    equivalent, worse or undecided, never better."""
    run = search(tmp_path, Executor(lambda c: 5000.0, noise=0.02, start_noise=0.03, seed=4))
    records = run.run()
    assert run.best.number == 0
    judged = [r for r in records[1:] if r.status == "measured" and r.verdict != ANOTHER_START]
    assert judged
    assert not any(k.startswith("better") for k in kinds(judged)), kinds(judged)


def test_live_values_are_judged_by_paired_windows(tmp_path):
    run = search(tmp_path, Executor(capped, start_noise=0.05))
    run.run()
    cap_records = [
        r for r in run.records
        if r.start == 0 and r.candidate[CAP] != START[CAP] and r.status == "measured"
    ]  # fmt: skip
    assert cap_records and all("paired window" in r.verdict for r in cap_records)
    # 256 and 1024 are 4x and 8x over 64: decided within the first start.
    assert any(r.became_best and r.start == 0 and r.candidate[CAP] == 1024 for r in run.records)


def test_a_crashing_candidate_is_recorded_and_skipped(tmp_path):
    executor = Executor(capped, crash=lambda c: c["tuning.attention_backend"] == "triton")
    run = search(tmp_path, executor)
    records = run.run()
    crashed = [r for r in records if r.status == "failed"]
    assert crashed and "serve exited with 3" in crashed[0].verdict
    assert run.best.candidate["tuning.attention_backend"] is None
    assert run.best.candidate[CAP] == 1024


def test_a_hopeless_start_is_pruned_after_one_round(tmp_path):
    model = lambda c: 100.0 if c["tuning.attention_backend"] == "triton" else 5000.0  # noqa: E731
    records = search(tmp_path, Executor(model)).run()
    pruned = [r for r in records if r.status == "pruned"]
    assert pruned and all(len(r.samples) == 1 for r in pruned)
    assert {r.candidate[CAP] for r in pruned} == {64, 256, 1024}  # one record per live value


def test_a_pruned_start_is_tried_again_when_starts_spread_wider_than_the_margin(tmp_path):
    model = lambda c: 3000.0 if c["tuning.attention_backend"] == "triton" else 5000.0  # noqa: E731
    executor = Executor(model, start_noise=0.4, seed=2)
    run = search(tmp_path, executor, prune_below=0.7)
    run.run()
    triton = [c for c, _ in executor.calls if c["tuning.attention_backend"] == "triton"]
    if any(r.status == "pruned" for r in run.records) and run._start_spread() * 2 > 0.3:
        assert len(triton) >= 2


def test_a_stopped_study_resumes_where_it_stopped(tmp_path):
    first = search(tmp_path, Executor(capped), max_trials=2)
    first.run()
    assert first.stopped_by == "--max-trials 2 reached"
    executor = Executor(capped)
    second = search(tmp_path, executor)
    assert second.replay() == 6 and second.trials_run() == 2  # 2 starts, 3 caps each
    second.run()
    assert START not in [c for c, _ in executor.calls]  # the start is not measured again
    assert second.best.candidate[CAP] == 1024


def test_a_plan_refusal_is_recorded_without_running(tmp_path):
    executor = Executor(capped)
    run = Search(
        SPACE, {}, START, SearchSettings(), tmp_path, executor,
        render=lambda m: "no" if m.get("tuning", {}).get("attention_backend") else None,
    )  # fmt: skip
    records = run.run()
    refused = [r for r in records if r.status == "refused"]
    assert refused and refused[0].verdict.startswith("refused by the launch plan")
    assert all(c["tuning.attention_backend"] is None for c, _ in executor.calls)


@pytest.mark.parametrize("limit", [50.0])
def test_candidates_over_the_latency_limit_cannot_win(tmp_path, limit):
    run = search(tmp_path, Executor(capped), ttft_p99_ms=limit)
    run.run()
    # every run has TTFT p99 100 ms: nothing is within the limit, the start stays best
    assert run.best.number == 0
