"""The search's decisions with a stand-in executor: optimum found, noise alone undecided,
a clear restart gain promoted and confirmed by a fresh start, crashes recorded and skipped,
a start clearly behind stopped early, a stopped study resumed."""

from __future__ import annotations

import random

import pytest

from glm5svc.tune.search import ANOTHER_START, Search, SearchSettings
from glm5svc.tune.space import Knob, Space
from glm5svc.tune.trial import CONTINUE, PRUNE, STOP, RunFigures, TrialOutcome

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
    in A B B A rounds and the decider is asked after every whole block of two rounds
    (rounds 2, 4, ...), as trial._rounds does."""

    def __init__(self, model, noise=0.01, start_noise=0.01, crash=lambda c: False, seed=1):
        self.model = model
        self.noise = noise
        self.start_noise = start_noise
        self.crash = crash
        self.random = random.Random(seed)
        self.calls = []  # (candidate, live values) per start
        self.decided = []  # per start that ran: the rounds after which decide was asked

    def __call__(self, number, candidate, mapping, decide, deadline, live_values):
        self.calls.append((candidate, live_values))
        self.decided.append([])  # index: the start's number
        if self.crash(candidate):
            return TrialOutcome("failed", failure="the engine did not start: serve exited with 3")
        effect = self.random.lognormvariate(0, self.start_noise)
        runs = []
        values = live_values or (None,)
        for round_index in range(100):
            # A B B A, as trial._rounds orders them.
            order = values if round_index % 2 == 0 else tuple(reversed(values))
            for value in order:
                setting = {**candidate, CAP: value} if value is not None else candidate
                throughput = (
                    self.model(setting) * effect * self.random.lognormvariate(0, self.noise)
                )
                runs.append(figures(throughput, live_value=value, round=round_index))
            self.decided[-1].append(round_index + 1)  # asked after every round
            verdict = decide(list(runs))
            assert verdict in (CONTINUE, STOP, PRUNE), verdict
            if verdict == PRUNE:
                return TrialOutcome("pruned", runs=runs, kv_pool_tokens=1000, wall_s=1)
            if verdict == STOP:
                return TrialOutcome("measured", runs=runs, kv_pool_tokens=1000, wall_s=1)
        raise AssertionError("the decider never stopped")


def capped(candidate):
    cap = candidate[CAP]
    graphs = 0.5 if candidate["tuning.cuda_graph"] else 1.0  # restart effects beyond the
    backend = 2.0 if candidate["tuning.attention_backend"] == "triton" else 1.0  # prior's
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
    # The cap is live: every screening start measured all three caps, and no start was
    # spent on one.
    confirming = [r.start for r in records if r.confirming and r.start > 0]
    screening = executor.calls[: min(confirming)]
    assert all(live == (64, 256, 1024) for _, live in screening)
    combos = {(c["tuning.cuda_graph"], c["tuning.attention_backend"]) for c, _ in screening}
    assert combos == {(True, None), (False, None), (False, "triton"), (True, "triton")}
    # The confirmation: the start and the overlay, each started as written (the cap at
    # start-up, one value), until the fresh starts alone decide.
    assert executor.calls[min(confirming)] == (START, (64,))
    assert executor.calls[-1] == (run.best.candidate, (1024,))
    assert records[-1].verdict == "the confirmation: the overlay as written"
    assert run.confirmed is True and run.confirmation.startswith("confirmed by a fresh test")


def graphs_off(gain):
    return lambda c: 5000.0 * (gain if not c["tuning.cuda_graph"] else 1.0)


def graphs_search(tmp_path, executor):
    space = Space([Knob("tuning.cuda_graph", (True, False))], "test")
    return Search(space, {}, {"tuning.cuda_graph": True}, SearchSettings(), tmp_path, executor)


def test_a_clear_restart_gain_wins_after_one_start_each_and_is_confirmed(tmp_path):
    """Graphs off triples throughput: the screen promotes it after one start of each side
    (the start-to-start spread the prior's, 15 %), and fresh starts of both as written
    confirm it before it is written out."""
    executor = Executor(graphs_off(3.0))
    run = graphs_search(tmp_path, executor)
    run.run()
    assert [c["tuning.cuda_graph"] for c, _ in executor.calls] == [True, False, True, False]
    assert run.best.candidate == {"tuning.cuda_graph": False}
    promoted = next(r for r in run.records if r.became_best and r.number > 0)
    assert promoted.verdict.startswith("better")
    assert "over 1 and 1 start(s)" in promoted.verdict
    assert "start-to-start spread 15.0% (the prior" in promoted.verdict
    confirming = run.records[-1]
    assert confirming.start == 3
    assert confirming.verdict == "the confirmation: the overlay as written"
    assert run.confirmed is True
    assert run.confirmation.startswith("confirmed by a fresh test of the overlay as written")


def test_a_thirty_percent_restart_gain_needs_more_than_one_start_a_side(tmp_path):
    """At the prior's 15 % start-to-start spread, one start a side cannot call +30 %."""
    executor = Executor(graphs_off(1.3))
    run = graphs_search(tmp_path, executor)
    run.run()
    first = run.records[1]
    assert first.verdict.startswith("undecided") and "over 1 and 1 start(s)" in first.verdict
    assert run.best.candidate == {"tuning.cuda_graph": False}
    assert run.confirmed is True


def test_a_winner_its_confirming_start_does_not_bear_out_is_not_confirmed(tmp_path):
    """The screen's winner whose fresh start measures no better than the start: the pick
    stands, but it is not confirmed (so no overlay is written)."""

    def model(candidate):  # graphs off triples throughput in its screening start only
        screened = len(executor.calls) < 3
        return 5000.0 * (3.0 if not candidate["tuning.cuda_graph"] and screened else 1.0)

    executor = Executor(model)
    run = graphs_search(tmp_path, executor)
    run.run()
    assert len(executor.calls) >= 4  # the start, the candidate, fresh starts of both
    assert run.best.candidate == {"tuning.cuda_graph": False}
    assert run.confirmed is False and run.confirmation_outcome == "not confirmed"
    assert run.confirmation.startswith("not confirmed: a fresh test of the overlay")


def test_an_undecided_candidate_gets_another_start(tmp_path):
    """Graphs off is 60 % better: one start each leaves it undecided, so the candidate is
    started again; after an incumbent's start no look is taken, the candidate's start comes
    next; it wins on a look after one of its own starts, and is confirmed."""
    executor = Executor(graphs_off(1.6))
    run = graphs_search(tmp_path, executor)
    run.run()
    confirming = min(r.start for r in run.records if r.confirming)
    order = [c["tuning.cuda_graph"] for c, _ in executor.calls][:confirming]
    assert order[:3] == [True, False, False]
    first = run.records[1]
    assert first.verdict.startswith("undecided")
    assert first.verdict.endswith("another start of the candidate asked for")
    # No look right after an incumbent's start: the candidate's start follows every one.
    again = [i for i, graphs in enumerate(order) if graphs and i > 0]
    assert again and all(not order[i + 1] for i in again)
    assert any("not a look: the incumbent's start" in r.verdict for r in run.records)
    assert run.best.candidate == {"tuning.cuda_graph": False}
    promoted = next(r for r in run.records if r.became_best and r.number > 0)
    assert promoted.verdict.startswith("better") and promoted.start > 1
    assert not order[promoted.start]  # decided after one of the candidate's starts
    assert run.confirmed is True and not executor.calls[-1][0]["tuning.cuda_graph"]


def test_noise_alone_promotes_nothing(tmp_path):
    """No real difference, 3 % between starts: the start stays best, and each verdict is
    equivalent, worse or undecided, never better."""
    run = search(tmp_path, Executor(lambda c: 5000.0, noise=0.02, start_noise=0.03, seed=4))
    records = run.run()
    assert run.best.number == 0
    judged = [r for r in records[1:] if r.status == "measured" and r.verdict != ANOTHER_START]
    assert judged
    assert not any(k.startswith("better") for k in kinds(judged)), kinds(judged)
    assert run.confirmed is None  # the start stayed best: nothing to confirm


def test_live_values_are_judged_by_paired_windows(tmp_path):
    run = search(tmp_path, Executor(capped, start_noise=0.05))
    run.run()
    cap_records = [
        r for r in run.records
        if r.start == 0 and r.candidate[CAP] != START[CAP] and r.status == "measured"
        and not r.confirming
    ]  # fmt: skip
    assert cap_records and all("paired window" in r.verdict for r in cap_records)
    # Looked at from the first pair: look k is the k-th pair, a half block included.
    for record in cap_records:
        pairs = int(record.verdict.split(" over ")[1].split(" paired")[0])
        assert f"look {pairs}" in record.verdict
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


def test_a_hopeless_start_is_stopped_after_its_first_block(tmp_path):
    model = lambda c: 100.0 if c["tuning.attention_backend"] == "triton" else 5000.0  # noqa: E731
    executor = Executor(model)
    records = search(tmp_path, executor).run()
    pruned = [r for r in records if r.status == "pruned"]
    # One A B B A block (two rounds): one window per round of each live value.
    assert pruned and all(len(r.samples) == 2 for r in pruned)
    assert {r.candidate[CAP] for r in pruned} == {64, 256, 1024}  # one record per live value
    assert all(r.verdict.startswith("stopped early, clearly behind the best: worse:")
               for r in pruned)  # fmt: skip
    for start in {r.start for r in pruned}:
        assert executor.decided[start] == [1, 2]  # pruned at the first whole block


def test_a_start_clearly_behind_is_stopped_early_by_the_start_model(tmp_path):
    """Triton is 80 % slower (beyond the prior's start-to-start spread of 15 %); with
    --prune-below off, the start model alone stops its starts after the first block, records
    why, and does not start them again."""
    model = lambda c: 1000.0 if c["tuning.attention_backend"] == "triton" else 5000.0  # noqa: E731
    executor = Executor(model)
    run = search(tmp_path, executor, prune_below=0)
    records = run.run()
    triton = [r for r in records if r.candidate["tuning.attention_backend"] == "triton"]
    assert triton and all(r.status == "pruned" for r in triton)
    assert all(r.verdict.startswith("stopped early, clearly behind the best: worse:")
               and "start(s)" in r.verdict for r in triton)  # fmt: skip
    assert all(len(r.samples) == 2 for r in triton)
    started = [c["tuning.cuda_graph"] for c, _ in executor.calls
               if c["tuning.attention_backend"] == "triton"]  # fmt: skip
    assert sorted(started) == [False, True]  # each combination started once
    assert run.best.candidate["tuning.attention_backend"] is None


def test_a_stopped_study_resumes_where_it_stopped(tmp_path):
    first = search(tmp_path, Executor(capped), max_trials=2)
    first.run()
    assert first.stopped_by == "--max-trials 2 reached"
    executor = Executor(capped)
    second = search(tmp_path, executor)
    # One screening start (3 caps, then its top cap confirmed on fresh rounds in that
    # start), and the second first-pass start: 2 starts, 9 records, the confirmation kept.
    assert second.replay() == 9 and second.trials_run() == 2
    assert second.records[0].verdict == "the start" and second.best.candidate[CAP] == 1024
    assert second.confirmed is True and not second.confirmation_owed()
    second.run()
    # The first pass goes on where it stopped: neither start is measured again.
    assert executor.calls[0][0] == {CAP: 1024, "tuning.cuda_graph": True,
                                    "tuning.attention_backend": "triton"}  # fmt: skip
    assert second.records[9].start == 2  # the starts' numbering continues
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
    assert all(r.start is None for r in refused)  # a refusal costs no engine start
    assert len(executor.calls) == len({r.start for r in records if r.start is not None})
    assert all(c["tuning.attention_backend"] is None for c, _ in executor.calls)


@pytest.mark.parametrize("limit", [50.0])
def test_candidates_over_the_latency_limit_cannot_win(tmp_path, limit):
    run = search(tmp_path, Executor(capped), ttft_p99_ms=limit)
    run.run()
    # every run has TTFT p99 100 ms: nothing is within the limit, the start stays best
    assert run.best.number == 0
    others = [r for r in run.records[1:] if r.verdict != ANOTHER_START and not r.confirming]
    assert others and all(r.verdict.startswith("over the latency limits") for r in others)


def test_a_better_cap_is_confirmed_in_the_start_that_found_it(tmp_path):
    """The start's restart settings with the top cap are the overlay as written: the start
    that called it better goes on with fresh rounds, and no second engine start is made."""
    space = Space([Knob(CAP, (64, 1024), restart=False)], "test")
    executor = Executor(lambda c: 1000.0 * (2.0 if c[CAP] == 1024 else 1.0), noise=0.05)
    run = search(tmp_path, executor, space=space)
    records = run.run()
    assert len(executor.calls) == 1 and run.confirmed is True
    assert run.best.candidate[CAP] == 1024
    screening = [r for r in records if not r.confirming]
    fresh = [r for r in records if r.confirming]
    assert {r.candidate[CAP] for r in fresh} == {64, 1024}
    last_screened = max(run.round for r in screening for run in r.runs)
    assert min(run.round for r in fresh for run in r.runs) == last_screened + 1
    assert fresh[0].verdict == "the confirmation: fresh pairs in the overlay's own start"
    # A 2x effect is called, and confirmed, within a few pairs each.
    assert last_screened + 1 <= 4 and len(fresh[0].runs) <= 4


def test_an_in_start_confirmation_that_does_not_bear_the_gain_out_refuses(tmp_path):
    """The screening rounds flatter the top cap by chance; the fresh rounds of the same
    start show none of it: nothing is confirmed and no overlay is owed a pass."""
    space = Space([Knob(CAP, (64, 1024), restart=False)], "test")
    calls = {"rounds": 0}

    def model(c):
        calls["rounds"] += 1
        early = calls["rounds"] <= 2 * 2  # the first two rounds of both values
        return 1000.0 * (2.0 if c[CAP] == 1024 and early else 1.0)

    executor = Executor(model, noise=0.02)
    run = search(tmp_path, executor, space=space)
    run.run()
    assert len(executor.calls) == 1
    assert run.confirmed is False and run.confirmation.startswith("not confirmed")
