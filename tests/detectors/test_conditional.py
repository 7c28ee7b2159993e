from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import ConditionalMonitor
from monitor.core.detectors.conditional import QuantileNormalizer
from monitor.core.martingales import ConformalPValue
from tests.support.toy_streams import Toy, make_toy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weighted": 1}, "weighted"),
        ({"betting": "kelly"}, "betting must be one of"),
        ({"rule": "page"}, "rule must be one of"),
        ({"batch_size": 0}, "batch_size"),
        ({"penalty_alpha": 0.0}, "penalty_alpha"),
        ({"rebaseline": 1}, "rebaseline"),
        ({"max_reference": 100}, "only available with weighted=False"),
        ({"adapt": "later"}, "adapt must be one of"),
        ({"ratio_features": "log"}, "ratio_features must be one of"),
        ({"restart_on_adaptation": "yes"}, "restart_on_adaptation"),
        ({"ratio_learning_rate": 0}, "ratio_learning_rate"),
    ],
)
def test_invalid_arguments_name_valid_values(
    toy: Toy, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ConditionalMonitor(toy.scores_cal, toy.X_cal, **kwargs)


def test_calibration_checks(toy: Toy) -> None:
    with pytest.raises(ValueError, match="needs calibration_X"):
        ConditionalMonitor(toy.scores_cal, None)
    with pytest.raises(ValueError, match="400 calibration scores but 10"):
        ConditionalMonitor(toy.scores_cal, toy.X_cal[:10])
    with pytest.raises(ValueError, match="finite"):
        ConditionalMonitor([1.0, np.nan], None, weighted=False)
    monitor = ConditionalMonitor(toy.scores_cal, toy.X_cal)
    with pytest.raises(ValueError, match="features x"):
        monitor.update(None, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        monitor.update(toy.X[0], float("nan"))


def test_unweighted_p_values_are_the_core_ctm(toy: Toy) -> None:
    monitor = ConditionalMonitor(toy.scores_cal, None, weighted=False, threshold=1e9, seed=3)
    core = ConformalPValue(toy.scores_cal, seed=monitor.state_dict()["p_values"]["seed"])
    for s in toy.scores[:300]:
        monitor.update(None, s)
        core.update(s)
        assert monitor.p_value == core.p_value
    assert monitor.weights_ess == monitor.n_reference == 700
    assert not monitor.adapting and monitor.penalised_fraction == 0.0


def test_adapt_modes(toy: Toy) -> None:
    start = ConditionalMonitor(toy.scores_cal, toy.X_cal)
    assert start.adapting
    signal = ConditionalMonitor(toy.scores_cal, toy.X_cal, adapt="on_signal", threshold=1e9)
    for t in range(50):
        signal.update(toy.X[t], toy.scores[t])
    assert not signal.adapting and signal.log_martingale != 0.0
    signal.start_adaptation()
    assert signal.adapting
    assert signal.log_martingale == 0.0 and signal.changepoint is None  # restarted at A
    ctm = ConditionalMonitor(toy.scores_cal, toy.X_cal, weighted=False)
    ctm.start_adaptation()
    assert not ctm.adapting


def test_adaptation_requested_in_warm_up_starts_after_it() -> None:
    toy = make_toy(seed=5)
    monitor = ConditionalMonitor(
        toy.scores_cal, toy.X_cal, adapt="on_signal", threshold=1000.0, rebaseline=60
    )
    t = 0
    while not monitor.alarm:
        monitor.update(toy.X[t], toy.scores[t])
        t += 1
    monitor.start_adaptation()
    assert monitor.phase == "warming_up" and not monitor.adapting
    for _ in range(60):
        monitor.update(toy.X[t], toy.scores[t])
        t += 1
    assert monitor.phase == "monitoring" and monitor.adapting
    assert monitor.n_reference == 60


def test_rebaseline_uses_the_window_as_calibration() -> None:
    toy = make_toy(seed=6)
    monitor = ConditionalMonitor(toy.scores_cal, toy.X_cal, threshold=1000.0, rebaseline=80)
    first = None
    for t in range(len(toy.scores)):
        monitor.update(toy.X[t], toy.scores[t])
        if monitor.alarm and first is None:
            first = t
        if first is not None and t == first + 80:
            break
    assert first is not None and toy.change <= first < toy.change + 60
    assert monitor.phase == "monitoring" and monitor.n_reference == 80
    assert monitor.adapting  # adapt="start": weights from the fresh reference on


def test_default_betting_ignores_too_good_scores() -> None:
    """Scores far *better* than calibration: the two-sided Composite Jumper alarms, the default
    one-sided Simple Mixture does not."""
    rng = np.random.default_rng(2)
    cal, better = np.abs(rng.normal(size=500)), 0.01 * np.abs(rng.normal(size=600))
    alarms = {}
    for betting in ("mixture", "composite_jumper"):
        monitor = ConditionalMonitor(cal, None, weighted=False, betting=betting, threshold=1e5)
        for s in better:
            monitor.update(None, s)
        alarms[betting] = monitor.n_alarms
    assert alarms["mixture"] == 0 and alarms["composite_jumper"] > 0


def test_quantile_normalizer_is_bounded_and_monotone() -> None:
    rng = np.random.default_rng(0)
    X = np.c_[rng.standard_t(1, size=1000) * 1000, rng.integers(0, 3, size=1000)]
    q = QuantileNormalizer(X)
    Z = q(np.r_[X, [[1e9, 5.0], [-1e9, -5.0]]])
    assert np.all(np.abs(Z) <= 3.3)
    order = np.argsort(X[:, 0])
    assert np.all(np.diff(Z[:1000][order, 0]) >= 0)
    assert abs(np.mean(Z[:1000, 0])) < 0.01 and 0.9 < np.std(Z[:1000, 0]) < 1.1


def test_isolated_far_inputs_are_penalised() -> None:
    """Once the density ratio has learned far inputs, the next one carries a normalised weight
    above ``penalty_alpha`` and its p-value is penalised (a sustained shift fills the reference
    with such points, after which the weights are no longer extreme)."""
    toy = make_toy(seed=7, change=10_000)
    X = toy.X.copy()
    X[300::40, 0] += 50.0
    monitor = ConditionalMonitor(toy.scores_cal, toy.X_cal, ratio_features="raw", threshold=1e9)
    penalised = []
    for t in range(len(X)):
        monitor.update(X[t], toy.scores[t])
        penalised.append(monitor.penalised)
    flagged = np.flatnonzero(penalised)
    assert flagged.size >= 3 and set(flagged) <= set(range(300, len(X), 40))
    assert 0.0 < monitor.penalised_fraction < 0.05
