"""Alarm budgets: the event-rate threshold (predictable, persisted, warm-up, updates without an
event time, rate changes) and
Monte Carlo checks of each guarantee with scaled-down budgets (docs/algorithms.md, "Alarm
budgets"); Ville's lifetime alpha spending across restarts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.martingales import BettingFunction, CompositeJumper, Ville
from monitor.core.martingales.alarms import DEFAULT_EVENTS, MAX_RATE, EventRateThreshold

# ----------------------------------------------------------------------------- the estimator


def test_warm_up_runs_on_the_event_count_threshold_then_follows_the_measured_rate() -> None:
    budget = EventRateThreshold(seconds=100.0, share=2, block=8, events=300)
    assert budget.warming_up and budget.rate is None
    thresholds = budget.thresholds(np.arange(24) / 4.0)  # 4 events/s
    assert thresholds[:8].tolist() == [2 * 300.0] * 8  # max(floor, share · events)
    # A block of 8 updates spans 7 gaps of 0.25 s: 4 events/s exactly.
    assert thresholds[8:].tolist() == [2 * 100.0 * 4.0] * 16
    assert budget.rate == 4.0 and not budget.warming_up
    assert EventRateThreshold(seconds=100.0).threshold == DEFAULT_EVENTS  # share 1


def test_updates_without_an_event_time_run_on_the_event_count_threshold() -> None:
    """A NaN time is an update without one: it gets max(floor, share·events) and is left out
    of the blocks, so the rate (and every later threshold) is the one of the timed updates
    alone, wherever the untimed ones fall and however the updates are batched."""
    ts = np.arange(40) / 4.0  # 4 events/s
    timed = EventRateThreshold(seconds=100.0, share=2, block=8, events=300).thresholds(ts)
    rng = np.random.default_rng(3)
    mixed = np.insert(ts, np.sort(rng.integers(0, ts.size, size=25)), math.nan)
    untimed = np.isnan(mixed)
    budget = EventRateThreshold(seconds=100.0, share=2, block=8, events=300, floor=700.0)
    parts = np.concatenate([budget.thresholds(p) for p in np.array_split(mixed, 7)])
    assert parts[untimed].tolist() == [700.0] * 25  # max(700, 2 · 300)
    assert parts[~untimed].tolist() == np.maximum(timed, 700.0).tolist()
    assert budget.rate == 4.0
    never_timed = EventRateThreshold(seconds=100.0, share=2, block=8, events=300)
    assert never_timed.thresholds(np.full(1000, math.nan)).tolist() == [600.0] * 1000
    assert never_timed.warming_up  # an event-count budget for as long as no ts comes


def test_thresholds_do_not_depend_on_how_updates_are_batched() -> None:
    rng = np.random.default_rng(1)
    ts = np.cumsum(rng.exponential(1 / rng.choice([1.0, 50.0], size=2000)))
    whole = EventRateThreshold(seconds=60.0, block=16, horizon=30.0).thresholds(ts)
    budget = EventRateThreshold(seconds=60.0, block=16, horizon=30.0)
    cuts = np.sort(rng.choice(np.arange(1, ts.size), size=70, replace=False))
    parts = np.concatenate([budget.thresholds(part) for part in np.split(ts, cuts)])
    assert np.array_equal(whole, parts)
    assert len(np.unique(whole)) > 5  # the threshold did move


def test_state_round_trips_bit_for_bit_mid_block() -> None:
    rng = np.random.default_rng(2)
    ts = np.cumsum(rng.exponential(0.1, size=1000))
    budget = EventRateThreshold(seconds=10.0, block=32, horizon=20.0)
    budget.thresholds(ts[:517])
    restored = EventRateThreshold.from_state(budget.state_dict())
    assert restored.state_dict() == budget.state_dict()
    assert np.array_equal(restored.thresholds(ts[517:]), budget.thresholds(ts[517:]))


def test_the_floor_is_the_lowest_threshold_and_part_of_the_state() -> None:
    ts = np.arange(64) / 4.0  # 4 events/s: the budget alone gives 2 · 100 · 4 = 800
    floored = EventRateThreshold(seconds=100.0, share=2, block=8, floor=5_000.0)
    thresholds = floored.thresholds(ts[:20])
    assert thresholds[:8].tolist() == [2.0 * DEFAULT_EVENTS] * 8  # warm-up: above the floor
    assert thresholds[8:].tolist() == [5_000.0] * 12
    assert floored.rate == 4.0  # the rate is still measured
    restored = EventRateThreshold.from_state(floored.state_dict())
    assert restored.floor == 5_000.0
    assert np.array_equal(restored.thresholds(ts[20:]), floored.thresholds(ts[20:]))
    # A state written before the floor existed restores with the floor it had, 2.
    old = EventRateThreshold(seconds=100.0, share=2, block=8)
    old.thresholds(ts[:20])
    state = old.state_dict()
    del state["params"]["floor"]
    assert EventRateThreshold.from_state(state).thresholds(ts[20:]).tolist() == [800.0] * 44
    for bad in (1.0, math.inf, math.nan, "5"):
        with pytest.raises(ValueError, match="floor must be a finite number >= 2"):
            EventRateThreshold(seconds=100.0, floor=bad)  # type: ignore[arg-type]


def test_rate_rises_within_a_block_and_falls_only_after_the_horizon() -> None:
    budget = EventRateThreshold(seconds=10.0, block=10, horizon=100.0, buckets=4)
    fast = np.arange(100) / 100.0  # 100 events/s for 1 s
    slow = 1.0 + np.arange(1, 301) / 1.0  # then 1 event/s for 300 s
    budget.thresholds(fast)
    assert budget.rate == pytest.approx(100.0)
    thresholds = budget.thresholds(slow)
    seconds_at_high = slow[thresholds == thresholds[0]]
    # The fast blocks stay in force for a horizon (up to one bucket more), then the rate falls.
    assert 100.0 <= seconds_at_high[-1] - 1.0 <= 100.0 * (1 + 1 / 4) + 10
    assert thresholds[-1] == 10.0
    budget.thresholds(301.0 + np.arange(10) / 1000.0)  # a burst of one block
    assert budget.rate == pytest.approx(1000.0)


def test_events_sharing_one_ts_count_at_the_maximum_rate() -> None:
    budget = EventRateThreshold(seconds=10.0, block=4)
    budget.thresholds(np.full(4, 5.0))
    assert budget.rate == MAX_RATE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"seconds": 0.0}, "seconds"), ({"seconds": 1.0, "share": 0}, "share"),
     ({"seconds": 1.0, "block": 1}, "block"), ({"seconds": math.inf}, "seconds"),
     ({"seconds": 1.0, "events": 0}, "events")],
    ids=["zero-budget", "zero-share", "block-1", "infinite", "zero-events"],
)
def test_bad_arguments_name_the_parameter(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EventRateThreshold(**kwargs)  # type: ignore[arg-type]


def test_infinite_event_times_are_refused_without_a_state_change() -> None:
    budget = EventRateThreshold(seconds=10.0, block=4)
    before = budget.state_dict()
    for bad in (math.inf, -math.inf):
        with pytest.raises(ValueError, match="finite"):
            budget.thresholds([1.0, math.nan, bad])
    assert budget.state_dict() == before


def test_a_state_of_before_the_event_count_warm_up_adopts_it() -> None:
    """A checkpoint written before ``events`` existed (no such parameter, the warm-up's
    threshold stored as the one of 100 000 events/s) loads with the default event-count
    warm-up; one past its warm-up keeps its measured threshold."""
    ts = np.arange(20) / 4.0
    for done, expected in ((3, 2.0 * DEFAULT_EVENTS), (12, 2 * 100.0 * 4.0)):
        budget = EventRateThreshold(seconds=100.0, share=2, block=8)
        budget.thresholds(ts[:done])
        state = budget.state_dict()
        del state["params"]["events"]
        if budget.warming_up:
            state["threshold"] = 2 * 100.0 * MAX_RATE  # what the release before stored
        restored = EventRateThreshold.from_state(state)
        assert restored.threshold == expected
        assert np.array_equal(restored.thresholds(ts[done:]), budget.thresholds(ts[done:]))


# ------------------------------------------------------------------------------ Monte Carlo


def shiryaev_roberts_path(
    n: int, rng: np.random.Generator, betting: type[BettingFunction] = CompositeJumper
) -> np.ndarray:
    """log R_1..R_n of SR over ``betting`` on uniform p-values (the null):
    log R_n = log S_n + log Σ_{i<n} 1/S_i (Vovk et al. 2021, eq. (6)), S_0 = 1."""
    log_s = betting().update_many(rng.uniform(size=n))
    return log_s + np.logaddexp.accumulate(-np.concatenate([[0.0], log_s[:-1]]))


def first_false_alarm(ts: np.ndarray, log_r: np.ndarray, budget: EventRateThreshold) -> float:
    """Event time of the first update whose SR statistic reaches the budget's threshold in
    force then (inf: none)."""
    hits = np.flatnonzero(log_r >= np.log(budget.thresholds(ts)))
    return float(ts[hits[0]]) if hits.size else math.inf


def poisson_times(rng: np.random.Generator, rates: list[tuple[float, float]]) -> np.ndarray:
    """Event times of a Poisson process with rate ``r`` until ``end``, for each (end, r)."""
    out, start = [], 0.0
    for end, rate in rates:
        n = rng.poisson(rate * (end - start))
        out.append(np.sort(rng.uniform(start, end, size=n)))
        start = end
    return np.concatenate(out)


def test_a_stream_keeps_its_time_budget_with_two_detectors_at_different_rates() -> None:
    """Two detectors (5 and 1 updates/s) share a budget T = 100 s (each gets 2·T·r̂): the
    stream's mean time to its first false alarm is ≥ T. 300 streams; the mean, with
    alarm-free streams counted at the 1 000 s cap, must reach T − 3 SE. It must also stay
    below 3T: SR with the Composite Jumper has a mean run length within a few % of its
    threshold, so a mean far above T would mean a threshold far above 2·T·r (an estimator
    that overstates the rate, or a budget not shared)."""
    T, runs, cap = 100.0, 300, 1000.0
    rng = np.random.default_rng(11)
    times = np.empty(runs)
    for r in range(runs):
        first = []
        for rate in (5.0, 1.0):
            ts = poisson_times(rng, [(cap, rate)])
            budget = EventRateThreshold(T, share=2, block=16, horizon=50.0)
            first.append(first_false_alarm(ts, shiryaev_roberts_path(ts.size, rng), budget))
        times[r] = min(*first, cap)
    assert T - 3 * times.std() / math.sqrt(runs) <= times.mean() <= 3 * T


def test_time_budget_holds_through_a_thirtyfold_rate_increase() -> None:
    """P(a false alarm within t) ≤ t / T when the rate jumps from 1/s to 30/s at 50 s:
    t = 200 s, T = 500 s, 300 streams, bound 0.4 + 3 SE. A threshold that stayed at the
    first rate (a rate-blind budget, T·1) alarms on most of these streams."""
    T, t, runs = 500.0, 200.0, 300
    rng = np.random.default_rng(12)
    budgeted = blind = 0
    for _ in range(runs):
        ts = poisson_times(rng, [(50.0, 1.0), (t, 30.0)])
        log_r = shiryaev_roberts_path(ts.size, rng)
        budget = EventRateThreshold(T, share=1, block=16, horizon=100.0)
        budgeted += first_false_alarm(ts, log_r, budget) <= t
        fixed = EventRateThreshold(T, share=1, block=16, horizon=100.0, max_rate=1.0)
        blind += first_false_alarm(ts, log_r, fixed) <= t
    bound = t / T
    assert budgeted / runs <= bound + 3 * math.sqrt(bound * (1 - bound) / runs)
    assert blind / runs > 0.5


def test_at_the_floor_a_slow_stream_has_the_floors_bound() -> None:
    """A slow stream whose budget alone would give a low threshold (T = 50 s at 1 update/s:
    2·T·r = 100) is held to the floor F = 400: P(a false alarm within m updates) ≤ m / F
    (docs/algorithms.md §3b, "The floor"). m = 100, 400 null streams of the plug-in power bet
    (the conditional default), bound 0.25 + 3 SE; the budget alone alarms on more than that."""
    from monitor.core.martingales import PlugInPower

    m, floor, runs = 100, 400.0, 400
    rng = np.random.default_rng(14)
    floored = alone = 0
    for _ in range(runs):
        ts = np.arange(m, dtype=float)  # 1 update/s
        log_r = shiryaev_roberts_path(m, rng, PlugInPower)
        budget = EventRateThreshold(50.0, share=2, block=16, floor=floor)
        floored += first_false_alarm(ts, log_r, budget) < math.inf
        budget = EventRateThreshold(50.0, share=2, block=16)
        alone += first_false_alarm(ts, log_r, budget) < math.inf
    bound = m / floor
    assert floored / runs <= bound + 3 * math.sqrt(bound * (1 - bound) / runs)
    assert alone > floored


# --------------------------------------------------------------------------- Ville spending


def lifetime_false_alarm_rate(spending: str, alpha: float, segments: int, runs: int) -> float:
    """P(any alarm) over ``segments`` forced restarts of 200 uniform p-values each."""
    rng = np.random.default_rng(13)
    hits = 0
    for _ in range(runs):
        rule, bet = Ville(alpha, spending=spending), CompositeJumper()
        for _ in range(segments):
            if rule.update_many(bet.update_many(rng.uniform(size=200))) is not None:
                hits += 1
                break
            rule.reset()
            bet.reset()
    return hits / runs


def test_lifetime_spending_keeps_alpha_over_every_restart() -> None:
    """α = 0.1 over 20 restarts, 1 000 lives: the lifetime rate ≤ α + 3 SE, while the
    per-segment behaviour (α for each segment) exceeds α over the same life."""
    alpha, runs = 0.1, 1000
    lifetime = lifetime_false_alarm_rate("lifetime", alpha, 20, runs)
    assert lifetime <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)
    assert lifetime_false_alarm_rate("per_segment", alpha, 20, runs) > alpha


def test_lifetime_segments_count_restarts_that_saw_updates() -> None:
    rule = Ville(0.05, spending="lifetime")
    assert rule.segment == 1 and rule.threshold == pytest.approx(math.pi**2 / 6 / 0.05)
    rule.reset()  # nothing seen: nothing spent
    assert rule.segment == 1
    rule.update(0.0)
    rule.reset()
    assert rule.segment == 2 and rule.threshold == pytest.approx(4 * math.pi**2 / 6 / 0.05)
    restored = Ville.from_state(rule.state_dict())
    assert restored.segment == 2 and restored.log_threshold == rule.log_threshold
    with pytest.raises(ValueError, match="spending"):
        Ville(0.05, spending="forever")
