"""Activation-shaping scorers against per-element loops, and their fitted statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from monitor.core.ood import (
    ASHB,
    ASHS,
    SCALE,
    BFAct,
    PiecewiseLinear,
    ReAct,
    ShapedEnergy,
    load_last_layer,
    make_scorer,
    scorer_from_state,
)

C, D = 4, 20


def _layer_and_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    W, b = rng.normal(size=(C, D)), rng.normal(size=C)
    cal = np.maximum(rng.normal(size=(200, D)) + 0.5, 0.0)
    test = np.maximum(rng.normal(scale=2.0, size=(30, D)), 0.0)
    return W, b, cal, test


def _energy_loop(h: list[float], W: np.ndarray, b: np.ndarray, T: float = 1.0) -> float:
    logits = [sum(W[c, j] * h[j] for j in range(len(h))) + b[c] for c in range(len(b))]
    top = max(logits)
    return T * (top / T + math.log(sum(math.exp((z - top) / T) for z in logits)))


def _top_keep(h: list[float], percentile: float) -> set[int]:
    keep = max(1, len(h) - round(len(h) * percentile / 100))
    return set(sorted(range(len(h)), key=lambda j: h[j], reverse=True)[:keep])


def _shape_loop(name: str, h: list[float], threshold: float, p: float) -> list[float]:
    if name == "react":
        return [min(v, threshold) for v in h]
    if name == "bfact":
        return [v / math.sqrt(1 + (abs(v) / threshold) ** 4) for v in h]
    kept = _top_keep(h, p)
    s1, s2 = sum(h), sum(h[j] for j in kept)
    if name == "ash_s":
        return [h[j] * math.exp(s1 / s2) if j in kept else 0.0 for j in range(len(h))]
    if name == "ash_b":
        return [s1 / len(kept) if j in kept else 0.0 for j in range(len(h))]
    return [v * math.exp(s1 / s2) for v in h]  # scale


@pytest.mark.parametrize("name", ["react", "bfact", "ash_s", "ash_b", "scale"])
def test_shaped_energy_matches_loop(name: str) -> None:
    W, b, cal, test = _layer_and_data()
    p = 80.0
    scorer = make_scorer(name, W=W, b=b, percentile=p).fit(cal)
    # The 80th percentile by hand: linear interpolation between order statistics.
    ordered, pos = sorted(cal.ravel().tolist()), 0.8 * (cal.size - 1)
    lo = math.floor(pos)
    threshold = ordered[lo] + (pos - lo) * (ordered[lo + 1] - ordered[lo])
    expected = [_energy_loop(_shape_loop(name, list(h), threshold, p), W, b) for h in test.tolist()]
    np.testing.assert_allclose(scorer.score(test), expected, rtol=1e-9)


def test_react_threshold_is_calibration_percentile() -> None:
    W, b, cal, _ = _layer_and_data(1)
    react = ReAct(W, b, percentile=90).fit(cal)
    assert react.threshold_ == pytest.approx(np.percentile(cal, 90))
    assert (cal <= react.threshold_).mean() == pytest.approx(0.9, abs=0.01)


def test_ash_and_scale_need_no_fit_and_ash_b_keeps_mass() -> None:
    W, b, _, test = _layer_and_data(2)
    assert ASHS(W, b).is_fitted and SCALE(W, b).is_fitted
    np.testing.assert_allclose(ASHB(W, b).shape(test).sum(axis=1), test.sum(axis=1))
    scale = SCALE(W, b, percentile=0.0).shape(test)  # s2 = s1: scaling by e
    np.testing.assert_allclose(scale, test * math.e)


def test_bfact_approaches_react_clip_for_order_one_far_above_cutoff() -> None:
    bf = BFAct(np.eye(2), np.zeros(2), order=1).fit(np.ones((4, 2)))
    np.testing.assert_allclose(bf.shape(np.array([[1e6, 1e-6]])), [[1.0, 1e-6]], rtol=1e-6)
    assert np.isfinite(bf.shape(np.array([[1e300, 0.0]]))).all()


def test_piecewise_identity_slopes_give_plain_energy() -> None:
    W, b, cal, test = _layer_and_data(3)
    pw = PiecewiseLinear(W, b, n_pieces=5).fit(cal)
    np.testing.assert_allclose(
        np.quantile(cal, [0, 0.2, 0.4, 0.6, 0.8]), pw.breakpoints_, rtol=1e-12
    )
    pw.slopes_ = np.ones(5)
    np.testing.assert_allclose(pw.score(test), make_scorer("energy").score(test @ W.T + b))


def test_piecewise_shape_matches_loop_and_fit_criterion() -> None:
    W, b, cal, test = _layer_and_data(4)
    pw = PiecewiseLinear(W, b, n_pieces=4, strength=0.5, seed=7).fit(cal)
    t, s = pw.breakpoints_, pw.slopes_
    assert np.abs(s - 1).max() == pytest.approx(0.5)

    def g(v: float) -> float:
        if v < t[0]:
            return v
        out = t[0]
        for j in range(4):
            upper = t[j + 1] if j + 1 < 4 else math.inf
            out += s[j] * max(0.0, min(v, upper) - t[j])
        return out

    expected = [[g(v) for v in row] for row in test.tolist()]
    np.testing.assert_allclose(pw.shape(test), expected, rtol=1e-12, atol=1e-12)
    # The criterion's direction: slopes move with the ID-vs-null gap of class evidence.
    rng = np.random.default_rng(7)
    null = np.column_stack([rng.permutation(col) for col in cal.T])
    gap = pw._class_evidence(cal) - pw._class_evidence(null)
    np.testing.assert_allclose(s - 1, 0.5 * gap / np.abs(gap).max())


def test_load_last_layer_and_errors(tmp_path: Path) -> None:
    W, b, cal, test = _layer_and_data(5)
    np.savez(tmp_path / "head.npz", W=W, b=b)
    W2, b2 = load_last_layer(tmp_path / "head.npz")
    np.testing.assert_array_equal(W2, W)
    np.testing.assert_array_equal(b2, b)
    np.savez(tmp_path / "bad.npz", W=W)
    with pytest.raises(ValueError, match="missing"):
        load_last_layer(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="b must have shape"):
        ReAct(W, b[:2])
    with pytest.raises(ValueError, match="needs the model's last layer"):
        make_scorer("react")
    with pytest.raises(ValueError, match="percentile must be"):
        ASHS(W, b, percentile=100)
    with pytest.raises(ValueError, match="embedding has 3 columns"):
        ReAct(W, b).fit(cal).score(test[:, :3])


@pytest.mark.parametrize("name", ["react", "bfact", "ash_s", "ash_b", "scale", "piecewise"])
def test_state_round_trip(name: str) -> None:
    W, b, cal, test = _layer_and_data(6)
    scorer = make_scorer(name, W=W, b=b).fit(cal)
    assert isinstance(scorer, ShapedEnergy)
    clone = scorer_from_state(scorer.state_dict())
    np.testing.assert_array_equal(clone.score(test), scorer.score(test))
