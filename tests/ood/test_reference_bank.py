"""The reference bank: a calibration of at most B rows is read whole (the results of before),
a larger one through a seeded subsample of B rows, and the p-values stay valid."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.decisions import OODDecider
from monitor.core.detectors import CovariateMonitor
from monitor.core.ood import make_scorer, reference_bank
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.factory import build_detectors, build_ood
from tests.support.states import assert_identical


def _knn_decider(bank: int | None, seed: int = 0) -> OODDecider:
    return OODDecider("bh", alpha=0.1, window=50, seed=seed, bank=bank,
                      scorers=[make_scorer("knn", k=1, standardize=True, normalize=False)])


def test_a_bank_is_a_seeded_subsample() -> None:
    rows = reference_bank(1000, 200, seed=3)
    assert rows is not None and rows.size == 200 == np.unique(rows).size
    assert rows.min() >= 0 and rows.max() < 1000
    assert np.array_equal(rows, reference_bank(1000, 200, seed=3))
    assert not np.array_equal(rows, reference_bank(1000, 200, seed=4))
    assert reference_bank(1000, 1000, seed=3) is None and reference_bank(5, None, 0) is None


def test_a_small_calibration_is_read_whole() -> None:
    rng = np.random.default_rng(0)
    X_cal, X = rng.normal(size=(400, 4)), rng.normal(size=(300, 4)) + 0.5
    with_bank = CovariateMonitor("knn", X_cal, seed=2, reference_bank=200)  # fits on 200 rows
    without = CovariateMonitor("knn", X_cal, seed=2)
    with_bank.update_many(X)
    without.update_many(X)
    a, b = with_bank.state_dict(), without.state_dict()
    assert a["params"].pop("reference_bank") == 200
    assert_identical(a, b)
    inputs = {"features": X}
    p = _knn_decider(400).fit({"features": X_cal})._runs[0].p_values(inputs)
    q = _knn_decider(None).fit({"features": X_cal})._runs[0].p_values(inputs)
    assert np.array_equal(p, q)


def test_a_large_calibration_is_read_through_the_bank() -> None:
    rng = np.random.default_rng(1)
    X_cal = rng.normal(size=(3000, 4))
    monitor = CovariateMonitor("knn", X_cal, seed=2, reference_bank=500)
    assert monitor._scorer.bank_.shape[0] == 500  # type: ignore[attr-defined]
    decider = _knn_decider(700).fit({"features": X_cal})
    assert decider._runs[0].scorer.bank_.shape[0] == 700  # type: ignore[attr-defined]
    restored = OODDecider.from_state(decider.state_dict())
    assert restored.bank == 700
    with pytest.raises(ValueError, match="bank"):
        OODDecider(bank=1)


def test_banked_p_values_are_valid() -> None:
    """Full-conformal p-values against a bank of 100 of 400 exchangeable rows: over 400
    calibrations × 25 test rows, P(p ≤ u) within 4 standard errors of u (at most u: ties are
    counted against the test point) at u = 0.05, 0.1, 0.5; and the covariate monitor's
    p-values of a null stream are uniform."""
    ps = []
    for seed in range(400):
        rng = np.random.default_rng(seed)
        decider = _knn_decider(100, seed).fit({"features": rng.normal(size=(400, 3))})
        ps.append(decider._runs[0].p_values({"features": rng.normal(size=(25, 3))}))
    p = np.concatenate(ps)
    for u in (0.05, 0.1, 0.5):
        se = np.sqrt(u * (1 - u) / p.size)
        assert abs(np.mean(p <= u) - u) < 4 * se, u
    rng = np.random.default_rng(9)
    monitor = CovariateMonitor("knn", rng.normal(size=(2000, 3)), threshold=1e12,
                               reference_bank=100)
    trace = monitor.update_batch(rng.normal(size=(5000, 3)))
    for u in (0.05, 0.1, 0.5):
        se = np.sqrt(u * (1 - u) / 5000)
        assert abs(np.mean(trace.p_value <= u) - u) < 4 * se, u


@pytest.mark.parametrize(("m", "ood_rows", "covariate_rows"),
                         [(1000, 1000, 500), (1500, 1000, 750), (3000, 1000, 1000)])
def test_the_default_bank(m: int, ood_rows: int, covariate_rows: int) -> None:
    """A stream's default bank (1 000 rows): a calibration of 1 000 rows (the demo's) is read
    whole by both the OOD rule and the covariate score's fit half; a larger one is banked."""
    rng = np.random.default_rng(m)
    X_cal = rng.normal(size=(m, 4))
    calibration = Calibration(X_cal, X_cal[:, 0], X_cal[:, 0] + rng.normal(size=m))
    config = StreamConfig(name="s", task="regression", calibration="in memory")
    decider = build_ood(config, calibration)
    assert decider is not None
    assert decider._runs[0].scorer.bank_.shape[0] == ood_rows  # type: ignore[attr-defined]
    covariate = build_detectors(config, calibration).covariate
    assert covariate._scorer.bank_.shape[0] == covariate_rows  # type: ignore[attr-defined]
