"""Alarm rules: Ville's false-alarm bound, SR/CUSUM average run length, detection, O(1) paths."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from monitor.core.martingales import (
    CUSUM,
    AGrapaBetting,
    AlarmRule,
    BettingFunction,
    CompositeJumper,
    PlugInPower,
    PowerBetting,
    ShiryaevRoberts,
    SimpleJumper,
    SimpleMixture,
    Ville,
    make_alarm_rule,
)
from monitor.core.martingales.alarms.base import CHANGEPOINT_SLACK


@pytest.mark.parametrize(
    "make_bet", [CompositeJumper, lambda: PowerBetting(0.5), SimpleMixture, AGrapaBetting,
                 lambda: AGrapaBetting(forgets=(0.5,), max_bet=0.9), PlugInPower,
                 lambda: PlugInPower(forgets=(1.0,), min_epsilon=0.01)],
    ids=["composite", "power-0.5", "mixture", "agrapa", "agrapa-fast-0.9", "plug_in_power",
         "plug_in_power-last-0.01"],
)
def test_ville_false_alarm_rate_is_at_most_alpha(make_bet: Callable[[], BettingFunction]) -> None:
    """P(sup S_n ≥ 1/α) ≤ α: over 1000 uniform streams of 300 steps, rate ≤ α + 3 SE."""
    alpha, runs = 0.1, 1000
    rng = np.random.default_rng(0)
    alarms = 0
    for _ in range(runs):
        rule = Ville(alpha)
        alarms += rule.update_many(make_bet().update_many(rng.uniform(size=300))) is not None
    assert alarms / runs <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def run_lengths(make_bet: Callable[[], BettingFunction], make_rule: Callable[[], AlarmRule],
                runs: int, cap: int, seed: int) -> np.ndarray:
    """Steps to the first alarm on uniform p-values; runs still quiet at ``cap`` count as cap."""
    rng = np.random.default_rng(seed)
    out = np.empty(runs)
    for r in range(runs):
        bet, rule, n = make_bet(), make_rule(), 0
        while n < cap:
            hit = rule.update_many(bet.update_many(rng.uniform(size=1000)))
            if hit is not None:
                n += hit + 1
                break
            n += 1000
        out[r] = min(n, cap)
    return out


@pytest.mark.parametrize(
    ("make_bet", "rule_cls"),
    [(CompositeJumper, ShiryaevRoberts), (lambda: SimpleJumper(0.1), ShiryaevRoberts),
     (lambda: PowerBetting(0.5), ShiryaevRoberts), (lambda: PowerBetting(0.5), CUSUM),
     (AGrapaBetting, ShiryaevRoberts), (lambda: AGrapaBetting((0.5,), 0.9), ShiryaevRoberts),
     (PlugInPower, ShiryaevRoberts), (lambda: PlugInPower((1.0,), 0.01), ShiryaevRoberts)],
    ids=["sr-composite", "sr-simple-0.1", "sr-power-0.5", "cusum-power-0.5", "sr-agrapa",
         "sr-agrapa-fast-0.9", "sr-plug_in_power", "sr-plug_in_power-last-0.01"],
)
def test_mean_run_length_is_at_least_threshold(
    make_bet: Callable[[], BettingFunction], rule_cls: type[CUSUM | ShiryaevRoberts]
) -> None:
    """ARL ≥ c: mean of 300 null run lengths ≥ c - 3 SE (censoring at 20 000 only lowers it).

    SR with the Composite Jumper is nearly tight (its J = 1 member keeps R_n ≥ n/5), so this
    is a sharp check of the SR recursion, not a vacuous one.
    """
    threshold = 100.0
    lengths = run_lengths(make_bet, lambda: rule_cls(threshold), runs=300, cap=20_000, seed=1)
    se = lengths.std(ddof=1) / math.sqrt(lengths.size)
    assert lengths.mean() >= threshold - 3 * se


@pytest.mark.parametrize("rule", ["ville", "cusum", "shiryaev_roberts"])
def test_shifted_stream_alarms_near_the_change(rule: str) -> None:
    rng = np.random.default_rng(2)
    ps = np.concatenate([rng.uniform(size=400), rng.uniform(0, 0.1, size=200)])
    alarm = make_alarm_rule(rule, threshold=1000.0, alpha=0.001)
    jumper = CompositeJumper()
    for p in ps:
        jumper.update(p)
        alarm.update(jumper.log_martingale)
        if alarm.alarm:
            break
    assert alarm.alarm and 400 < alarm.n <= 460
    # every rule estimates the change from the path (tests/martingales/test_changepoint.py)
    assert alarm.changepoint is not None and abs(alarm.changepoint - 400) <= 30


def test_cusum_and_sr_statistics_match_their_definitions() -> None:
    """O(1) recursions equal the O(n) definitions γ_n = max S_n/S_i, R_n = Σ S_n/S_i."""
    rng = np.random.default_rng(3)
    log_s = np.cumsum(rng.normal(0, 0.3, size=300))
    cusum, sr = CUSUM(1e9), ShiryaevRoberts(1e9)
    full = np.concatenate([[0.0], log_s])
    for n, x in enumerate(log_s, start=1):
        cusum.update(x)
        sr.update(x)
        past = full[:n]
        assert cusum.log_statistic == pytest.approx(x - past.min(), abs=1e-12)
        assert sr.log_statistic == pytest.approx(x + np.log(np.exp(-past).sum()), abs=1e-9)
        assert cusum._min.argmin == sr._min.argmin == n - 1 - int(np.argmin(past[::-1]))
        # the last i < n with log S_i within CHANGEPOINT_SLACK of min_{j<=i} log S_j
        near = past <= np.minimum.accumulate(past) + CHANGEPOINT_SLACK
        assert cusum.changepoint == sr.changepoint == int(np.flatnonzero(near)[-1])


@pytest.mark.parametrize("rule", ["ville", "cusum", "shiryaev_roberts"])
def test_update_many_equals_repeated_update(rule: str) -> None:
    rng = np.random.default_rng(4)
    log_s = CompositeJumper().update_many(
        np.concatenate([rng.uniform(size=500), rng.uniform(0, 0.2, 200), rng.uniform(size=99)])
    )
    one = make_alarm_rule(rule, threshold=50.0, alpha=0.02)
    many = make_alarm_rule(rule, threshold=50.0, alpha=0.02)
    first = None
    for i, x in enumerate(log_s):
        one.update(x)
        if one.alarm and first is None:
            first = i
    hit = many.update_many(log_s[:333])
    later = many.update_many(log_s[333:])
    got = hit if hit is not None else (None if later is None else 333 + later)
    assert got == first is not None
    assert one.state_dict() == many.state_dict()
    assert many.update_many(log_s[:10]) is None  # already in alarm: it does not switch on again


def test_statistic_is_capped_and_threshold_properties() -> None:
    rule = ShiryaevRoberts(threshold=100.0)
    rule.update(5000.0)
    assert rule.alarm and rule.statistic == 1e300 and rule.log_statistic == 5000.0
    assert rule.threshold == 100.0 and rule.log_threshold == pytest.approx(math.log(100.0))
    assert Ville(0.01).threshold == 100.0 and Ville(0.01).changepoint is None
    rule.reset()
    assert not rule.alarm and rule.n == 0 and rule.changepoint is None


def test_invalid_arguments_name_the_valid_values() -> None:
    with pytest.raises(ValueError, match="ville, cusum, shiryaev_roberts"):
        make_alarm_rule("page", threshold=10.0, alpha=0.1)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        Ville(alpha=1.5)
    with pytest.raises(ValueError, match="> 1"):
        CUSUM(threshold=0.5)
    with pytest.raises(ValueError, match="NaN"):
        CUSUM().update(float("nan"))
