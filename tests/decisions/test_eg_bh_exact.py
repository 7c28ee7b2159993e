"""eg-BH and the decider's windows are bit for bit the implementation they replaced."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.decisions import OODDecider, bh_e_values, e_benjamini_hochberg, ensemble_bh
from monitor.core.decisions.base import BatchDecision, as_p_values
from monitor.core.decisions.eg_bh import DEFAULT_BASE_FRACTION, _bh_e_value_rows
from monitor.core.ood import KNN, Mahalanobis
from tests.support.reference_knn import reference_knn_score


def reference_ensemble_bh(matrix: np.ndarray, alpha: float) -> BatchDecision:
    """ensemble_bh(merge="e_values") before the K BH runs were vectorised (commit d8e94db),
    with the base level alpha for a single run (0.9·alpha for several)."""
    rows = [as_p_values(row) for row in matrix]
    base = alpha if len(rows) == 1 else DEFAULT_BASE_FRACTION * alpha
    mean_e = np.mean([bh_e_values(row, base) for row in rows], axis=0)
    return e_benjamini_hochberg(mean_e, alpha)


def _conformal_like(rng: np.random.Generator, K: int, n: int, m: int) -> np.ndarray:
    """p-values j/(m+1) (many ties), a few very small ones so that BH rejects."""
    P = rng.integers(1, m + 2, size=(K, n)) / (m + 1.0)
    P[:, : n // 8] = rng.integers(1, 3, size=(K, n // 8)) / (m + 1.0)
    return P


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.3])
def test_ensemble_bh_is_the_previous_implementation_bit_for_bit(alpha: float) -> None:
    rng = np.random.default_rng(int(alpha * 100))
    for K, n, m in [(1, 1, 10), (3, 2, 10), (10, 256, 500), (6, 100, 50), (2, 256, 1000)]:
        for _ in range(20):
            P = _conformal_like(rng, K, n, m)
            got, want = ensemble_bh(P, alpha), reference_ensemble_bh(P, alpha)
            assert np.array_equal(got.rejected, want.rejected)
            assert got.threshold.hex() == want.threshold.hex()
    # p-values on the base BH bars 0.9·alpha·k/n up to rounding: the tie slack decides them.
    for n in (7, 10, 13, 30):
        for _ in range(200):
            P = rng.integers(1, 4 * n, size=(4, n)) * (DEFAULT_BASE_FRACTION * alpha / n)
            P = np.minimum(P, 1.0)
            base = DEFAULT_BASE_FRACTION * alpha
            rows = np.array([bh_e_values(row, base) for row in P])
            assert _bh_e_value_rows(P, base).tobytes() == rows.tobytes()
            got, want = ensemble_bh(P, alpha), reference_ensemble_bh(P, alpha)
            assert np.array_equal(got.rejected, want.rejected)
            assert got.threshold.hex() == want.threshold.hex()
    with pytest.raises(ValueError, match=r"p_values\[1\] must hold p-values"):
        ensemble_bh([[0.1, 0.2], [0.1, 1.5]], 0.1)


def test_decider_windows_are_the_previous_scoring_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    cal = rng.normal(size=(1000, 9)) * np.arange(1, 10)
    split_scorers = [KNN(k=5, standardize=True, normalize=False), Mahalanobis(standardize=True)]
    decider = OODDecider(
        "eg_bh", alpha=0.1, window=256, scorers=split_scorers, splits=5, conformal="split"
    ).fit({"features": cal})
    for w in range(4):
        X = rng.normal(size=(256, 9)) * np.arange(1, 10)
        X[:: 9 + w] += 4.0 * np.arange(1, 10)
        P = np.vstack(
            [
                np.searchsorted(
                    run.calibration,
                    reference_knn_score(run.scorer, X)
                    if isinstance(run.scorer, KNN)
                    else run.scorer.score(X),
                    side="right",
                )
                for run in decider._runs
            ]
        )
        want = reference_ensemble_bh((1.0 + P) / (decider._runs[0].calibration.size + 1.0), 0.1)
        decider.add_many([f"{w}-{i}" for i in range(256)], {"features": X})
        (window,) = decider.windows()
        assert window.n_flagged == int(want.rejected.sum()) > 0
        assert window.threshold.hex() == want.threshold.hex()
        assert window.flagged_ids == tuple(f"{w}-{i}" for i in np.flatnonzero(want.rejected))
