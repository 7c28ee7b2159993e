"""Benjamini–Hochberg against a textbook loop, exact ties, and FDR under independence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.decisions import BenjaminiHochberg, benjamini_hochberg, make_rule


def _bh_loop(p: list[float], alpha: float) -> set[int]:
    """Step-up in exact rational arithmetic on the ranks."""
    n = len(p)
    order = sorted(range(n), key=lambda i: p[i])
    cutoff = 0
    for rank, i in enumerate(order, start=1):
        if p[i] * n <= alpha * rank:
            cutoff = rank
    return set(order[:cutoff])


@settings(max_examples=100, deadline=None)
@given(
    p=st.lists(st.floats(0, 1), min_size=1, max_size=40),
    alpha=st.sampled_from([0.01, 0.05, 0.1, 0.2]),
)
def test_matches_loop(p: list[float], alpha: float) -> None:
    decision = benjamini_hochberg(p, alpha)
    expected = _bh_loop(p, alpha)
    assert set(np.flatnonzero(decision.rejected)) == expected
    assert decision.threshold == pytest.approx(alpha * len(expected) / len(p))


def test_conformal_p_value_exactly_on_the_bar_is_rejected() -> None:
    # p = 5/200 = 0.025 = 0.1·64/256 exactly: the 64 smallest must all be rejected.
    p = np.r_[np.full(64, 5 / 200), np.full(192, 0.9)]
    assert benjamini_hochberg(p, 0.1).n_rejected == 64


def test_fdr_under_independence_over_many_seeds() -> None:
    alpha, n, n1, reps = 0.1, 100, 20, 2000
    fdp = np.empty(reps)
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        p = np.r_[rng.uniform(size=n - n1), rng.uniform(size=n1) ** 8]
        rejected = benjamini_hochberg(p, alpha).rejected
        fdp[seed] = rejected[: n - n1].sum() / max(rejected.sum(), 1)
    se = fdp.std(ddof=1) / np.sqrt(reps)
    # BH's FDR is exactly alpha·n0/n = 0.08 under independence: check both sides.
    assert abs(fdp.mean() - alpha * (n - n1) / n) <= 3 * se


def test_rule_class_and_registry() -> None:
    rule = make_rule("bh", alpha=0.05)
    assert isinstance(rule, BenjaminiHochberg)
    assert rule.decide([[0.001, 0.5]]).rejected.tolist() == [True, False]
    assert benjamini_hochberg([], 0.1).n_rejected == 0
    with pytest.raises(ValueError, match="use eg_bh"):
        rule.decide([[0.1], [0.2]])
    with pytest.raises(ValueError, match="alpha must be"):
        BenjaminiHochberg(alpha=1.5)
    with pytest.raises(ValueError, match="rule must be one of"):
        make_rule("storey")
    with pytest.raises(ValueError, match=r"p-values in \[0, 1\]"):
        benjamini_hochberg([1.5], 0.1)
