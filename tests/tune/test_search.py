"""The search's decisions with a stand-in executor: optimum found, noise alone undecided,
crashes recorded and skipped, a stopped study resumed."""

from __future__ import annotations

import random

import pytest

from glm5svc.tune.search import Search, SearchSettings
from glm5svc.tune.space import Knob, Space
from glm5svc.tune.stats import UNDECIDED
from glm5svc.tune.trial import CONTINUE, PRUNE, RunFigures, TrialOutcome

SPACE = Space(
    [
        Knob("tuning.max_running_requests", (64, 256, 1024)),
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


def figures(throughput: float) -> RunFigures:
    return RunFigures(throughput, None, 100.0, 10.0, 50.0, None, None, None, None, 1.0, 8, 8)


class Executor:
    """Throughput from a table of factors, with seeded multiplicative noise."""

    def __init__(self, model, noise=0.02, crash=lambda c: False, seed=1):
        self.model = model
        self.noise = noise
        self.crash = crash
        self.random = random.Random(seed)
        self.calls = []

    def __call__(self, number, candidate, mapping, decide, deadline):
        self.calls.append(candidate)
        if self.crash(candidate):
            return TrialOutcome("failed", failure="the engine did not start: serve exited with 3")
        runs = []
        while True:
            value = self.model(candidate) * self.random.lognormvariate(0, self.noise)
            runs.append(figures(value))
            verdict = decide(runs)
            if verdict == PRUNE:
                return TrialOutcome("pruned", runs=runs, kv_pool_tokens=1000, wall_s=1)
            if verdict != CONTINUE:
                return TrialOutcome("measured", runs=runs, kv_pool_tokens=1000, wall_s=1)


def capped(candidate):
    cap = candidate["tuning.max_running_requests"]
    graphs = 0.9 if candidate["tuning.cuda_graph"] else 1.0
    backend = 1.1 if candidate["tuning.attention_backend"] == "triton" else 1.0
    return 1000 * min(cap, 512) / 64 * graphs * backend


def search(tmp_path, executor, **settings):
    return Search(SPACE, {}, START, SearchSettings(**settings), tmp_path, executor)


def test_the_search_finds_the_models_optimum(tmp_path):
    run = search(tmp_path, Executor(capped))
    records = run.run()
    assert run.best.candidate == {
        "tuning.max_running_requests": 1024,
        "tuning.cuda_graph": False,
        "tuning.attention_backend": "triton",
    }
    assert records[0].verdict.startswith("the start")
    assert run.best.number <= 6  # found in the first pass, one knob at a time


def test_noise_alone_gives_no_measurable_difference(tmp_path):
    run = search(tmp_path, Executor(lambda c: 5000.0, noise=0.05), max_repeats=5)
    records = run.run()
    assert run.best.number == 0
    judged = [r for r in records[1:] if r.status == "measured"]
    assert judged and all(r.verdict == UNDECIDED for r in judged)
    assert all(len(r.samples) == 5 for r in judged)  # repeated up to the budget first


def test_a_crashing_candidate_is_recorded_and_skipped(tmp_path):
    executor = Executor(capped, crash=lambda c: c["tuning.attention_backend"] == "triton")
    run = search(tmp_path, executor)
    records = run.run()
    crashed = [r for r in records if r.status == "failed"]
    assert crashed and "serve exited with 3" in crashed[0].verdict
    assert run.best.candidate["tuning.attention_backend"] is None
    assert run.best.candidate["tuning.max_running_requests"] == 1024


def test_a_hopeless_candidate_is_pruned_after_one_run(tmp_path):
    model = lambda c: 100.0 if c["tuning.attention_backend"] == "triton" else 5000.0  # noqa: E731
    records = search(tmp_path, Executor(model)).run()
    pruned = [r for r in records if r.status == "pruned"]
    assert pruned and all(len(r.samples) == 1 for r in pruned)


def test_a_stopped_study_resumes_where_it_stopped(tmp_path):
    first = search(tmp_path, Executor(capped), max_trials=2)
    first.run()
    assert first.stopped_by == "--max-trials 2 reached"
    executor = Executor(capped)
    second = search(tmp_path, executor)
    assert second.replay() == 2
    second.run()
    tried = [r.candidate for r in second.records]
    assert len({str(sorted(c.items())) for c in tried}) == len(tried)  # nothing measured twice
    assert START not in executor.calls
    assert second.best.candidate["tuning.max_running_requests"] == 1024


def test_a_plan_refusal_is_recorded_without_running(tmp_path):
    executor = Executor(capped)
    run = Search(
        SPACE, {}, START, SearchSettings(), tmp_path, executor,
        render=lambda m: "no" if m.get("tuning", {}).get("attention_backend") else None,
    )  # fmt: skip
    records = run.run()
    refused = [r for r in records if r.status == "refused"]
    assert refused and refused[0].verdict.startswith("refused by the launch plan")
    assert all(c["tuning.attention_backend"] is None for c in executor.calls)


@pytest.mark.parametrize("limit", [50.0])
def test_candidates_over_the_latency_limit_cannot_win(tmp_path, limit):
    run = search(tmp_path, Executor(capped), ttft_p99_ms=limit)
    run.run()
    # every run has TTFT p99 100 ms: nothing is within the limit, the start stays best
    assert run.best.number == 0
