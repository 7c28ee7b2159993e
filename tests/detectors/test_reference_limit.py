"""The covariate monitor's bounded reference after ``reference_limit``: exact until the limit,
bin counts after it (its checkpoint stays flat on a long stream), the batch path equal to the
per-event path, and the p-values across the switch i.i.d. uniform under no change."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from scipy import stats

from monitor.core.detectors import CovariateMonitor
from monitor.core.detectors import covariate as covariate_module
from monitor.core.martingales import ConformalPValue
from monitor.streams.config import StreamConfig
from monitor.streams.detectors import StreamDetectors
from monitor.streams.state import decode_state, encode_state
from tests.support.states import assert_identical


@pytest.fixture
def small_bins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """50 bins from the 100 scores after the limit, so that a short stream passes it."""
    monkeypatch.setattr(covariate_module, "LIMIT_BINS", 50)
    monkeypatch.setattr(covariate_module, "LIMIT_EDGES", 100)
    yield


def _data(n: int = 1200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X[900:, 0] += 3.0  # leaves the support: an alarm after the switch
    return rng.normal(size=(400, 3)), X


def _monitor(X_cal: np.ndarray, **kw: Any) -> CovariateMonitor:
    return CovariateMonitor("knn", X_cal, threshold=1000.0, rebaseline=50, seed=1, **kw)


def _per_event(monitor: CovariateMonitor, X: np.ndarray) -> list[tuple[float, float, int]]:
    out = []
    for x in X:
        monitor.update(x)
        out.append((monitor.p_value, monitor.log_statistic, monitor.n_alarms))
    return out


def test_exact_until_the_limit_then_bin_counts(small_bins: None) -> None:
    X_cal, X = _data()
    limited, exact = _monitor(X_cal, reference_limit=500), _monitor(X_cal)
    a, b = _per_event(limited, X), _per_event(exact, X)
    assert a[:300] == b[:300]  # 200 reference scores + 300 = the limit: identical so far
    assert all(np.isnan(p) and s == a[299][1] for p, s, _ in a[300:400])  # the bins' scores
    assert not np.isnan(a[400][0]) and a[400] != b[400]
    assert limited.n_alarms >= 1 and limited.changepoint is not None  # it still detects
    with pytest.raises(ValueError, match="exclude each other"):
        _monitor(X_cal, reference_limit=500, max_reference=64)


@pytest.mark.parametrize("bounds", [[0, 1200], [0, 299, 300, 350, 401, 1200],
                                    [*range(0, 1200, 37), 1200]], ids=["all", "edges", "37"])
def test_batch_and_restored_state_equal_per_event(small_bins: None, bounds: list[int]) -> None:
    X_cal, X = _data()
    reference = _monitor(X_cal, reference_limit=500)
    want = _per_event(reference, X)
    monitor = _monitor(X_cal, reference_limit=500)
    got: list[tuple[float, float, int]] = []
    for lo, hi in itertools.pairwise(bounds):
        trace = monitor.update_batch(X[lo:hi])
        got += [(p, s, 0) for p, s in zip(trace.p_value.tolist(),
                                           trace.log_statistic.tolist(), strict=True)]
        monitor = CovariateMonitor.from_state(decode_state(*encode_state(monitor.state_dict())))
    assert np.array_equal([g[:2] for g in got], [w[:2] for w in want], equal_nan=True)
    got_state, want_state = monitor.state_dict(), reference.state_dict()
    for state in (got_state, want_state):  # a batch's last alarms are every alarm it raised
        state["monitor"].pop("last_alarms")
    assert_identical(got_state, want_state)


def _checkpoint_bytes(monitor: CovariateMonitor) -> int:
    text, blob = encode_state(monitor.state_dict())
    return len(text) + len(blob or b"")


def test_checkpoint_stays_flat_over_a_long_stream() -> None:
    """The default configuration (weighted) on 200 000 events without a change: the covariate
    monitor's checkpoint is as large after 200 000 events as after 40 000 (without the limit
    it grows by 8 bytes per event). The threshold is set out of reach: these events have no
    ``ts``, so a budget would run on its event-count threshold, whose false alarms over 200 000
    events are allowed (P ≤ m / (2N) per detector) and would restart the reference."""
    rng = np.random.default_rng(5)
    X_cal = rng.normal(size=(500, 5))
    detectors = StreamDetectors.from_config(
        StreamConfig(name="long", task="regression", calibration="in memory",
                     alarm={"threshold": 1e12}),
        X_cal, np.abs(rng.normal(size=500)),
    )
    covariate = detectors.covariate
    unlimited = CovariateMonitor("knn", X_cal, threshold=1e12)
    sizes, grown = [], []
    for start in range(0, 200_000, 20_000):
        X = rng.normal(size=(20_000, 5))
        covariate.update_batch(X)
        sizes.append(_checkpoint_bytes(covariate))
        if start < 60_000:
            unlimited.update_batch(X)
            grown.append(_checkpoint_bytes(unlimited))
    assert covariate.n_alarms == 0 and covariate._pv is not None and covariate._pv.quantized
    # what still moves: the ≤ 256 uniforms drawn ahead (≈ 20 bytes each) and the bin counts'
    # digits, against 8 bytes per event (160 000 per interval) without the limit
    assert max(sizes[1:]) - min(sizes[1:]) < 6_000, sizes
    assert grown[2] - grown[1] > 8 * 19_000  # the counter-check


def test_p_values_across_the_switch_are_iid_uniform() -> None:
    """2 000 null sequences: 30 exact p-values, 20 scores that fix 8 bins (no p-value), 30
    quantized p-values. Each of steps 30, 31 and 59 is uniform (KS) and consecutive p-values
    across the switch are uncorrelated (|r| within 4 standard errors)."""
    rng = np.random.default_rng(11)
    reps = 2000
    p = np.empty((reps, 60))
    for r in range(reps):
        scores = rng.normal(size=100)
        pv = ConformalPValue(scores[:20], seed=r)
        for t in range(30):
            pv.update(scores[20 + t])
            p[r, t] = pv.p_value
        pv.quantize(scores[50:70], 8)
        for t in range(30):
            pv.update(scores[70 + t])
            p[r, 30 + t] = pv.p_value
    for column in (29, 30, 59):
        assert stats.kstest(p[:, column], "uniform").pvalue > 1e-3, column
    for a, b in ((29, 30), (30, 31), (0, 59)):
        assert abs(np.corrcoef(p[:, a], p[:, b])[0, 1]) < 4 / np.sqrt(reps), (a, b)
