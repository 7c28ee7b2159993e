"""monitor.core.estimation: the estimators' arithmetic, the detector's per-event and batch paths,
its state round trip and its argument checks (the statistical claims are in
tests/statistical/test_label_free.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import beta as beta_law

from monitor.core.estimation import (
    AbsoluteErrorModel,
    CalibratedConfidence,
    FlagRateTest,
    LabelFreeHarmDetector,
    LossEstimator,
    split_calibration,
    with_prediction,
)
from monitor.core.martingales.state import StateError


def _classifier(n: int, seed: int, hard: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Binary probabilities whose top label is right with probability c² (overconfident)."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(size=n) < hard
    c = np.where(low, rng.uniform(0.5, 0.7, n), rng.uniform(0.5, 1.0, n))
    top = rng.integers(0, 2, n)
    p = np.where(top == 1, c, 1 - c)
    right = rng.uniform(size=n) < c**2
    return np.c_[1 - p, p], np.where(right, top, 1 - top)


def _regressor(n: int, seed: int, hard: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The model ŷ = 0 of y ~ N(0, 0.1 + |x₀|); a share ``hard`` of rows has |x₀| > 0.6."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    wide = rng.uniform(size=n) < hard
    x[wide, 0] = rng.choice([-1.0, 1.0], wide.sum()) * rng.uniform(0.6, 1.0, wide.sum())
    y = rng.normal(0.0, 0.1 + np.abs(x[:, 0]))
    return with_prediction(x, np.zeros(n)), y


def _json(state: dict) -> dict:
    """The state through JSON (arrays as lists), as a checkpoint stores it."""
    return json.loads(json.dumps(state, default=lambda a: a.tolist()))


# ------------------------------------------------------------------------------- estimators
def test_isotonic_knots_predict_as_sklearn() -> None:
    from sklearn.isotonic import IsotonicRegression

    Z, y = _classifier(3000, 0)
    est = CalibratedConfidence().fit(Z, y)
    c, right = Z.max(1), (Z.argmax(1) == y).astype(float)
    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(c, right)
    W, _ = _classifier(500, 1)
    np.testing.assert_allclose(est.calibrated_confidence(W), iso.predict(W.max(1)), atol=1e-12)


@pytest.mark.parametrize("method", ["isotonic", "sigmoid"])
def test_calibrated_confidence_corrects_overconfidence(method: str) -> None:
    Z, y = _classifier(20_000, 0)
    est = CalibratedConfidence(method).fit(Z[:10_000], y[:10_000])
    # raw confidence 0.75 on average, true accuracy E[c²] = 0.583
    assert Z.max(1).mean() == pytest.approx(0.75, abs=0.01)
    assert est.estimate(Z[10_000:]) == pytest.approx(est.realised(Z[10_000:], y[10_000:]),
                                                     abs=0.015)
    assert est.estimate_loss(Z[10_000:]) == pytest.approx(
        CalibratedConfidence.realised_loss(Z[10_000:], y[10_000:]), abs=0.015)


def test_sample_weights_calibrate_under_the_weighted_law() -> None:
    """PAPE-style: weights on one subgroup whose calibration differs estimate its accuracy."""
    Z, y = _classifier(20_000, 0)
    group = np.random.default_rng(5).uniform(size=y.size) < 0.5
    y = np.where(group, Z.argmax(1), y)  # the group is always right
    plain = CalibratedConfidence().fit(Z[:10_000], y[:10_000])
    weighted = CalibratedConfidence().fit(Z[:10_000], y[:10_000], sample_weight=group[:10_000])
    target = Z[10_000:][group[10_000:]]
    assert weighted.estimate(target) == pytest.approx(1.0, abs=0.01)
    assert plain.estimate(target) < 0.85
    ones = CalibratedConfidence().fit(Z[:10_000], y[:10_000], sample_weight=np.ones(10_000))
    assert ones.estimate(target) == pytest.approx(plain.estimate(target), abs=1e-12)


def test_absolute_error_model_follows_a_shift_to_the_hard_region() -> None:
    Z, y = _regressor(4000, 0)
    est = AbsoluteErrorModel(max_iter=50).fit(Z, y)
    W, yw = _regressor(4000, 1, hard=0.6)  # |x₀| larger on average: larger errors
    assert est.realised(W, yw) > est.realised(Z, y) + 0.1
    assert est.estimate(W) == pytest.approx(est.realised(W, yw), abs=0.05)


@pytest.mark.parametrize("make", [lambda: CalibratedConfidence("isotonic"),
                                  lambda: CalibratedConfidence("sigmoid"),
                                  lambda: AbsoluteErrorModel(max_iter=20)],
                         ids=["isotonic", "sigmoid", "abs_error"])
def test_estimator_state_round_trip(make) -> None:
    data = _classifier(2000, 0) if isinstance(make(), CalibratedConfidence) else _regressor(
        2000, 0)
    est: LossEstimator = make().fit(*data)
    back = type(est).from_state(_json(est.state_dict()))
    np.testing.assert_array_equal(back.predicted_loss(data[0]), est.predicted_loss(data[0]))
    with pytest.raises(ValueError, match="not fitted"):
        make().predicted_loss(data[0])


def test_estimator_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"method must be one of \['isotonic', 'sigmoid'\]"):
        CalibratedConfidence("beta")
    with pytest.raises(ValueError, match="class probabilities"):
        CalibratedConfidence().fit([[1.5, -0.5]], [0])
    with pytest.raises(ValueError, match="one label per row"):
        CalibratedConfidence().fit([[0.2, 0.8]], [0, 1])
    with pytest.raises(ValueError, match="sample_weight"):
        CalibratedConfidence().fit([[0.2, 0.8], [0.6, 0.4]], [0, 1], sample_weight=[-1, 1])
    with pytest.raises(ValueError, match="max_iter must be an integer >= 1"):
        AbsoluteErrorModel(max_iter=0)
    with pytest.raises(ValueError, match="prediction must hold one value per row"):
        with_prediction(np.zeros((3, 2)), [1.0])
    with pytest.raises(ValueError, match="leaves no room"):
        split_calibration(10, 0.95, 0, min_rest=2)


# ------------------------------------------------------------------------------ flag-rate test
def test_flag_rate_batches_match_flag_by_flag() -> None:
    flags = np.random.default_rng(0).uniform(size=3000) < 0.2
    whole, single = FlagRateTest(0.12, 0.01), FlagRateTest(0.12, 0.01)
    hit = whole.update_many(flags)
    steps = [i for i, f in enumerate(flags) if single.update_many([f]) is not None]
    assert hit is not None and hit == steps[0]
    assert single.log_wealth >= single.log_threshold or steps[0] < flags.size - 1


def test_flag_rate_wealth_is_the_product_of_predictable_kelly_bets() -> None:
    """One bettor, computed by hand: λ_i from the discounted mean of the flags before i."""
    flags = (np.random.default_rng(1).uniform(size=200) < 0.3).astype(float)
    theta, beta = 0.1, 0.05
    test = FlagRateTest(theta, alpha=1e-12, forgetting=(beta,), cap=0.5)
    assert test.update_many(flags) is None
    m, log_k = theta, 0.0
    for f in flags:
        lam = min(max((m - theta) / (theta * (1 - theta)), 0.0), 0.5 / theta)
        log_k += math.log1p(lam * (f - theta))
        m += beta * (f - m)
    assert test.log_wealth == pytest.approx(log_k, rel=1e-10)


def test_flag_rate_state_continues_exactly() -> None:
    flags = np.random.default_rng(2).uniform(size=4000) < 0.15
    a = FlagRateTest(0.12, 0.01)
    a.update_many(flags[:1000])
    b = FlagRateTest.from_state(_json(a.state_dict()))
    assert a.update_many(flags[1000:]) == b.update_many(flags[1000:])
    assert a.log_wealth == b.log_wealth
    with pytest.raises(ValueError, match=r"null_rate must lie in \(0, 1\)"):
        FlagRateTest(1.0)
    with pytest.raises(ValueError, match="forgetting"):
        FlagRateTest(0.1, forgetting=(0.0,))


# -------------------------------------------------------------------------------- detector
def _detector(**kwargs) -> LabelFreeHarmDetector:
    Z, y = _classifier(2000, 0)
    return LabelFreeHarmDetector(CalibratedConfidence(), Z, y, **kwargs)


def test_threshold_flags_q_of_the_threshold_rows_and_null_rate_is_the_beta_quantile() -> None:
    det = _detector(q=0.1, alpha=0.01)
    Z, _ = _classifier(2000, 0)
    _, rest = split_calibration(2000, 0.5, 0, min_rest=10)
    n = rest.size
    k = math.ceil(0.9 * (n + 1))
    assert det.flags(Z[rest]).sum() == n - k  # strictly above the k-th smallest score
    assert det.null_rate == pytest.approx(beta_law.isf(0.01, n + 1 - k, k))
    assert det.threshold_risk == pytest.approx(0.01)
    fixed = _detector(q=0.1, tolerance=0.05)
    assert fixed.null_rate == pytest.approx(0.15)
    assert fixed.threshold_risk == pytest.approx(beta_law.sf(0.15, n + 1 - k, k))


def test_detector_batches_match_event_by_event() -> None:
    Z = np.vstack([_classifier(1000, 1)[0], _classifier(2000, 2, hard=0.6)[0]])
    batch, single = _detector(), _detector()
    seen: list[int] = []
    batch.update_batch(Z, on_alarm=lambda i, e: seen.append(e.index))
    events = []
    for z in Z:
        single.update(z)
        events.extend(single.last_alarms)
    assert seen and [e.index for e in events] == seen
    assert list(batch.last_alarms) == events
    assert (batch.n_seen, batch.n_alarms, batch.flag_rate, batch.log_statistic) == (
        single.n_seen, single.n_alarms, single.flag_rate, single.log_statistic)
    assert events[0].changepoint == 0 and events[1].changepoint == events[0].index + 1
    # Ville at 1/alpha: the wealth crosses log(1/alpha) exactly at each alarm, not before
    for event in events:
        assert event.log_threshold == pytest.approx(math.log(1 / 0.01))
        assert event.log_statistic >= event.log_threshold
    replay = _detector()
    replay.update_batch(Z[: events[0].index])
    assert replay.n_alarms == 0 and replay.log_statistic < math.log(1 / 0.01)


@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_detector_state_continues_exactly(kind: str) -> None:
    if kind == "classification":
        Z, y = _classifier(2000, 0)
        stream = np.vstack([_classifier(1000, 1)[0], _classifier(2000, 2, hard=0.6)[0]])
        est: LossEstimator = CalibratedConfidence()
    else:
        Z, y = _regressor(2000, 0)
        stream = np.vstack([_regressor(1000, 1)[0], _regressor(2000, 2, hard=0.6)[0]])
        est = AbsoluteErrorModel(max_iter=30)
    a = LabelFreeHarmDetector(est, Z, y, seed=3)
    a.update_batch(stream[:1200])
    b = LabelFreeHarmDetector.from_state(_json(a.state_dict()))
    a.update_batch(stream[1200:])
    b.update_batch(stream[1200:])
    assert a.n_alarms >= 1
    assert (a.last_alarms, a.n_seen, a.flag_rate, a.log_statistic, a.threshold) == (
        b.last_alarms, b.n_seen, b.flag_rate, b.log_statistic, b.threshold)
    with pytest.raises(StateError):
        FlagRateTest.from_state(a.state_dict())


def test_detector_arguments_are_checked() -> None:
    Z, y = _classifier(40, 0)
    with pytest.raises(ValueError, match="estimator must be a LossEstimator"):
        LabelFreeHarmDetector("isotonic", Z, y)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"q must lie in \(0, 1\)"):
        LabelFreeHarmDetector(CalibratedConfidence(), Z, y, q=0.0)
    with pytest.raises(ValueError, match="tolerance must be None or lie in"):
        LabelFreeHarmDetector(CalibratedConfidence(), Z, y, tolerance=-0.1)
    with pytest.raises(ValueError, match=r"need >= 1 to fit and >= 50 for the rest"):
        LabelFreeHarmDetector(CalibratedConfidence(), Z, y, q=0.02)
    estimator = CalibratedConfidence()
    LabelFreeHarmDetector(estimator, Z, y)
    with pytest.raises(ValueError, match="not fitted"):  # cloned, never mutated
        estimator.predicted_loss(Z)


def test_detector_is_reproducible_bounded_and_picklable() -> None:
    """The contract suite's generic checks (tests/detectors/test_contract.py) for this detector."""
    import pickle

    a, b = _detector(seed=4), _detector(seed=4)
    assert a.threshold == b.threshold and _detector(seed=5).threshold != a.threshold
    stream = np.vstack([_classifier(1000, 1)[0], _classifier(4000, 2, hard=0.6)[0]])
    a.update_batch(stream[:500])
    size = len(json.dumps(_json(a.state_dict())))
    a.update_batch(stream[500:])
    # the state does not grow with the stream (the alarms of the last batch aside)
    assert len(json.dumps(_json(a.state_dict()))) <= size + 200 * len(a.last_alarms)
    c = pickle.loads(pickle.dumps(a))
    more = _classifier(2000, 9, hard=0.6)[0]
    a.update_batch(more)
    c.update_batch(more)
    assert (a.last_alarms, a.log_statistic) == (c.last_alarms, c.log_statistic)
