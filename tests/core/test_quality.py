"""The data-quality monitor against its definitions (monitor/core/quality.py): the p-values, the
bets, the statistics (the alarm rules' own classes on each bet's path), the Bonferroni alarm,
batch = per event, the state round trip, the silent-indicator bound and the errors."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from monitor.core.martingales.alarms import CUSUM, ShiryaevRoberts, Ville
from monitor.core.quality import (
    SILENT_BOUND,
    DataQualityMonitor,
    bet_grid,
    binary_p_values,
)

NAMES = [("a", "missing"), ("b", "unseen"), ("c", "out_of_range")]


def _monitor(rule: str = "shiryaev_roberts", threshold: float = 1e12, **kw: object):
    return DataQualityMonitor(NAMES, [400, 300, 200], [20, 3, 0], rule=rule,
                              threshold=threshold, **kw)  # type: ignore[arg-type]


def _stream(seed: int, n: int = 600, rates=(0.05, 0.01, 0.0), jump=(300, 0, 0.3)):
    rng = np.random.default_rng(seed)
    r = np.tile(np.asarray(rates, float), (n, 1))
    at, col, rate = jump
    r[at:, col] = rate
    return rng.uniform(size=r.shape) < r


def test_p_values_are_the_conformal_p_values_with_ties_counted_in_full() -> None:
    rng = np.random.default_rng(0)
    s = rng.uniform(size=(50, 2)) < [0.3, 0.05]
    ref = [list(rng.uniform(size=20) < 0.3), list(rng.uniform(size=30) < 0.05)]
    p = binary_p_values(s, np.array([20, 30]), np.array([sum(ref[0]), sum(ref[1])]))
    for j in range(2):
        bag = [bool(x) for x in ref[j]]
        for t in range(50):
            score = bool(s[t, j])
            # #{i: α_i ≥ α_t} over the reference and the point itself, over their number
            expected = (sum(b >= score for b in bag) + 1) / (len(bag) + 1)
            assert p[t, j] == pytest.approx(expected, rel=1e-15)
            u = rng.uniform()
            smoothed = (sum(b > score for b in bag) + u * (sum(b == score for b in bag) + 1)) / (
                len(bag) + 1)
            assert p[t, j] >= smoothed  # p dominates the exactly uniform smoothed p-value
            bag.append(score)


def test_each_bet_integrates_to_one_and_does_not_increase() -> None:
    """The production step (a one-event Ville update from S = 1 is f_g(p)), integrated exactly:
    f_g is constant between consecutive levels."""
    c, _, _ = bet_grid()
    edges = np.concatenate([[0.0], np.sort(np.unique(c)), [1.0]])
    integral = np.zeros(c.size)
    previous = None
    for lo, hi in itertools.pairwise(edges):
        f = _one_step_factors(0.5 * (lo + hi))
        integral += (hi - lo) * f
        if previous is not None:
            assert np.all(f <= previous)
        previous = f
    assert np.allclose(integral, 1.0, rtol=0, atol=1e-12)
    assert np.all(_one_step_factors(1.0) < 1.0)  # a p-value of 1 loses every bet


def _one_step_factors(p: float) -> np.ndarray:
    """f_g(p) for every bet g, read from the production kernel: one Ville step from S = 1."""
    from monitor.core import quality

    monitor = DataQualityMonitor([("x", "missing")], [10], [1], rule="ville", alpha=1e-12)
    stat = monitor._stat.copy()
    cusum, cp = np.ones_like(stat), np.zeros(stat.shape, np.int64)
    quality._detect(0, np.array([[p]]), np.array([[True]]), np.array([np.inf]),
                    *quality._GRID, stat, cusum, cp, cp.copy(), np.zeros(1, np.int64), 0, 1.3)
    return stat[0]


@pytest.mark.parametrize("rule", ["ville", "cusum", "shiryaev_roberts"])
def test_statistics_are_the_alarm_rules_on_each_bets_martingale(rule: str) -> None:
    s = _stream(1)
    monitor = _monitor(rule, alpha=1e-12) if rule == "ville" else _monitor(rule)
    monitor.update_batch(s)
    p = binary_p_values(s, np.array([400, 300, 200]), np.array([20, 3, 0]))
    c, win, lose = bet_grid()
    for j in range(3):
        for g in range(0, c.size, 7):
            log_s = np.cumsum(np.log(np.where(p[:, j] <= c[g], win[g], lose[g])))
            ref = {"ville": Ville(alpha=0.5), "cusum": CUSUM(2.0),
                   "shiryaev_roberts": ShiryaevRoberts(2.0)}[rule]
            ref.update_many(log_s)
            assert math.log(monitor._stat[j, g]) == pytest.approx(ref.log_statistic, abs=1e-9)


def test_alarm_when_an_indicator_reaches_k_times_the_threshold() -> None:
    s = _stream(2)
    quiet = _monitor()
    log_d = []
    for row in s:
        quiet.update(row)
        log_d.append(max(quiet.log_e.values()))
    threshold = 2000.0
    first = int(np.flatnonzero(np.asarray(log_d) >= math.log(3 * threshold))[0])
    monitor = _monitor(threshold=threshold, rebaseline=0)
    monitor.update_batch(s)
    (alarm,) = monitor.last_alarms
    assert alarm.event.index == first
    top = alarm.indicators[0]
    assert (top["feature"], top["rate"], top["alarmed"]) == ("a", "missing", True)
    assert top["changepoint_index"] == alarm.event.changepoint
    assert 280 <= alarm.event.changepoint <= first
    assert top["calibration_rate"] == 0.05 and top["rate_after"] > 0.15


def test_batch_equals_per_event_with_budget_thresholds_and_rebaselining() -> None:
    s = np.vstack([_stream(3), _stream(4), _stream(5)])
    thresholds = np.repeat([300.0, 500.0, 400.0], s.shape[0] // 3)
    batch, single = _monitor(threshold=10.0, rebaseline=50), _monitor(threshold=10.0,
                                                                      rebaseline=50)
    seen: list[tuple[int, dict]] = []
    batch.update_batch(s, thresholds, on_alarm=lambda i, a: seen.append((i, a.to_json())))
    alarms = []
    for i, row in enumerate(s):
        single.update_batch(row[None], thresholds[i : i + 1])
        alarms += [(i, a.to_json()) for a in single.last_alarms]
    assert len(alarms) >= 2 and seen == alarms
    assert [a.to_json() for a in batch.last_alarms] == [a for _, a in alarms]
    one, two = batch.state_dict(), single.state_dict()
    one.pop("last_alarms"), two.pop("last_alarms")
    assert one == two


def test_state_round_trip_continues_exactly() -> None:
    s = _stream(6, n=900)
    whole, first = _monitor(threshold=200.0), _monitor(threshold=200.0)
    whole.update_batch(s)
    first.update_batch(s[:450])
    restored = DataQualityMonitor.from_state(json.loads(json.dumps(first.state_dict())))
    restored.update_batch(s[450:])
    assert restored.n_alarms == whole.n_alarms >= 1
    one, two = restored.state_dict(), whole.state_dict()
    one.pop("last_alarms"), two.pop("last_alarms")
    assert one == two


def test_an_indicator_that_never_fires_stays_below_its_bound() -> None:
    """Deterministic: p = 1 on every event, every bet loses, D_j rises to SILENT_BOUND from
    below; so no alarm at any k·threshold above it, and an alarm just below it."""
    zeros = np.zeros((20_000, 3), bool)
    quiet = DataQualityMonitor(NAMES, [400, 300, 200], [0, 0, 0], threshold=SILENT_BOUND / 3 + 1)
    quiet.update_batch(zeros)
    assert quiet.n_alarms == 0
    assert max(quiet.log_e.values()) == pytest.approx(math.log(SILENT_BOUND), abs=1e-6)
    assert max(quiet.log_e.values()) < math.log(SILENT_BOUND)
    below = DataQualityMonitor(NAMES, [400, 300, 200], [0, 0, 0], threshold=SILENT_BOUND / 3 - 1)
    below.update_batch(zeros)
    assert below.n_alarms > 0


def test_bad_input_names_the_row_and_the_indicator() -> None:
    monitor = _monitor()
    with pytest.raises(ValueError, match=r"row 1, 'b' unseen: 0\.5 is not 0 or 1"):
        monitor.update_batch([[0, 0, 0], [0, 0.5, 0]])
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        monitor.update_batch([[0, 1]])
    with pytest.raises(ValueError, match=r"reference_ones\[1\] = 9 must lie in \[0"):
        DataQualityMonitor(NAMES, [400, 8, 200], [20, 9, 0])
    with pytest.raises(ValueError, match="indicator rate must be one of"):
        DataQualityMonitor([("a", "absent")], [10], [0])
    with pytest.raises(ValueError, match="ville alarms at 1/alpha"):
        _monitor("ville").update_batch([[0, 0, 0]], thresholds=[100.0])
