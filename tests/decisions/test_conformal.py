"""Conformal p-values: formula, validity, ties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.decisions import conformal_p_values


@settings(max_examples=50, deadline=None)
@given(
    cal=st.lists(st.integers(-5, 5).map(float), min_size=1, max_size=30),
    test=st.lists(st.integers(-6, 6).map(float), min_size=1, max_size=10),
)
def test_matches_counting_loop_with_ties(cal: list[float], test: list[float]) -> None:
    expected = [(1 + sum(c <= t for c in cal)) / (len(cal) + 1) for t in test]
    np.testing.assert_allclose(conformal_p_values(test, cal), expected, rtol=1e-15)


def test_super_uniform_under_exchangeability_over_many_seeds() -> None:
    # P(p <= u) <= u exactly for exchangeable scores; 4000 draws, 3-SE slack.
    m, draws = 19, 4000
    p = np.array(
        [
            conformal_p_values(s[-1:], s[:-1])[0]
            for s in (np.random.default_rng(seed).normal(size=m + 1) for seed in range(draws))
        ]
    )
    for u in (0.05, 0.1, 0.25, 0.5):
        freq = np.mean(p <= u)
        assert freq <= u + 3 * np.sqrt(u * (1 - u) / draws)
    assert np.mean(p <= 0.05) == pytest.approx(0.05, abs=0.02)  # p = 1/20 is attainable


def test_low_scores_get_small_p_values_and_errors() -> None:
    p = conformal_p_values([-100.0, 100.0], np.arange(99.0))
    assert p.tolist() == [0.01, 1.0]
    with pytest.raises(ValueError, match="empty"):
        conformal_p_values([1.0], [])
    with pytest.raises(ValueError, match="NaN"):
        conformal_p_values([np.nan], [1.0])
