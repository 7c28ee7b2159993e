"""eg-BH: BH e-values, e-BH, merging, and FDR control under dependence between runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.decisions import (
    EnsembleBH,
    benjamini_hochberg,
    bh_e_values,
    conformal_p_values,
    e_benjamini_hochberg,
    ensemble_bh,
    make_rule,
)

p_lists = st.lists(st.floats(0, 1), min_size=1, max_size=30)


def _e_bh_loop(e: list[float], alpha: float) -> set[int]:
    n = len(e)
    order = sorted(range(n), key=lambda i: -e[i])
    cutoff = 0
    for rank, i in enumerate(order, start=1):
        if e[i] * alpha * rank >= n:
            cutoff = rank
    return set(order[:cutoff])


@settings(max_examples=100, deadline=None)
@given(e=st.lists(st.floats(0, 1e4), min_size=1, max_size=30))
def test_e_bh_matches_loop(e: list[float]) -> None:
    got = set(np.flatnonzero(e_benjamini_hochberg(e, 0.1).rejected))
    assert got == _e_bh_loop(e, 0.1)


@settings(max_examples=100, deadline=None)
@given(p=p_lists, alpha=st.sampled_from([0.05, 0.1, 0.2]))
def test_e_bh_on_bh_e_values_reproduces_bh(p: list[float], alpha: float) -> None:
    # Li & Zhang (2023): BH on p equals e-BH on its e-values at the same level.
    bh = benjamini_hochberg(p, alpha)
    e = bh_e_values(p, alpha)
    np.testing.assert_array_equal(e_benjamini_hochberg(e, alpha).rejected, bh.rejected)
    assert e.sum() <= len(p) / alpha + 1e-9
    assert ensemble_bh([p], alpha, base_alpha=alpha).rejected.tolist() == bh.rejected.tolist()


def test_identical_runs_reproduce_bh_at_the_base_level() -> None:
    rng = np.random.default_rng(0)
    p = np.r_[rng.uniform(size=80), rng.uniform(size=20) * 1e-3]
    base = benjamini_hochberg(p, 0.09)
    eg = ensemble_bh(np.vstack([p, p, p]), 0.1)  # default base level 0.9·alpha
    np.testing.assert_array_equal(eg.rejected, base.rejected)


def test_base_level_below_alpha_survives_one_run_rejecting_one_more() -> None:
    # Ten clear signals; the second run also rejects one borderline null. With base level alpha
    # the averaged e-values of the ten fall just below e-BH's bar and nothing is rejected (the
    # fragility documented in eg_bh); the default base level 0.9·alpha keeps all ten.
    p1 = np.r_[np.full(10, 0.004), np.full(90, 0.9)]
    p2 = p1.copy()
    p2[10] = 0.0105
    P = np.vstack([p1, p2])
    assert benjamini_hochberg(p1, 0.1).n_rejected == 10
    assert benjamini_hochberg(p2, 0.1).n_rejected == 11
    assert ensemble_bh(P, 0.1, base_alpha=0.1).n_rejected == 0
    assert set(np.flatnonzero(ensemble_bh(P, 0.1).rejected)) == set(range(10))


def test_twice_mean_merge() -> None:
    P = np.array([[0.001, 0.2, 0.9], [0.003, 0.4, 0.1]])
    merged = np.minimum(1.0, 2 * P.mean(axis=0))
    expected = benjamini_hochberg(merged, 0.1).rejected
    np.testing.assert_array_equal(ensemble_bh(P, 0.1, merge="twice_mean").rejected, expected)


def test_fdr_with_strongly_dependent_runs_over_many_seeds() -> None:
    # K = 4 runs: conformal p-values of the same test points against 4 overlapping calibration
    # subsets (strong, non-PRDS-across-runs dependence). e-merge FDR must stay <= alpha·n0/n.
    alpha, m, n0, n1, reps = 0.2, 60, 40, 10, 400
    fdp = np.empty(reps)
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        cal = rng.normal(size=m)
        test = np.r_[rng.normal(size=n0), rng.normal(size=n1) - 3.0]
        P = np.vstack(
            [conformal_p_values(test, cal[rng.choice(m, 40, replace=False)]) for _ in range(4)]
        )
        rejected = ensemble_bh(P, alpha).rejected
        fdp[seed] = rejected[:n0].sum() / max(rejected.sum(), 1)
    se = fdp.std(ddof=1) / np.sqrt(reps)
    assert fdp.mean() <= alpha * n0 / (n0 + n1) + 3 * se


def test_class_registry_and_validation() -> None:
    rule = make_rule("eg_bh", alpha=0.1, merge="twice_mean")
    assert isinstance(rule, EnsembleBH) and rule.merge == "twice_mean"
    assert rule.decide([0.0001, 0.9]).rejected.tolist() == [True, False]  # a vector is K = 1
    with pytest.raises(ValueError, match="merge must be one of"):
        EnsembleBH(merge="fisher")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha must be"):
        EnsembleBH(base_alpha=0.0)
    with pytest.raises(ValueError, match=r"\(K, n\) matrix"):
        ensemble_bh(np.zeros((2, 2, 2)), 0.1)
    with pytest.raises(ValueError, match="non-negative e-values"):
        e_benjamini_hochberg([-1.0], 0.1)


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2])
def test_one_run_is_exactly_bh(alpha: float) -> None:
    """K = 1: base level alpha, and e-BH on one BH run's e-values is that run (Li & Zhang 2023)."""
    rng = np.random.default_rng(int(alpha * 100))
    for m in (50, 200, 1000):
        for _ in range(50):
            p = rng.integers(1, m + 2, size=100) / (m + 1.0)
            p[:20] = rng.integers(1, 4, size=20) / (m + 1.0)
            got, want = ensemble_bh(p[None, :], alpha), benjamini_hochberg(p, alpha)
            assert np.array_equal(got.rejected, want.rejected)
