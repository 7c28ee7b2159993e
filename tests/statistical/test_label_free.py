"""The label-free harm detector and estimators (monitor.core.estimation), tested statistically.

The real-data runs are ``bench/bench_label_free.py``'s experiments (its docstring describes the
Banana and Shuttle streams); the ``_fast`` versions run in ``make test``, the ``slow`` ones at
the acceptance sizes. Bounds are the proved ones (docs/algorithms.md section 10) with three
binomial standard errors of slack.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.bench_label_free import (
    benign_runs,
    estimation_runs,
    harmful_runs,
    null_runs,
)
from monitor.core.estimation import CalibratedConfidence, FlagRateTest, LabelFreeHarmDetector


def _se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------- the test at the boundary
def _boundary_false_alarms(n_streams: int, length: int, alpha: float = 0.1) -> float:
    """Share of Bernoulli(θ0) streams (the worst case of H0) on which the test alarms."""
    rng = np.random.default_rng(20261204)
    alarms = 0
    for _ in range(n_streams):
        test = FlagRateTest(null_rate=0.12, alpha=alpha)
        alarms += test.update_many(rng.uniform(size=length) < 0.12) is not None
    return alarms / n_streams


def test_flag_rate_test_at_the_null_boundary_fast() -> None:
    # A bet that looked at the flag it bets on (non-predictable λ) alarms on every stream;
    # Ville's bound holds at alpha = 0.1.
    rate = _boundary_false_alarms(300, 3000)
    assert rate <= 0.1 + 3 * _se(0.1, 300), rate


@pytest.mark.slow
def test_flag_rate_test_at_the_null_boundary() -> None:
    rate = _boundary_false_alarms(2000, 20_000)
    assert rate <= 0.1 + 3 * _se(0.1, 2000), rate


# ------------------------------------------------------------- the threshold's Beta law
def _threshold_law(n_draws: int, n_calibration: int = 400) -> tuple[float, float, float]:
    """Over calibration draws: the share whose threshold flags more than θ0 = 0.12 of a large
    fresh sample, the mean of threshold_risk (the Beta law's prediction of that share), and
    the mean flag rate (≤ q = 0.1 in expectation)."""
    rng = np.random.default_rng(11)
    above, risks, rates = [], [], []
    for seed in range(n_draws):
        c = rng.uniform(0.5, 1.0, n_calibration)
        y = (rng.uniform(size=c.size) > c).astype(int)
        det = LabelFreeHarmDetector(CalibratedConfidence(), np.c_[c, 1 - c], y, q=0.1,
                                    tolerance=0.02, seed=seed)
        fresh = rng.uniform(0.5, 1.0, 50_000)
        rate = float(det.flags(np.c_[fresh, 1 - fresh]).mean())
        above.append(rate > det.null_rate)
        risks.append(det.threshold_risk)
        rates.append(rate)
    return float(np.mean(above)), float(np.mean(risks)), float(np.mean(rates))


def _check_threshold_law(n_draws: int) -> None:
    share, risk, rate = _threshold_law(n_draws)
    # k = ⌈(1 − q)(n + 1)⌉ of n = 200 threshold rows: π ~ Beta(20, 181), P(π > 0.12) = 0.164.
    # Dropping the "+ 1" (k = ⌈(1 − q) n⌉, π ~ Beta(21, 180)) makes it 0.227: beyond the slow
    # form's slack (0.03), inside the fast form's (0.075).
    assert abs(share - risk) <= 3 * _se(risk, n_draws) + 0.01, (share, risk)
    assert rate <= 0.1 + 3 * 0.021 / math.sqrt(n_draws), rate


def test_threshold_flag_rate_follows_its_beta_law_fast() -> None:
    _check_threshold_law(300)


@pytest.mark.slow
def test_threshold_flag_rate_follows_its_beta_law() -> None:
    _check_threshold_law(3000)


# ------------------------------------------------------------------------- real-data streams
def _check_null(task: str, n_seeds: int) -> None:
    result = null_runs(task, range(n_seeds), alpha=0.05)
    bound = result["bound"]  # alpha + the threshold's risk = 2 alpha with tolerance None
    assert result["rate"] <= bound + 3 * _se(bound, n_seeds), result
    assert result["flag_rate_mean"] <= 0.1 + 3 * result["flag_rate_se"], result


@pytest.mark.parametrize(("task", "n_seeds"), [("banana", 40), ("shuttle", 10)])
def test_no_false_alarms_beyond_the_bound_fast(task: str, n_seeds: int) -> None:
    _check_null(task, n_seeds)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_no_false_alarms_beyond_the_bound(task: str) -> None:
    _check_null(task, 200)


def _check_harmful(task: str, n_seeds: int) -> None:
    result = harmful_runs(task, range(n_seeds))
    assert result["detected"] >= 0.9, result
    assert result["median_delay"] <= 600, result  # measured: ≈ 250 (docs/explain.md)


@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_detects_a_shift_into_the_hard_region_fast(task: str) -> None:
    _check_harmful(task, 10)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_detects_a_shift_into_the_hard_region(task: str) -> None:
    _check_harmful(task, 100)


def _check_benign(task: str, n_seeds: int) -> None:
    result = benign_runs(task, range(n_seeds))
    benign, stationary = result["benign"], result["stationary"]
    se = math.sqrt(benign["se"] ** 2 + stationary["se"] ** 2 + 1 / n_seeds**2)
    assert benign["rate"] <= stationary["rate"] + 3 * se, result
    # the shift is benign: the model's error after it is within 10 % of the calibration's
    assert abs(benign["loss_after"] / result["calibration_loss"] - 1) < 0.1, result


@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_benign_shift_alarms_no_more_than_a_stationary_stream_fast(task: str) -> None:
    _check_benign(task, 10)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_benign_shift_alarms_no_more_than_a_stationary_stream(task: str) -> None:
    _check_benign(task, 100)


def _check_estimation(task: str, n_seeds: int) -> None:
    result = estimation_runs(task, range(n_seeds))
    ours, paired = result["ours"], result["paired_difference"]
    # no worse than the CBPE / DLE re-implementation (paired over the same windows) ...
    assert paired["mean"] <= 3 * paired["se"] + 1e-12, result
    # ... and far better than holding the calibration's metric constant
    assert ours["mae"] < 0.5 * result["constant"]["mae"], result


@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_window_estimates_track_the_realised_metric_fast(task: str) -> None:
    _check_estimation(task, 3)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["banana", "shuttle"])
def test_window_estimates_track_the_realised_metric(task: str) -> None:
    _check_estimation(task, 30)
