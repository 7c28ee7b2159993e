"""Batch scoring shortcuts (issue #5): ``CovariateMonitor.prepare`` and the one-row quantile
transform must give exactly the per-event results, bit for bit, or a replay after a crash (with
other poll-batch boundaries) would not reproduce the stored results."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.detectors import CovariateMonitor
from monitor.core.detectors.conditional import QuantileNormalizer
from monitor.core.detectors.covariate import PREPARED_ROWS
from monitor.streams.state import encode_state


def shifted_stream(seed: int, n: int = 600, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X_cal = rng.standard_t(3, size=(400, d))
    X = np.vstack([rng.standard_t(3, size=(n // 2, d)), rng.normal(4.0, 1.0, size=(n // 2, d))])
    return X_cal, X


@pytest.mark.parametrize("scorer", ["knn", "mahalanobis"])
@pytest.mark.parametrize("seed", range(4))
def test_prepared_scores_give_the_per_event_results(scorer: str, seed: int) -> None:
    X_cal, X = shifted_stream(seed)
    alone = CovariateMonitor(scorer, X_cal, threshold=100.0, rebaseline=50, seed=seed)
    prepared = alone.clone()
    alarms: dict[str, list[int]] = {"alone": [], "prepared": []}
    for start in range(0, X.shape[0], 97):  # poll batches of 97 rows
        batch = X[start : start + 97]
        prepared.prepare(batch)
        for t, x in enumerate(batch, start=start):
            alone.update(x)
            prepared.update(x)
            assert prepared.p_value == alone.p_value or np.isnan(alone.p_value)
            assert prepared.outside_support == alone.outside_support
            assert prepared.is_outside(x[None, :]).tolist() == alone.is_outside(
                x[None, :]).tolist()
            alarms["alone"] += [t] * alone.alarm
            alarms["prepared"] += [t] * prepared.alarm
    assert alarms["alone"], "the shift should raise an alarm"
    assert alarms["prepared"] == alarms["alone"]
    assert encode_state(prepared.state_dict()) == encode_state(alone.state_dict())


def test_prepared_rows_are_bounded_and_not_state() -> None:
    X_cal, X = shifted_stream(0, n=PREPARED_ROWS // 2)
    monitor = CovariateMonitor("knn", X_cal)
    before = encode_state(monitor.state_dict())
    for k in range(3):
        monitor.prepare(X + k)  # 1.5 x PREPARED_ROWS distinct rows
    assert len(monitor._prepared) == PREPARED_ROWS
    assert encode_state(monitor.state_dict()) == before  # no state change
    restored = CovariateMonitor.from_state(monitor.state_dict())
    assert restored._prepared == {}


def test_prepare_checks_the_width() -> None:
    X_cal, X = shifted_stream(0)
    with pytest.raises(ValueError, match="columns"):
        CovariateMonitor("knn", X_cal).prepare(X[:, :2])


@pytest.mark.parametrize("seed", range(20))
def test_one_row_quantile_transform_equals_the_batch_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, d = int(rng.integers(2, 1500)), int(rng.integers(1, 8))
    X = np.round(rng.standard_t(2, size=(m, d)), int(rng.integers(0, 3)))  # ties
    normalizer = QuantileNormalizer(X)
    T = np.vstack([X[:20], np.round(rng.standard_t(2, size=(50, d)), 1), 1e6 * X[:5]])
    batch = normalizer(T)
    for i in range(T.shape[0]):
        assert np.array_equal(normalizer(T[i : i + 1]), batch[i : i + 1])
    loaded = QuantileNormalizer.load(normalizer.state())
    assert np.array_equal(loaded(T[:1]), batch[:1])
