"""Per-feature attribution tests by type, window against calibration (docs/tabular.md,
"Attribution by type"): a G-test for a categorical feature's cell counts, Fisher's exact test for
a missing rate, and Holm's adjustment across all the tests of an alarm. Pure computation.

Each test compares two samples, the calibration rows and a window of events after the alarm
(the window starts after the alarm, so the alarm did not choose it:
``monitor.streams.attribution``).
Under "the window's values are exchangeable with the calibration's", every p-value here is
valid: P(p ≤ a) ≤ a for every a.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

__all__ = [
    "MIN_EXPECTED",
    "N_RESAMPLES",
    "category_test",
    "g_statistic",
    "holm_adjusted",
    "missing_rate_test",
]

FloatArray = NDArray[np.float64]

#: Below this smallest expected cell count the G-test's p-value is a Monte Carlo permutation
#: p-value instead of the chi-square approximation (Cochran's rule of thumb).
MIN_EXPECTED = 5.0
#: Resampled tables of the Monte Carlo permutation p-value.
N_RESAMPLES = 2000


def holm_adjusted(p: ArrayLike) -> FloatArray:
    """Holm's step-down adjusted p-values (Holm 1979, Scand. J. Statist. 6:65-70):
    p̃_(i) = max_{k ≤ i} min(1, (d − k + 1)·p_(k)) for the sorted p_(1) ≤ … ≤ p_(d).
    Rejecting where p̃ ≤ a controls the family-wise error rate at a under any dependence."""
    arr = np.asarray(p, dtype=np.float64).ravel()
    if arr.size and not (np.all(arr >= 0.0) and np.all(arr <= 1.0)):
        raise ValueError("p-values must lie in [0, 1]")
    order = np.argsort(arr, kind="stable")
    d = arr.size
    scaled = np.minimum(1.0, (d - np.arange(d)) * arr[order])
    out = np.empty(d, np.float64)
    out[order] = np.maximum.accumulate(scaled)
    return out


def g_statistic(table: NDArray[np.int64]) -> FloatArray:
    """G = 2 Σ O·log(O/E) of 2 × K tables (..., 2, K), E from the margins (Sokal & Rohlf,
    *Biometry*, 4th ed., Section 17.4); empty cells add 0."""
    t = np.asarray(table, np.float64)
    rows = t.sum(axis=-1, keepdims=True)
    cols = t.sum(axis=-2, keepdims=True)
    expected = rows * cols / t.sum(axis=(-2, -1), keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(t > 0, t * np.log(t / expected), 0.0)
    return np.asarray(2.0 * terms.sum(axis=(-2, -1)), np.float64)


def category_test(
    calibration: ArrayLike, window: ArrayLike, cells: Sequence[str], seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> dict[str, Any]:
    """G-test of a categorical feature: the window's cell counts against the calibration's.

    ``calibration`` and ``window`` are counts over the same ``cells`` (vocabulary, ``other``,
    ``unseen``, ``missing``: any cells). The null is that both samples come from one distribution;
    the test conditions on the cells' pooled counts (the permutation null). With every expected
    count ≥ :data:`MIN_EXPECTED` the p-value is the chi-square approximation with (cells that
    occur − 1) degrees of freedom (Wilks 1938); otherwise it is the Monte Carlo permutation
    p-value (1 + #{G* ≥ G})/(B + 1) over B tables drawn with the observed margins (multivariate
    hypergeometric: the window's cells under a random split of the pooled sample), seeded by
    ``seed``, which is valid at every B (P(p ≤ a) ≤ a; Phipson & Smyth 2010, Stat. Appl. Genet.
    Mol. Biol. 9).

    Returns ``{"test": "g_test", "method": "chi_square" | "monte_carlo", "statistic",
    "p_value", "frequencies": {"calibration": {cell: share}, "window": {cell: share}}}``.

    Examples
    --------
    >>> out = category_test([500, 300, 200], [40, 30, 30], ["DE", "FR", "other"])
    >>> out["method"], round(out["statistic"], 3), round(out["p_value"], 4)
    ('chi_square', 5.846, 0.0538)
    """
    table = _table(calibration, window, cells)
    observed = float(g_statistic(table))
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0) / table.sum()
    occurring = table.sum(axis=0) > 0
    if expected[:, occurring].min() >= MIN_EXPECTED:
        method = "chi_square"
        p = float(stats.chi2.sf(observed, max(int(occurring.sum()) - 1, 1)))
    else:
        method = "monte_carlo"
        p = _permutation_p(table, observed, seed, n_resamples)
    return {"test": "g_test", "method": method, "statistic": observed, "p_value": p,
            "frequencies": {"calibration": _shares(table[0], cells),
                            "window": _shares(table[1], cells)}}


def _permutation_p(table: NDArray[np.int64], observed: float, seed: int, n: int) -> float:
    rng = np.random.default_rng(seed)
    pooled = table.sum(axis=0)
    window = rng.multivariate_hypergeometric(pooled, int(table[1].sum()), size=n)
    resampled = np.stack([pooled - window, window], axis=1)
    # a relative tolerance so that tables equal to the observed one count as at least as extreme
    exceed = int(np.sum(g_statistic(resampled) >= observed * (1.0 - 1e-9) - 1e-12))
    return (1.0 + exceed) / (n + 1.0)


def missing_rate_test(
    calibration_n: int, calibration_missing: int, window_n: int, window_missing: int
) -> dict[str, Any]:
    """Fisher's exact test (two-sided, ``scipy.stats.fisher_exact``) of a feature's missing rate,
    window against calibration: exact given the margins, conservative (P(p ≤ a) ≤ a).

    ``statistic`` is the window's missing rate minus the calibration's.

    Examples
    --------
    >>> out = missing_rate_test(1000, 50, 200, 30)
    >>> out["test"], round(out["statistic"], 3), f"{out['p_value']:.2g}"
    ('fisher_exact', 0.1, '2.9e-06')
    """
    for name, value in (("calibration_n", calibration_n), ("window_n", window_n)):
        if not (isinstance(value, int | np.integer) and value >= 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for name, value, n in (("calibration_missing", calibration_missing, calibration_n),
                           ("window_missing", window_missing, window_n)):
        if not (isinstance(value, int | np.integer) and 0 <= value <= n):
            raise ValueError(f"{name} must be an integer in [0, {n}], got {value!r}")
    table = [[calibration_missing, calibration_n - calibration_missing],
             [window_missing, window_n - window_missing]]
    p = float(stats.fisher_exact(table).pvalue)
    rate = window_missing / window_n - calibration_missing / calibration_n
    return {"test": "fisher_exact", "statistic": float(rate), "p_value": min(1.0, p),
            "rates": {"calibration": calibration_missing / calibration_n,
                      "window": window_missing / window_n}}


def _table(calibration: ArrayLike, window: ArrayLike, cells: Sequence[str]) -> NDArray[np.int64]:
    cal, win = np.asarray(calibration), np.asarray(window)
    for name, arr in (("calibration", cal), ("window", win)):
        counts = arr.shape == (len(cells),) and np.issubdtype(arr.dtype, np.integer)
        if not counts or (arr < 0).any():
            raise ValueError(f"{name} must be {len(cells)} non-negative integer counts (one per "
                             f"cell of {list(cells)!r}), got {arr!r}")
        if arr.sum() == 0:
            raise ValueError(f"{name} has no counts")
    return np.stack([cal, win]).astype(np.int64)


def _shares(counts: NDArray[np.int64], cells: Sequence[str]) -> dict[str, float]:
    total = counts.sum()
    return {str(c): float(n / total) for c, n in zip(cells, counts.tolist(), strict=True)}
