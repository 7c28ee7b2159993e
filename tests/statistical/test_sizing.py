"""The sizing helper of the Monte Carlo tests: exact binomial tails, checked three ways."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, norm

from tests.support.sizing import (
    MAX_FALSE_FAILURE,
    Z_FALSE_FAILURE,
    mean_test_power,
    rate_test,
    repetitions_for,
)


@pytest.mark.parametrize(("n", "bound"), [(1, 0.1), (40, 0.05), (300, 0.25), (1000, 0.1)])
def test_the_pass_count_is_the_smallest_with_false_failure_at_most_the_limit(
    n: int, bound: float
) -> None:
    test = rate_test(n, bound, violation=min(1.0, 2 * bound))
    assert binom.sf(test.max_count, n, bound) <= MAX_FALSE_FAILURE
    if test.max_count > 0:
        assert binom.sf(test.max_count - 1, n, bound) > MAX_FALSE_FAILURE
    assert test.false_failure == pytest.approx(binom.sf(test.max_count, n, bound), rel=1e-12)
    assert test.power == pytest.approx(binom.sf(test.max_count, n, test.violation), rel=1e-12)
    assert test.passes(test.max_count) and not test.passes(test.max_count + 1)


def test_a_smaller_rate_fails_less_often_than_the_bound() -> None:
    """The false-failure probability is the worst case over every rate the bound allows."""
    test = rate_test(200, 0.1, 0.2)
    smaller = [binom.sf(test.max_count, 200, r) for r in np.linspace(0.0, 0.1, 11)]
    assert np.all(np.diff(smaller) >= 0) and smaller[-1] == pytest.approx(test.false_failure)


def test_simulated_counts_fail_as_often_as_computed() -> None:
    """Draw the counts: the failure share at the bound and at the violation match the tails."""
    test = rate_test(50, 0.3, 0.6, max_false_failure=0.01)
    rng = np.random.default_rng(0)
    draws = 200_000
    for rate, expected in ((0.3, test.false_failure), (0.6, test.power)):
        failed = np.mean(rng.binomial(test.n, rate, size=draws) > test.max_count)
        assert abs(failed - expected) < 4 * np.sqrt(expected * (1 - expected) / draws)


def test_repetitions_are_the_first_count_with_enough_power() -> None:
    n = repetitions_for(0.25, 0.5)
    assert rate_test(n, 0.25, 0.5).power >= 0.8 > rate_test(n - 1, 0.25, 0.5).power
    assert n == 58


def test_mean_test_power_is_the_normal_tail() -> None:
    assert abs(Z_FALSE_FAILURE - 3.0902) < 1e-4
    assert mean_test_power(0.01, 0.075, 0.075 + Z_FALSE_FAILURE * 0.01) == pytest.approx(0.5)
    assert mean_test_power(0.004, 0.075, 0.1125) == pytest.approx(
        norm.sf((0.075 + Z_FALSE_FAILURE * 0.004 - 0.1125) / 0.004))
    assert mean_test_power(0.0, 0.075, 0.1) == 1.0


def test_invalid_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="bound < violation"):
        rate_test(100, 0.2, 0.1)
    with pytest.raises(ValueError, match="positive number of repetitions"):
        rate_test(0, 0.1, 0.2)
    with pytest.raises(ValueError, match="not negative"):
        mean_test_power(-1.0, 0.1, 0.2)
