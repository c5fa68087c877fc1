"""--max-trials counts every trial, the ones the launch plan refuses included: a space
whose candidates are all refused stops at the limit, not at the end of the budget."""

from __future__ import annotations

from glm5svc.tune.search import Search, SearchSettings
from glm5svc.tune.space import Knob, Space
from glm5svc.tune.trial import CONTINUE, PRUNE, STOP, RunFigures, TrialOutcome

SPACE = Space(
    [
        Knob("tuning.max_running_requests", (64, 128, 256, 512, 1024, 2048)),
        Knob("tuning.chunked_prefill_size", (None, 1024, 2048, 4096, 8192)),
        Knob("tuning.mem_fraction_static", (0.8, 0.85, 0.9, 0.92)),
    ],
    "test",
)
START = {
    "tuning.max_running_requests": 64,
    "tuning.chunked_prefill_size": None,
    "tuning.mem_fraction_static": 0.8,
}


def measured(number, candidate, mapping, decide, deadline, *rest) -> TrialOutcome:
    """One window a round, the decider asked after every whole block of two rounds (as
    trial._rounds does) until it stops the start. Every setting but the start runs at half
    its throughput: clearly behind, so no comparison asks for more starts."""
    level = 1000.0 if candidate == START else 500.0
    runs = []
    for index in range(100):
        runs.append(RunFigures(level + index % 2, None, 100.0, 10.0, 50.0, None, None, None,
                               None, 1.0, 8, 8, round=index))  # fmt: skip
        if index % 2 == 0:
            continue  # a half block: the decider looks at whole A B B A blocks only
        verdict = decide(list(runs))
        if verdict == PRUNE:
            return TrialOutcome("pruned", runs=runs, kv_pool_tokens=1000, wall_s=1)
        if verdict == STOP:
            return TrialOutcome("measured", runs=runs, kv_pool_tokens=1000, wall_s=1)
        assert verdict == CONTINUE, verdict
    raise AssertionError("the decider never stopped")


class Calls:
    def __init__(self):
        self.made = 0

    def __call__(self, *args) -> TrialOutcome:
        self.made += 1
        return measured(*args)


def test_trials_the_plan_refuses_count_towards_the_limit(tmp_path):
    def never(executor_args, *rest):  # the executor must not run: every trial is refused
        raise AssertionError("a refused trial started an engine")

    search = Search(SPACE, {}, START, SearchSettings(max_trials=3, budget_s=3600), tmp_path,
                    never, render=lambda mapping: "--tp-size 8 on a 4-GPU host")  # fmt: skip
    records = search.run()
    assert [r.status for r in records] == ["refused"] * 3
    assert search.stopped_by == "--max-trials 3 reached"
    assert search.planned_left() == 0


def test_refused_and_measured_trials_share_the_limit(tmp_path):
    calls = Calls()

    def refuse_big_caps(mapping):
        cap = (mapping.get("tuning") or {}).get("max_running_requests", 64)
        return "over the KV pool" if cap >= 256 else None

    search = Search(SPACE, {}, START, SearchSettings(max_trials=5, budget_s=3600), tmp_path,
                    calls, render=refuse_big_caps)  # fmt: skip
    records = search.run()
    statuses = [r.status for r in records]
    assert len(records) == 5 and "refused" in statuses
    # The start, 128 (stopped early: clearly behind), then 256, 512 and 1024 refused.
    assert statuses == ["measured", "pruned", "refused", "refused", "refused"]
    assert calls.made == len({r.start for r in records if r.start is not None}) == 2
    assert all(r.start is None for r in records if r.status == "refused")
    assert search.stopped_by == "--max-trials 5 reached"


def test_the_plan_left_counts_down_with_refusals(tmp_path):
    holder: list[Search] = []
    search = Search(SPACE, {}, START, SearchSettings(max_trials=4, budget_s=3600), tmp_path,
                    measured, render=lambda mapping: "refused",
                    should_stop=lambda: len(holder[0].records) >= 2)  # fmt: skip
    holder.append(search)
    assert search.planned_left() == 4  # the first pass is longer than the limit
    search.run()
    assert [r.status for r in search.records] == ["refused"] * 2
    assert search.planned_left() == 2
