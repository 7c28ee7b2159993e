"""Weighted conformal p-values and the online density ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
from river import linear_model, preprocessing

from monitor.core.martingales import (
    CompositeJumper,
    ConformalPValue,
    OnlineDensityRatio,
    Ville,
    WeightedConformalPValue,
)


def calibration(rng: np.random.Generator, n: int = 200, d: int = 2) -> tuple[np.ndarray, ...]:
    x = rng.normal(size=(n, d))
    return np.abs(rng.normal(size=n)).round(1), x  # rounded: ties are exercised too


def test_equals_unweighted_before_adaptation_and_until_the_first_refresh() -> None:
    rng = np.random.default_rng(0)
    scores, x = calibration(rng)
    wcp = WeightedConformalPValue(scores, x, OnlineDensityRatio(2, seed=1), batch_size=16, seed=5)
    plain = ConformalPValue(scores, seed=5)
    for t, (s, row) in enumerate(zip(np.abs(rng.normal(size=416)).round(1),
                                     rng.normal(size=(416, 2)), strict=True)):
        if t == 400:  # the untrained model gives w = 1 until the first batch boundary
            wcp.start_adaptation()
        wcp.update(s, row)
        plain.update(s)
        assert wcp.p_value == plain.p_value
        if t == 414:  # all weights still 1: the effective sample size is the reference size
            assert wcp.weights_ess == pytest.approx(615)
    assert wcp.n_reference == plain.n_reference == 616


def weighted_alarm(seed: int, shift: float) -> bool:
    """Exchangeable (shift = 0) or concept-shifted stream, adaptation from t = 0, Ville α."""
    rng = np.random.default_rng(seed)
    scores, x = calibration(rng, n=100)
    wcp = WeightedConformalPValue(scores, x, OnlineDensityRatio(2, seed=seed), seed=seed)
    wcp.start_adaptation()
    jumper, rule = CompositeJumper(), Ville(alpha=0.1)
    for s, row in zip(np.abs(rng.normal(size=250)) + shift, rng.normal(size=(250, 2)),
                      strict=True):
        wcp.update(round(float(s), 1), row)
        jumper.update(wcp.p_value)
        rule.update(jumper.log_martingale)
    return rule.alarm


def test_estimated_weights_keep_the_false_alarm_rate() -> None:
    """Exchangeable data, adaptation at t = 0: Ville alarm rate ≤ α + 3 SE over 200 seeds."""
    runs, alpha = 200, 0.1
    rate = sum(weighted_alarm(seed, shift=0.0) for seed in range(runs)) / runs
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def test_same_harness_detects_a_concept_shift() -> None:
    assert sum(weighted_alarm(seed, shift=1.0) for seed in range(20)) >= 18


@pytest.mark.parametrize("grow", [True, False], ids=["growing-reference", "fixed-reference"])
def test_out_of_support_points_are_penalised_and_the_martingale_grows(grow: bool) -> None:
    rng = np.random.default_rng(0)
    wcp = WeightedConformalPValue(
        np.abs(rng.normal(size=300)), rng.normal(size=(300, 1)),
        OnlineDensityRatio(1, seed=0, learning_rate=0.05), seed=0, grow_reference=grow,
    )
    wcp.start_adaptation()
    for row in rng.normal(1.0, 1.0, size=(320, 1)):  # benign, in-support shift
        wcp.update(float(np.abs(rng.normal())), row)
    assert wcp.penalised_fraction == 0.0
    jumper = CompositeJumper()
    penalised = []
    for row in rng.normal(6.0, 0.2, size=(60, 1)):  # far outside the calibration support
        wcp.update(float(np.abs(rng.normal())), row)
        jumper.update(wcp.p_value)
        penalised.append(wcp.penalised)
    assert all(penalised[:8])  # the onset is always penalised
    if grow:  # joined test points dilute the test weight: the penalty stops after ~1/alpha
        assert not all(penalised)
    else:
        assert all(penalised) and jumper.log_martingale > math.log(100)


def test_penalised_p_value_is_deterministic_and_excludes_own_mass() -> None:
    wcp = WeightedConformalPValue([1.0, 2.0, 3.0], np.zeros((3, 1)),
                                  OnlineDensityRatio(1, seed=0), penalty_alpha=0.2, seed=0)
    wcp.start_adaptation()
    wcp.update(2.0, [0.0])  # w = 1 everywhere: w̃_t = 1/4 ≥ 0.2 → penalised
    assert wcp.penalised and wcp.p_value == 1 / 4  # only the score 3.0 lies above
    assert wcp.penalised_fraction == 1.0


def test_reset_ends_adaptation() -> None:
    rng = np.random.default_rng(1)
    scores, x = calibration(rng)
    wcp = WeightedConformalPValue(scores, x, OnlineDensityRatio(2, seed=1), seed=1)
    wcp.start_adaptation()
    for row in rng.normal(size=(40, 2)):
        wcp.update(0.5, row)
    wcp.reset(scores[:50], x[:50])
    assert not wcp.adapting and wcp.n_reference == 50 and wcp.density_ratio.n_target == 0
    assert wcp.penalised_fraction == 0.0 and math.isnan(wcp.p_value)


def test_invalid_arguments() -> None:
    ratio = OnlineDensityRatio(1)
    with pytest.raises(ValueError, match="batch_size"):
        WeightedConformalPValue([1.0], [[0.0]], ratio, batch_size=0)
    with pytest.raises(ValueError, match="penalty_alpha"):
        WeightedConformalPValue([1.0], [[0.0]], ratio, penalty_alpha=0.0)
    with pytest.raises(ValueError, match="feature rows"):
        WeightedConformalPValue([1.0, 2.0], [[0.0]], ratio)
    with pytest.raises(ValueError, match="clip"):
        OnlineDensityRatio(1, clip=(2.0, 3.0))
    with pytest.raises(ValueError, match="finite"):
        ratio.learn_source([np.nan])


# ------------------------------------------------------------------ density ratio
def trained_ratio(seed: int = 0, shift: float = 1.0) -> OnlineDensityRatio:
    rng = np.random.default_rng(seed)
    ratio = OnlineDensityRatio(3, seed=seed, reservoir=300)
    for row in rng.normal(size=(1000, 3)):
        ratio.learn_source(row)
    for row in rng.normal(size=(1500, 3)) + np.array([shift, 0.0, 0.0]):
        ratio.learn_target(row)
    return ratio


def river_pipeline(ratio: OnlineDensityRatio) -> tuple[preprocessing.StandardScaler,
                                                     linear_model.LogisticRegression]:
    """river's StandardScaler and LogisticRegression holding ``ratio``'s stored model."""
    state = ratio.state_dict()
    scaler = preprocessing.StandardScaler()
    scaler.means.update({int(k): v for k, v in state["scaler"]["means"].items()})
    scaler.vars.update({int(k): v for k, v in state["scaler"]["vars"].items()})
    model = linear_model.LogisticRegression()
    for k, v in state["model"]["weights"].items():
        model._weights[int(k)] = v
    model.intercept = state["model"]["intercept"]
    return scaler, model


def test_vectorised_weights_equal_single_weights_and_river() -> None:
    ratio = trained_ratio()
    X = np.random.default_rng(9).normal(size=(500, 3)) * 3
    w = ratio.weights(X)
    assert [ratio.weight(row) for row in X] == w.tolist()
    scaler, model = river_pipeline(ratio)
    for row, wi in zip(X[:50], w[:50], strict=True):
        prob = model.predict_proba_one(scaler.transform_one(dict(enumerate(row.tolist()))))[True]
        expected = min(max(prob / (1 - prob), 1e-3), 1e3)
        assert wi == pytest.approx(expected, rel=1e-9)


def test_ratio_follows_the_shift_and_is_near_one_without_it() -> None:
    shifted = trained_ratio(shift=1.0)
    assert shifted.weight([2.0, 0.0, 0.0]) > 2.0 > 0.5 > shifted.weight([-2.0, 0.0, 0.0])
    same = trained_ratio(shift=0.0)
    w = same.weights(np.random.default_rng(3).normal(size=(1000, 3)))
    assert 0.8 < float(np.median(w)) < 1.25  # balanced training: no prior-odds factor


def test_weights_are_clipped() -> None:
    ratio = trained_ratio(shift=4.0)
    w = ratio.weights([[1e6, 0, 0], [-1e6, 0, 0]])
    assert w.tolist() == [1e3, 1e-3]
    assert OnlineDensityRatio(2).weights(np.ones((4, 2))).tolist() == [1.0] * 4


def test_reservoir_is_bounded() -> None:
    ratio = trained_ratio()
    assert ratio.n_source == 1000 and len(ratio.state_dict()["source"]) == 300
