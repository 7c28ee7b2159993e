"""LOND levels, the gamma sequences and state round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.decisions import LOND, gamma, make_rule


def test_gamma_sequences_sum_to_at_most_one() -> None:
    assert math.fsum(gamma(t, horizon=256) for t in range(1, 257)) == pytest.approx(1.0)
    assert gamma(257, horizon=256) == 0.0
    t = np.arange(1, 2_000_001, dtype=float)
    jm = 0.07720838 * np.log(np.maximum(t, 2)) / (t * np.exp(np.sqrt(np.log(t))))
    assert gamma(1) == pytest.approx(jm[0]) and gamma(1000) == pytest.approx(jm[999])
    assert jm.sum() < 1.0


def test_levels_follow_the_lond_formula() -> None:
    alpha, horizon = 0.2, 10
    ps = [0.001, 0.5, 0.02, 0.03, 0.9, 0.0]
    lond, discoveries = LOND(alpha, horizon=horizon), 0
    for t, p in enumerate(ps, start=1):
        level = alpha * gamma(t, horizon) * (discoveries + 1)
        assert lond.next_level == pytest.approx(level)
        lond.update(p)
        assert lond.level == pytest.approx(level)
        assert lond.rejected == (p <= level)
        discoveries += p <= level
    assert (lond.n_tested, lond.n_rejected) == (len(ps), discoveries)


def test_fdr_under_independence_over_many_seeds() -> None:
    alpha, n, reps = 0.1, 50, 2000
    fdp = np.empty(reps)
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        is_signal = rng.uniform(size=n) < 0.3
        p = np.where(is_signal, rng.uniform(size=n) ** 12, rng.uniform(size=n))
        lond, rejected = LOND(alpha, horizon=n), np.zeros(n, dtype=bool)
        for i, value in enumerate(p):
            lond.update(float(value))
            rejected[i] = lond.rejected
        fdp[seed] = (rejected & ~is_signal).sum() / max(rejected.sum(), 1)
    assert fdp.mean() <= alpha + 3 * fdp.std(ddof=1) / np.sqrt(reps)
    assert fdp.mean() > 0.0  # it does reject


def test_state_round_trip_and_validation() -> None:
    lond = make_rule("lond", alpha=0.1, horizon=5)
    assert isinstance(lond, LOND)
    lond.update(0.001)
    clone = LOND.from_state(lond.state_dict())
    for p in (0.01, 0.2):
        lond.update(p)
        clone.update(p)
        assert (clone.rejected, clone.level) == (lond.rejected, lond.level)
    with pytest.raises(ValueError, match="p must be"):
        lond.update(1.5)
    with pytest.raises(ValueError, match="horizon must be"):
        LOND(horizon=0)
    with pytest.raises(ValueError, match="counts tests from 1"):
        gamma(0)
