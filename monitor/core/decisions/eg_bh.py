"""Ensemble g-BH (eg-BH): several p-value vectors merged with a proof of FDR control.

Default merge (``"e_values"``): BH e-values averaged and passed to e-BH. Run BH at a base
level alpha0 (default 0.9·alpha; alpha when K = 1) on each of K p-value vectors (K calibration
splits and/or scorers); run k's decisions become

    e_i^k = n · 1{i rejected by run k} / (alpha0 · max(R_k, 1))

(Li & Zhang 2023, Sec. 2: with alpha0 = alpha, e-BH on these reproduces run k exactly). Average
them, ē_i = (1/K) Σ_k e_i^k, and run e-BH at level alpha (Wang & Ramdas 2022, Def. 2): reject the
R largest ē with R = max{r : ē_(r) >= n / (alpha·r)}.

Guarantee: FDR <= alpha · n0/n whatever the dependence between the K runs. Proof sketch. (i) Each
run's p-values are conformal p-values against one calibration set, PRDS (Bates et al. 2023,
Theorem 2), so BH at alpha0 gives FDR_k = E[V_k / max(R_k, 1)] <= alpha0·n0/n (Benjamini &
Yekutieli 2001, Theorem 1.2); hence Σ_{i null} E[e_i^k] = (n/alpha0)·FDR_k <= n0: the e_i^k are
compound e-values (Ignatiadis, Wang & Ramdas 2024). (ii) Averaging is linear, so
Σ_{i null} E[ē_i] <= n0 with no assumption on how the runs depend on each other. (iii) e-BH
rejects i only if ē_i >= n/(alpha·R), i.e. 1{i ∈ rejected}/max(R, 1) <= alpha·ē_i/n, so
FDR = Σ_{i null} E[1{i ∈ rejected}/max(R, 1)] <= (alpha/n)·Σ_{i null} E[ē_i] <= alpha·n0/n
(Wang & Ramdas 2022, Theorem 2, in its compound form).

Why alpha0 matters: a point rejected by every run has ē = (n/alpha0)·mean_k 1/R_k, which clears
e-BH's bar n/(alpha·r) only if r >= (alpha0/alpha)·harmonic-mean(R_k). With alpha0 = alpha one
extra rejection in a single run can sink the whole ensemble; alpha0 < alpha leaves that slack at
the price of weaker base runs (Ren & Barber 2024 use alpha/2 in derandomised knockoffs).

Alternative merge (``"twice_mean"``): p̄_i = min(1, 2·mean_k p_i^k) is a valid p-value for each i
under any dependence between the K runs (Vovk & Wang 2020, Prop. 3), then BH on p̄. Its FDR
guarantee needs the merged vector to be PRDS across test points, which we do not prove, and the
factor 2 costs power; it is offered for comparison, not as the default.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.decisions.base import BatchDecision, FloatArray, as_p_values, check_alpha
from monitor.core.decisions.bh import _TIE_RTOL, benjamini_hochberg

Merge = Literal["e_values", "twice_mean"]
MERGES: tuple[str, ...] = get_args(Merge)

#: Default base level of the K BH runs as a fraction of alpha. Any fixed fraction keeps the
#: guarantee; 0.9 tolerates runs whose rejection counts differ by ~10% while keeping the
#: discreteness floor of conformal p-values low (BH needs R >= n/(alpha0·(m+1)) rejections).
#: Chosen from bench/bench_ood.py (digits and Shuttle), see docs/ood.md.
DEFAULT_BASE_FRACTION = 0.9


def default_base_alpha(alpha: float, n_runs: int) -> float:
    """The base level alpha0 of the K BH runs: alpha for K = 1, else 0.9·alpha.

    With one run, e-BH on its BH e-values at alpha0 = alpha is that BH run exactly (Li & Zhang
    2023, Sec. 2), so eg-BH loses nothing against g-BH; the slack 0.9 only pays for runs that
    disagree, and a single run cannot.
    """
    return alpha if n_runs == 1 else DEFAULT_BASE_FRACTION * alpha


def bh_e_values(p: ArrayLike, alpha: float) -> FloatArray:
    """BH at level alpha turned into e-values n·1{rejected}/(alpha·max(R, 1)) (Li & Zhang 2023).

    Examples
    --------
    >>> bh_e_values([0.001, 0.02, 0.5, 0.9], alpha=0.1)
    array([20., 20.,  0.,  0.])
    """
    decision = benjamini_hochberg(p, alpha)
    n = decision.rejected.size
    return np.where(decision.rejected, n / (alpha * max(decision.n_rejected, 1)), 0.0)


def e_benjamini_hochberg(e: ArrayLike, alpha: float) -> BatchDecision:
    """e-BH (Wang & Ramdas 2022): reject the R largest e-values, R = max{r : e_(r) >= n/(alpha·r)}.

    e-BH on e equals BH on 1/e (capped at 1), so one step-up serves both; the returned
    ``threshold`` is on that 1/e scale (alpha·R/n).

    Examples
    --------
    >>> e_benjamini_hochberg([40.0, 25.0, 1.0, 0.0], alpha=0.1).rejected.tolist()
    [True, True, False, False]
    """
    e_arr = np.asarray(e, dtype=np.float64)
    if e_arr.ndim != 1 or not (np.all(e_arr >= 0) and np.isfinite(e_arr).all()):
        raise ValueError("e must be a 1-d array of finite non-negative e-values")
    with np.errstate(divide="ignore", over="ignore"):
        as_p = np.minimum(1.0, 1.0 / e_arr)
    return benjamini_hochberg(as_p, alpha)


def ensemble_bh(
    p_values: ArrayLike,
    alpha: float,
    merge: Merge = "e_values",
    base_alpha: float | None = None,
) -> BatchDecision:
    """eg-BH on a (K, n) matrix: row k holds the n test points' p-values from run k.

    ``merge="e_values"`` (default): average of BH e-values, then e-BH (FDR <= alpha under any
    dependence between runs; see the module docstring). The K BH runs use ``base_alpha``
    (default 0.9·alpha, alpha when K = 1: :func:`default_base_alpha`): any base level keeps the
    guarantee; one below alpha leaves slack for
    runs whose rejection sets differ a little (Ren & Barber 2024 run their base procedures at
    alpha/2 for this reason), one close to alpha keeps the discreteness floor low.
    ``merge="twice_mean"``: BH on min(1, 2·mean_k p) (Vovk & Wang 2020); ``base_alpha`` is then
    unused.

    Examples
    --------
    >>> p = [[0.001, 0.002, 0.6, 0.9], [0.001, 0.004, 0.3, 0.8]]
    >>> ensemble_bh(p, alpha=0.1).rejected.tolist()
    [True, True, False, False]
    """
    check_alpha(alpha)
    if merge not in MERGES:
        raise ValueError(f"merge must be one of {list(MERGES)}, got {merge!r}")
    matrix = np.asarray(p_values, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] < 1:
        raise ValueError(f"p_values must be a (K, n) matrix, got shape {matrix.shape}")
    if not (np.isfinite(matrix).all() and (matrix >= 0).all() and (matrix <= 1).all()):
        for k, row in enumerate(matrix):
            as_p_values(row, f"p_values[{k}]")  # raises, naming the first bad row
    if merge == "twice_mean":
        return benjamini_hochberg(np.minimum(1.0, 2.0 * matrix.mean(axis=0)), alpha)
    base = default_base_alpha(alpha, matrix.shape[0]) if base_alpha is None else base_alpha
    check_alpha(base)
    mean_e = np.mean(_bh_e_value_rows(matrix, base), axis=0)
    return e_benjamini_hochberg(mean_e, alpha)


def _bh_e_value_rows(matrix: FloatArray, alpha: float) -> FloatArray:
    """:func:`bh_e_values` of every row of a checked (K, n) matrix of p-values, bit for bit.

    One argsort and one pass of each step for all K rows instead of K calls (eg-BH runs one per
    window and run). Same arithmetic per row as :func:`bh_adjusted` then the BH comparison: the
    adjusted value of tied p-values does not depend on their order in the sort, and
    n / (alpha·max(R, 1)) is the same IEEE operation on numpy floats as on Python floats.
    """
    n = matrix.shape[1]
    if n <= 1:
        return np.array([bh_e_values(row, alpha) for row in matrix]).reshape(matrix.shape)
    order = np.argsort(matrix, axis=1)
    adjusted = np.take_along_axis(matrix, order, axis=1)
    adjusted *= n / np.arange(1, n + 1, dtype=np.float64)
    np.minimum.accumulate(adjusted[:, ::-1], axis=1, out=adjusted[:, ::-1])
    unsorted = np.empty_like(adjusted)
    np.put_along_axis(unsorted, order, adjusted, axis=1)
    rejected = np.clip(unsorted, 0.0, 1.0) <= alpha * (1.0 + _TIE_RTOL)
    scale = n / (alpha * np.maximum(rejected.sum(axis=1), 1))
    return np.where(rejected, scale[:, None], 0.0)


class EnsembleBH:
    """eg-BH as a batch rule: ``decide`` a (K, n) matrix of p-values.

    Parameters
    ----------
    alpha
        Target FDR in (0, 1).
    merge
        ``"e_values"`` (default, proven under any dependence between runs) or ``"twice_mean"``.
    base_alpha
        Level of the K base BH runs for ``merge="e_values"`` (default 0.9·alpha, alpha when
        K = 1).

    Examples
    --------
    >>> EnsembleBH(alpha=0.1).decide([[0.001, 0.9], [0.002, 0.7]]).rejected.tolist()
    [True, False]
    """

    name = "eg_bh"

    def __init__(
        self, alpha: float = 0.1, merge: Merge = "e_values", base_alpha: float | None = None
    ) -> None:
        check_alpha(alpha)
        if merge not in MERGES:
            raise ValueError(f"merge must be one of {list(MERGES)}, got {merge!r}")
        if base_alpha is not None:
            check_alpha(base_alpha)
        self.alpha = alpha
        self.merge = merge
        self.base_alpha = base_alpha

    def decide(self, p_values: ArrayLike) -> BatchDecision:
        """eg-BH on a (K, n) matrix (a vector is treated as K = 1, i.e. plain BH)."""
        matrix = np.atleast_2d(np.asarray(p_values, dtype=np.float64))
        return ensemble_bh(matrix, self.alpha, self.merge, self.base_alpha)
