"""The morning verdict's rule (glm5svc/night/compare.py) without an engine: over engine
starts, at the tune's start-to-start spread, with its non-inferiority margin; the starts a
night measures for it, kept through a kill; the plan's arithmetic for them. Its error rates
at the recorded spreads: bench/night_verdict.py (tests/bench_scripts runs it)."""

from __future__ import annotations

import math
import threading

import pytest

from glm5svc.config import Config
from glm5svc.errors import ConfigError
from glm5svc.night.chain import Night
from glm5svc.night.compare import (
    MOST_STARTS,
    NOT_WITHIN,
    REGRESSION_MARGIN,
    Spread,
    compare_mornings,
    holds_rates,
    planned,
    starts_needed,
)
from glm5svc.night.measure import Benches, starts_of, tune_spread
from glm5svc.night.plan import bench_estimate_s, split, verdict_line
from glm5svc.night.state import NightState
from glm5svc.tune.start_model import PRIOR_START_SPREAD
from glm5svc.tune.stats import BETTER, UNDECIDED, WORSE

EVENING = [[100.0, 102.0, 98.0]]
TIGHT = Spread(0.02, 40, "a machine's own starts")


def scaled(factor: float, starts=EVENING) -> list[list[float]]:
    return [[v * factor for v in start] for start in starts]


def test_a_morning_far_slower_is_worse_at_any_spread_it_assumes():
    for spread in (Spread.prior(), TIGHT):
        slow = compare_mornings(EVENING, scaled(0.25), spread)
        assert slow.verdict == WORSE and slow.rollback and slow.worse
        assert slow.ratio.high < 1 and 0.24 < slow.ratio.mean < 0.26


def test_at_a_tight_spread_one_start_a_side_holds_both_rates():
    unchanged = compare_mornings(EVENING, scaled(1.01), TIGHT)
    assert unchanged.holds and not unchanged.rollback and unchanged.verdict == UNDECIDED
    assert "holds both rates" in unchanged.text()
    regressed = compare_mornings(EVENING, scaled(1 - REGRESSION_MARGIN), TIGHT)
    assert regressed.verdict == WORSE and regressed.rollback
    gained = compare_mornings(EVENING, scaled(1.5), TIGHT)
    assert gained.verdict == BETTER and not gained.rollback and "1.500x" in gained.text()


def test_at_the_prior_an_unchanged_morning_is_not_kept_and_the_verdict_says_why():
    """One start a side at the tune's 15 % prior cannot tell a 10 % regression: the safe
    side, the evening, unless the morning is shown within the margin; the text says what
    it cannot do and how many starts would."""
    unchanged = compare_mornings(EVENING, scaled(0.99))
    assert not unchanged.holds and unchanged.rollback and unchanged.verdict == NOT_WITHIN
    text = unchanged.text()
    assert "cannot hold both rates" in text and f"not even {MOST_STARTS} starts" in text
    assert "assumed 15.0 % from the tune's prior" in text
    # A gain far beyond the spread is still shown within the margin: kept.
    assert not compare_mornings(EVENING, scaled(1.6)).rollback


def test_when_the_rates_hold_only_a_morning_worse_beyond_the_noise_is_rolled_back():
    """The non-inferiority test adds nothing once the interval is narrow enough: the two
    tests agree (the rule's identity), over a grid of gains and spreads."""
    for sigma in (0.005, 0.01, 0.02, 0.03):
        for gain in (-0.2, -0.1, -0.06, -0.03, -0.01, 0.0, 0.02, 0.1):
            c = compare_mornings(EVENING, scaled(math.exp(gain)), Spread(sigma, 40, "grid"))
            if c.holds:
                assert c.rollback == (c.verdict == WORSE), (sigma, gain, c.text())


def test_the_starts_needed_grow_with_the_spread_and_more_starts_narrow_the_interval():
    needed = [starts_needed(Spread(s, 40, "x")) for s in (0.02, 0.058, 0.107, 0.15)]
    assert needed[0] == 1 and needed[0] < needed[1] < needed[2] and needed[3] is None
    spread = Spread(0.058, 40, "x")
    assert not holds_rates(*planned(spread, needed[1] - 1))
    assert holds_rates(*planned(spread, needed[1]))
    # Measured: the night's own starts at that spread, enough of them, hold the rates.
    starts = needed[1]
    evening = [[100.0 * (1 + 0.05 * (-1) ** i)] * 2 for i in range(starts)]
    morning = [[100.0 * (1 + 0.05 * (-1) ** (i + 1))] * 2 for i in range(starts)]
    assert compare_mornings(evening, morning, spread).holds


def test_a_side_needs_a_start_of_two_positive_windows():
    with pytest.raises(ValueError, match="two windows at least"):
        compare_mornings(EVENING, [[90.0]])
    with pytest.raises(ValueError, match="a start a side"):
        compare_mornings([], EVENING)
    with pytest.raises(ValueError, match="not a positive number"):
        compare_mornings(EVENING, [[90.0, 0.0]])


def tune_summary(means) -> dict:
    rows = [{"setting": s, "start": i, "status": "measured", "throughput_mean": v}
            for i, (s, v) in enumerate(means)]  # fmt: skip
    rows.append({"setting": "c", "start": 9, "status": "failed", "throughput_mean": None})
    return {"settings": {"start_spread_prior": 0.15}, "trials": rows}


def test_the_spread_comes_from_the_tunes_starts_shrunk_towards_its_prior(tmp_path):
    # About 8 % from start to start: narrower than the prior, not so narrow as to refute it.
    spread = Spread.of_tune(tune_summary([("a", 100.0), ("a", 110.0), ("b", 120.0),
                                          ("b", 131.0), ("a", 92.0)]))  # fmt: skip
    assert 0.081 < spread.sigma < PRIOR_START_SPREAD and spread.dof > 4
    assert (
        "tune's starts (8.1 % over 3 degree(s) of freedom, with its prior 15.0 %)" in spread.source
    )
    # Half a percent over three degrees of freedom: the 15 % prior cannot be true there.
    narrow = Spread.of_tune(tune_summary([("a", 100.0), ("a", 101.0), ("b", 120.0),
                                          ("b", 119.0), ("a", 100.5)]))  # fmt: skip
    assert narrow.sigma < 0.01 and narrow.dof == 3
    assert "(0.5 % over 3 degree(s) of freedom; its prior 15.0 % yields to them)" in narrow.source
    assert Spread.of_tune({"trials": []}).sigma == PRIOR_START_SPREAD
    assert tune_spread(tmp_path) == Spread.prior()  # no summary.json: the prior
    (tmp_path / "summary.json").write_text("[1]")
    assert tune_spread(tmp_path) == Spread.prior()


def night_state(tmp_path, starts: int) -> NightState:
    state = NightState(tmp_path, str(tmp_path / "glm5.yaml"), "2026-12-04T20:00:00+00:00",
                       "2026-12-05T04:00:00+00:00", 28800.0, {"concurrency": 8}, 3, [],
                       plan={"verdict_starts": starts})  # fmt: skip
    state.save()
    return state


def test_the_starts_of_a_side_are_kept_through_a_kill(tmp_path, monkeypatch):
    """Three starts a side; the night killed during the third bench: the rerun keeps the
    two measured, restarts once and benches once more."""
    calls = []

    def bench(self, side):
        calls.append("bench")
        if calls.count("bench") == 3 and not getattr(self, "again", False):
            raise KeyboardInterrupt("killed")
        return {"throughputs": [100.0 + len(calls), 101.0]}

    monkeypatch.setattr(Benches, "bench", bench)
    monkeypatch.setattr(Benches, "restart", lambda self, *_: calls.append("restart"))
    night = Night(night_state(tmp_path, 3), Config(), threading.Event(), log=lambda _: None)
    night.state.begin_step("baseline")
    with pytest.raises(KeyboardInterrupt):
        night.baseline()
    assert calls == ["restart", "bench", "restart", "bench", "restart", "bench"]
    reloaded = NightState.load(tmp_path)
    assert len(reloaded.data("baseline")["starts"]) == 2
    again = Night(reloaded, Config(), threading.Event(), log=lambda _: None)
    again.benches.again = True
    calls.clear()
    done = again.baseline()
    assert calls == ["restart", "bench"] and len(done["starts"]) == 3
    assert starts_of(done) == done["starts"] and len(done["throughputs"]) == 6
    # The morning's first start is the apply's restart: no restart before it.
    calls.clear()
    morning = Night(night_state(tmp_path / "m", 1), Config(), threading.Event(), lambda _: None)
    morning.benches.again = True
    morning.benches.starts("morning", "morning", restart_first=False)
    assert calls == ["bench"]
    assert starts_of({"throughputs": [1.0, 2.0]}) == [[1.0, 2.0]]  # a state of before


def test_the_plan_sets_each_sides_starts_aside_before_the_tune():
    config = Config()
    asked = []

    def tune_plan(budget_s):
        asked.append(budget_s)
        return {"start_s": 600.0, "dropped": [{"knob": "tuning.cuda_graph"}]}

    bench_s = bench_estimate_s(config, 3)
    one = split(8 * 3600, bench_s, tune_plan, verdict_starts=1)
    three = split(8 * 3600, bench_s, tune_plan, verdict_starts=3)
    per_start = one["bench_s"] + 600
    assert one["tune_budget_s"] - three["tune_budget_s"] == pytest.approx(4 * per_start, abs=2)
    assert three["verdict_starts"] == 3 and three["dropped"] == [{"knob": "tuning.cuda_graph"}]
    assert asked[-1] == pytest.approx(three["tune_budget_s"], abs=1)
    with pytest.raises(ConfigError, match="fewer --verdict-starts"):
        split(8 * 3600, bench_s, tune_plan, verdict_starts=6)
    assert "cannot hold both its rates" in verdict_line(1)
    assert "hold its rates" in verdict_line(1, Spread(0.02, 40, "x"))


def test_each_start_is_measured_only_on_its_sides_configuration(tmp_path, monkeypatch):
    """Two morning starts: the first runs the applied file; the second's restart comes up on
    another (the file edited meanwhile): the step fails there, its restart's intent done,
    the first start kept and nothing benched on the other configuration."""
    from glm5svc.night import measure

    running = iter(["applied", "someone-elses"])
    acted, benched = [], []
    monkeypatch.setattr(measure, "running_sha256", lambda config: next(running))
    monkeypatch.setattr(measure, "wait_serving", lambda config, stop: None)
    monkeypatch.setattr(measure.units, "act", lambda action: acted.append(action))
    monkeypatch.setattr(Benches, "bench", lambda self, side: benched.append(side) or
                        {"throughputs": [100.0, 101.0]})  # fmt: skip
    night = Night(night_state(tmp_path, 2), Config(), threading.Event(), log=lambda _: None)
    monkeypatch.setattr(night.turn, "wait_for_turn", lambda stop: None)
    monkeypatch.setattr(night.turn, "back_in_rotation", lambda stop: None)
    night.state.begin_step("morning")
    with pytest.raises(measure.BenchFailed, match="does not run the applied configuration"):
        night.benches.starts("morning", "morning", restart_first=False, runs="applied")
    assert acted == ["restart"] and benched == ["morning"]
    assert len(night.state.data("morning")["starts"]) == 1
    assert night.state.step("morning")["done"] == ["restart glm5.service for the morning's start 2"]
    assert night.state.intent("morning") is None
