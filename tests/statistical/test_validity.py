"""Validity on exchangeable real streams: Ville at alpha = 0.05 and the ARL of CUSUM / SR.

Streams are random permutations of held-out Shuttle rows (the model was fitted on another
split), so calibration and stream events are exchangeable and the guarantees apply exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.bench_statistical import run_length, validity
from monitor.core.martingales import conformal_p_values, make_alarm_rule, make_betting
from monitor.core.ood import make_scorer
from monitor.ops.datasets import load_shuttle_regression, make_stream

ALPHA = 0.05
WORKERS = 2  # processes: CI has 2 cores


def _check_validity(n_streams: int) -> dict[str, float]:
    result = validity(n_streams, alpha=ALPHA, workers=WORKERS)
    bound = ALPHA + 3.0 * math.sqrt(ALPHA * (1 - ALPHA) / n_streams)
    assert result["bound"] == pytest.approx(bound)
    for detector, rate in result["rates"].items():
        assert rate <= bound, f"{detector}: {rate:.3f} of streams alarmed (bound {bound:.3f})"
    return result["rates"]


def test_ville_false_alarm_rate_fast() -> None:
    """CTM, WCTM (estimated weights from t = 0) and covariate monitor (split-fitted 1-NN)."""
    _check_validity(60)


@pytest.mark.slow
def test_ville_false_alarm_rate_full() -> None:
    _check_validity(500)


def _check_run_length(n_streams: int, arl: float, horizon: int) -> None:
    for rule in ("cusum", "shiryaev_roberts"):
        result = run_length(n_streams, rule, arl, horizon, workers=WORKERS)
        for detector in ("covariate", "ctm"):
            stats = result[detector]
            # Runs still quiet at the horizon count as the horizon: the mean is a lower bound of
            # the true mean run length, so the check is conservative.
            assert stats["mean"] + 3.0 * stats["se"] >= arl, (rule, detector, stats)


def test_mean_run_length_fast() -> None:
    _check_run_length(40, 100.0, 1500)


@pytest.mark.slow
def test_mean_run_length_full() -> None:
    _check_run_length(300, 200.0, 4000)


def test_scoring_the_fitted_points_breaks_validity() -> None:
    """The counter-check of the split: a 1-NN scorer fitted on all calibration rows and compared
    with those same rows (each is its own nearest neighbour) alarms on stationary streams."""
    alarms = []
    for seed in range(10):
        data = make_stream(load_shuttle_regression(), [("stable", 2000)], 1000, seed)
        scorer = make_scorer("knn", standardize=True, normalize=False, k=1)
        scorer.fit(data.X_calibration)
        ps = conformal_p_values(-scorer.score(data.X), -scorer.score(data.X_calibration), seed)
        rule = make_alarm_rule("ville", alpha=ALPHA)
        alarms.append(
            rule.update_many(make_betting("composite_jumper").update_many(ps)) is not None
        )
    assert np.mean(alarms) > 0.5
