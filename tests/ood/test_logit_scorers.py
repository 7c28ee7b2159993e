"""Logit scorers against straightforward formulas, and their invariances."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from monitor.core.ood import MSP, Energy, MaxLogit, NegativeEntropy, make_scorer

logit_rows = arrays(
    np.float64,
    st.tuples(st.integers(1, 5), st.integers(2, 8)),
    elements=st.floats(-50, 50, allow_nan=False),
)


def _naive(row: list[float], kind: str, T: float = 1.0) -> float:
    """Textbook formulas with math.exp, one row at a time (moderate logits only)."""
    exps = [math.exp(z) for z in row]
    probs = [e / sum(exps) for e in exps]
    if kind == "msp":
        return max(probs)
    if kind == "max_logit":
        return max(row)
    if kind == "energy":
        return T * math.log(sum(math.exp(z / T) for z in row))
    return sum(p * math.log(p) for p in probs if p > 0)


@pytest.mark.parametrize("kind", ["msp", "max_logit", "energy", "entropy"])
def test_matches_naive_formula(kind: str) -> None:
    logits = np.random.default_rng(0).normal(scale=3.0, size=(50, 7))
    expected = [_naive(list(row), kind) for row in logits]
    np.testing.assert_allclose(make_scorer(kind).score(logits), expected, rtol=1e-12)


def test_energy_with_temperature_matches_naive() -> None:
    logits = np.random.default_rng(1).normal(scale=3.0, size=(20, 4))
    expected = [_naive(list(row), "energy", T=2.5) for row in logits]
    np.testing.assert_allclose(Energy(temperature=2.5).score(logits), expected, rtol=1e-12)


@settings(max_examples=50, deadline=None)
@given(logits=logit_rows)
def test_energy_tends_to_max_logit_as_temperature_vanishes(logits: np.ndarray) -> None:
    # 0 <= T·logsumexp(z/T) − max z <= T·log C: the gap closes linearly in T.
    max_logit = MaxLogit().score(logits)
    for T in (1.0, 1e-2, 1e-4):
        gap = Energy(temperature=T).score(logits) - max_logit
        assert np.all(gap >= -1e-9)
        assert np.all(gap <= T * math.log(logits.shape[1]) + 1e-9)


@settings(max_examples=50, deadline=None)
@given(logits=logit_rows)
def test_msp_between_one_over_c_and_one(logits: np.ndarray) -> None:
    msp = MSP().score(logits)
    assert np.all(msp >= 1.0 / logits.shape[1] - 1e-12)
    assert np.all(msp <= 1.0 + 1e-12)


@settings(max_examples=50, deadline=None)
@given(logits=logit_rows, shift=st.floats(-100, 100))
def test_softmax_scores_invariant_to_logit_shift(logits: np.ndarray, shift: float) -> None:
    for scorer in (MSP(), NegativeEntropy()):
        np.testing.assert_allclose(scorer.score(logits + shift), scorer.score(logits), atol=1e-9)


@settings(max_examples=50, deadline=None)
@given(logits=logit_rows)
def test_negative_entropy_between_minus_log_c_and_zero(logits: np.ndarray) -> None:
    ent = NegativeEntropy().score(logits)
    assert np.all(ent >= -math.log(logits.shape[1]) - 1e-9)
    assert np.all(ent <= 1e-12)


def test_extreme_logits_stay_finite() -> None:
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]])
    for name in ("msp", "max_logit", "energy", "entropy"):
        assert np.isfinite(make_scorer(name).score(logits)).all()


def test_logit_scorers_need_no_fit_and_validate() -> None:
    assert MSP().fit(np.zeros((3, 2))).is_fitted
    with pytest.raises(ValueError, match="at least 2 classes"):
        MSP().score(np.zeros((3, 1)))
    with pytest.raises(ValueError, match="temperature must be"):
        Energy(temperature=0.0)
