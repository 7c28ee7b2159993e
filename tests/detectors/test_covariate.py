from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import CovariateMonitor
from monitor.core.martingales import ConformalPValue
from monitor.core.ood import make_scorer
from monitor.streams.state import encode_state
from tests.support.toy_streams import Toy, make_toy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"betting": "kelly"}, "betting must be one of"),
        ({"rule": "page"}, "rule must be one of"),
        ({"threshold": 1.0}, "threshold"),
        ({"alpha": 0.0}, "alpha"),
        ({"rebaseline": -1}, "rebaseline"),
        ({"rebaseline": 1}, "rebaseline"),
        ({"max_reference": 1}, "max_reference"),
        ({"seed": 1.5}, "seed"),
        ({"fit_fraction": 1.0}, "fit_fraction"),
        ({"fit_fraction": 0.999}, "leaves no room"),
        ({"support_level": 0.0}, "support_level"),
        ({"support_history": 0}, "support_history"),
    ],
)
def test_invalid_arguments_name_valid_values(
    toy: Toy, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CovariateMonitor("knn", toy.X_cal, **kwargs)


def test_bad_scorer_and_calibration(toy: Toy) -> None:
    with pytest.raises(ValueError, match="scorer name"):
        CovariateMonitor("nearest", toy.X_cal)
    with pytest.raises(ValueError, match="Scorer"):
        CovariateMonitor(42, toy.X_cal)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2-d"):
        CovariateMonitor("knn", toy.X_cal[:3])
    with pytest.raises(ValueError, match="3 finite"):
        CovariateMonitor("knn", toy.X_cal).update([1.0, 2.0])


def test_arguments_are_stored_verbatim(toy: Toy) -> None:
    scorer = make_scorer("knn", standardize=True, normalize=False, k=3)
    monitor = CovariateMonitor(scorer, toy.X_cal, rule="cusum", threshold=500.0, seed=None)
    assert monitor.scorer is scorer and monitor.calibration_X is toy.X_cal
    assert (monitor.rule, monitor.threshold, monitor.seed) == ("cusum", 500.0, None)
    assert not scorer.is_fitted  # the monitor fits a clone


def test_reference_comes_from_the_split_not_fitted_on(toy: Toy) -> None:
    """Exchangeability: the reference scores are those of calibration rows the scorer did not
    see; a row the 1-NN scorer was fitted on would score 0 (its own nearest neighbour)."""
    monitor = CovariateMonitor("knn", toy.X_cal, fit_fraction=0.5, threshold=1e9)
    state = monitor.state_dict()
    reference = np.asarray(state["p_values"]["reference"]["scores"])
    assert reference.size == 200
    assert np.all(reference > 0.0)
    assert np.sum(monitor.nonconformity(toy.X_cal) < 1e-6) == 200  # the fitted half


def test_p_values_equal_the_core_online_p_values(toy: Toy) -> None:
    monitor = CovariateMonitor("knn", toy.X_cal, threshold=1e9, seed=5)
    scores = monitor.nonconformity(toy.X[:200])
    reference = np.asarray(monitor.state_dict()["p_values"]["reference"]["scores"])
    seed = monitor.state_dict()["p_values"]["seed"]
    core = ConformalPValue(reference, seed=seed)
    for x, s in zip(toy.X[:200], scores, strict=True):
        monitor.update(x)
        core.update(s)
        assert monitor.p_value == core.p_value


def _per_event(monitor: CovariateMonitor, X: np.ndarray) -> list[int]:
    alarms = []
    for x in X:
        monitor.update(x)
        alarms += [a.index for a in monitor.last_alarms]
    return alarms


@pytest.mark.parametrize("rule", ["shiryaev_roberts", "cusum", "ville"])
@pytest.mark.parametrize("rebaseline", [0, 40])
@pytest.mark.parametrize("max_reference", [None, 50])
def test_update_many_equals_per_event_updates(
    rule: str, rebaseline: int, max_reference: int | None
) -> None:
    toy = make_toy(seed=11, n=1500)
    kw: dict[str, Any] = {
        "rule": rule,
        "threshold": 100.0,
        "alpha": 0.05,
        "rebaseline": rebaseline,
        "max_reference": max_reference,
    }
    one, batch = (CovariateMonitor("knn", toy.X_cal, **kw) for _ in range(2))
    alarms_one = _per_event(one, toy.X)
    alarms_batch: list[int] = []
    for chunk in np.array_split(toy.X, [7, 300, 301, 900]):
        batch.update_many(chunk)
        alarms_batch += [a.index for a in batch.last_alarms]
    assert alarms_one and alarms_batch == alarms_one
    assert encode_state(_without_last_alarms(batch)) == encode_state(_without_last_alarms(one))
    assert repr(batch.p_value) == repr(one.p_value)


def _without_last_alarms(monitor: CovariateMonitor) -> dict[str, Any]:
    """The state, minus the alarms of the last call (one event vs a whole batch)."""
    state = monitor.state_dict()
    state["monitor"].pop("last_alarms")
    return state


def test_alarm_then_warm_up_then_fresh_reference() -> None:
    toy = make_toy(seed=1)
    monitor = CovariateMonitor("knn", toy.X_cal, threshold=1000.0, rebaseline=100)
    alarms = _per_event(monitor, toy.X)
    first = alarms[0]
    assert toy.change <= first < toy.change + 40
    assert all(b > a + 100 for a, b in itertools.pairwise(alarms))  # no alarm in warm-up
    # After the warm-up the reference is exactly the 100 warm-up scores plus later updates.
    fresh = CovariateMonitor("knn", toy.X_cal, threshold=1000.0, rebaseline=100)
    _per_event(fresh, toy.X[: first + 101])
    assert fresh.phase == "monitoring"
    assert fresh.state_dict()["p_values"]["reference"]["scores"].size == 100


def test_changepoint_is_absolute_after_rebaselining() -> None:
    toy = make_toy(seed=2, n=1400, change=300)
    X = toy.X.copy()
    X[900:, 1] += 8.0  # a second shift, after re-baselining on the first
    monitor = CovariateMonitor("knn", toy.X_cal, threshold=1000.0, rebaseline=200)
    seen = []
    for x in X:
        monitor.update(x)
        if monitor.alarm:
            seen.append((monitor.n_seen - 1, monitor.changepoint))
    second = next(s for s in seen if s[0] >= 900)
    cp = second[1]
    assert cp is not None and 850 <= cp <= second[0]  # in stream positions, not since the reset


def test_rebaseline_zero_stops_monitoring(toy: Toy) -> None:
    monitor = CovariateMonitor("knn", toy.X_cal, threshold=1000.0, rebaseline=0)
    alarms = _per_event(monitor, toy.X)
    assert len(alarms) == 1 and monitor.phase == "stopped"
    assert np.isnan(monitor.p_value) and monitor.n_seen == len(toy.X)
    assert monitor.changepoint is not None  # frozen at the alarm's evidence


def test_support_threshold_is_the_calibration_quantile(toy: Toy) -> None:
    monitor = CovariateMonitor("knn", toy.X_cal, support_level=0.01)
    reference = np.asarray(monitor.state_dict()["p_values"]["reference"]["scores"])
    m = reference.size
    p_cal = (1 + (reference[None, :] >= reference[:, None]).sum(axis=1)) / (m + 1)
    inside_top = reference[p_cal > 0.01].max()
    assert monitor.support_threshold >= inside_top
    assert np.sum(reference > monitor.support_threshold) == np.floor(0.01 * (m + 1)) - 1
    tiny = CovariateMonitor("knn", toy.X_cal, support_level=1.0 / (m + 1))
    assert tiny.support_threshold == reference.max()


def test_outside_fraction_tracks_the_shift(toy: Toy) -> None:
    monitor = CovariateMonitor("knn", toy.X_cal, threshold=1e9)
    monitor.update_many(toy.X)
    assert monitor.outside_fraction(0, toy.change - 1) < 0.05
    assert monitor.outside_fraction(toy.change) > 0.95
    assert np.isnan(monitor.outside_fraction(5000))


def test_coordinate_test_flags_inputs_beyond_the_range_despite_wild_rows() -> None:
    """Heavy-tailed calibration values in one coordinate inflate the 1-NN scores of a few
    reference rows; an input beyond the range of another coordinate is still outside."""
    rng = np.random.default_rng(2)
    X_cal = rng.normal(size=(400, 3))
    X_cal[:, 2] = rng.standard_cauchy(400)
    monitor = CovariateMonitor("knn", X_cal, support_level=0.01)
    shifted = rng.normal(size=(50, 3)) + np.array([8.0, 0.0, 0.0])
    shifted[:, 2] = rng.standard_cauchy(50)
    assert np.all(monitor.nonconformity(shifted) < monitor.support_threshold)  # score test blind
    assert np.all(monitor.is_outside(shifted))
    inside = rng.normal(size=(4000, 3))
    inside[:, 2] = rng.standard_cauchy(4000)
    assert monitor.is_outside(inside).mean() < 3 / 201 + 0.01  # <= d/(m + 1) + 0.01



def test_the_reference_does_not_depend_on_the_blas_thread_count() -> None:
    """Tabular embeddings (one-hot columns scaled by √½, repeated rows): the kNN distance of a
    row to its duplicate is the square root of the product's rounding, which a multi-threaded
    BLAS rounds differently (3 of these 12 calibrations, without the single-thread reference,
    on OpenBLAS/SkylakeX). The API, the CLI and a worker that build one stream must start from
    the same reference, bit for bit."""
    from threadpoolctl import threadpool_limits

    scorer = make_scorer("knn", standardize=False, normalize=False, k=1)
    for seed in range(12):
        rng = np.random.default_rng(seed)
        one_hot = np.sqrt(0.5) * np.eye(6)[rng.integers(0, 6, (120, 4))].reshape(120, 24)
        distinct = np.hstack([one_hot, rng.normal(size=(120, 3))])
        X = distinct[rng.integers(0, 120, 300)]
        states = []
        for threads in (1, 2):
            with threadpool_limits(limits=threads, user_api="blas"):
                states.append(encode_state(CovariateMonitor(scorer, X, seed=seed).state_dict()))
        assert states[0] == states[1], seed


def test_outside_columns_mark_a_value_no_calibration_row_has() -> None:
    """A column that is 0 on every calibration row (a tabular unseen-category column): a row
    with a nonzero value there is outside the support whatever its score; the parameter
    round-trips through the state, and a monitor without it keeps the state it had."""
    rng = np.random.default_rng(5)
    # 1 000 rows of 6 columns: a reference of 500 and a Bonferroni level at its floor 1/501,
    # where the per-coordinate limit of the all-zero column comes out +inf (the floor's
    # floating point: the closing note of issue #27), so only outside_columns flags the row
    # (a small value near the centre: the x-only score does not flag it either)
    X = np.column_stack([rng.normal(size=(1000, 5)), np.zeros(1000)])
    with_columns = CovariateMonitor("knn", X, outside_columns=(5,))
    plain = CovariateMonitor("knn", X)
    row = np.array([[0.0, 0.0, 0.0, 0.0, 0.0, 0.01]])
    assert with_columns.is_outside(row).tolist() == [True]
    assert with_columns.is_outside(row * [1, 1, 1, 1, 1, 0]).tolist() == [False]
    assert "outside_columns" not in plain.state_dict()["params"]
    restored = CovariateMonitor.from_state(with_columns.state_dict())
    assert restored.outside_columns == (5,) and restored.is_outside(row).tolist() == [True]
