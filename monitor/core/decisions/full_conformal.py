"""Full-conformal p-values of the KNN score: every calibration row is reference *and* calibration.

Split conformal (:func:`monitor.core.decisions.conformal_p_values` on a scorer fitted on another
part
of the calibration data) spends half of the m rows on the KNN bank and ranks a test point among
the other half only. Full conformal (Vovk, Gammerman & Shafer 2005, Sec. 2.3; Lei, G'Sell,
Rinaldo, Tibshirani & Wasserman, JASA 2018, Sec. 2.1) uses all m rows for both: put the test
point x in the bag B = calibration ∪ {x}, score every point of B by its nonconformity against
the *other* m points of B, and rank x's among the m + 1:

    V_x   = k-th smallest distance from x to the m calibration rows,
    V_j(x) = k-th smallest of {d(j, i) : i ≠ j calibration} ∪ {d(j, x)},
    p(x)  = (1 + #{j : V_j(x) >= V_x}) / (m + 1).

The score is a symmetric function of the bag, so if x is exchangeable with the calibration rows
its rank among the m + 1 nonconformities is uniform and P(p(x) <= u) <= u for every u (ties
counted against x make it conservative). For the KNN distance, V_j(x) needs no refit: with
d_k(j) and d_{k−1}(j) the k-th and (k−1)-th leave-one-out distances of row j (d_0 = 0),

    V_j(x) = d_k(j)                        if d(j, x) >= d_k(j),
             max(d_{k−1}(j), d(j, x))      otherwise,

so a test point costs its m distances, as the split score does.

What is and is not proved. Each p-value is exactly valid (above). BH's FDR bound for conformal
p-values rests on their PRDS property, which Bates, Candès, Lei, Romano & Sesia (Ann. Statist.
2023, Theorem 2) prove for split conformal (one fixed score function); for full-conformal
p-values, whose bags differ from one test point to the next, PRDS is not proved, and neither is
the FDR of g-BH or eg-BH on them. The project checks it by Monte Carlo on real data
(``bench/bench_ood_tabular.py``, ``tests/decisions/test_ood_power_tabular.py``); use
``conformal="split"`` in :class:`monitor.core.decisions.OODDecider` where the proof is required.
The column standardisation (``standardize=True``) is estimated from the m calibration rows, not
from the bag, a departure of order 1/m from exact symmetry.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.decisions.base import FloatArray
from monitor.core.ood import KNN
from monitor.core.ood._distances import kth_smallest_rows, row_products

#: Largest block of squared distances (rows × calibration rows) held at once: 32 MiB of float64.
_BLOCK_ELEMENTS = 1 << 22


class FullConformalKNN:
    """Full-conformal p-values of a KNN score against all m calibration rows.

    Parameters
    ----------
    template
        An unfitted :class:`monitor.core.ood.KNN` giving k, standardisation and normalisation; it is
        cloned and fitted on all calibration rows.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> fc = FullConformalKNN(KNN(k=1, standardize=True, normalize=False))
    >>> fc = fc.fit(rng.normal(size=(99, 3)))
    >>> fc.p_values(np.array([[0.0, 0.0, 0.0], [8.0, 8.0, 8.0]])).round(2).tolist()
    [0.92, 0.01]
    """

    def __init__(self, template: KNN) -> None:
        if not isinstance(template, KNN):
            raise TypeError(
                f"template must be a monitor.core.ood.KNN, got {type(template).__name__}"
            )
        self.template = template

    @property
    def scorer(self) -> KNN:
        """The KNN fitted on every calibration row (its bank is the whole calibration set)."""
        return self.scorer_

    def fit(self, X: ArrayLike) -> Self:
        """Fit the KNN on all rows of ``X`` and store each row's leave-one-out distances."""
        scorer = self.template.clone()
        scorer.fit(X)
        m, k = scorer.bank_.shape[0], scorer.k
        if m < k + 1:
            raise ValueError(f"full conformal KNN with k={k} needs at least {k + 1} rows, got {m}")
        self.scorer_ = scorer
        self.loo_kth_, self.loo_prev_ = _leave_one_out_sq(scorer, k)
        return self

    def p_values(self, X: ArrayLike) -> FloatArray:
        """Full-conformal p-values of the rows of ``X`` (small = unlike the calibration rows)."""
        scorer = self.scorer_
        bank = scorer.bank_
        queries = scorer._transform(np.asarray(X, dtype=np.float64))
        m = bank.shape[0]
        out = np.empty(queries.shape[0])
        step = max(1, _BLOCK_ELEMENTS // m)
        for start in range(0, queries.shape[0], step):
            sq = _sq_distances(queries[start : start + step], scorer)
            v_x = kth_smallest_rows(sq, scorer.k)
            # V_j(x) = min(d_k(j), max(d_{k−1}(j), d(j, x))): the module docstring's two cases.
            v_cal = np.maximum(self.loo_prev_, sq, out=sq)
            np.minimum(v_cal, self.loo_kth_, out=v_cal)
            ranks = np.count_nonzero(v_cal >= v_x[:, None], axis=1)
            out[start : start + step] = (1.0 + ranks) / (m + 1.0)
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready builtins and numpy arrays (no pickle)."""
        return {
            "scorer": self.scorer_.state_dict(),
            "loo_kth": self.loo_kth_,
            "loo_prev": self.loo_prev_,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> FullConformalKNN:
        """Inverse of :meth:`state_dict`."""
        scorer = KNN.from_state(state["scorer"])
        fc = cls(scorer.clone())
        fc.scorer_ = scorer
        fc.loo_kth_ = np.asarray(state["loo_kth"], dtype=np.float64)
        fc.loo_prev_ = np.asarray(state["loo_prev"], dtype=np.float64)
        return fc


def _sq_distances(queries: FloatArray, scorer: KNN) -> FloatArray:
    """Squared distances (rows × bank) by ‖q‖² − 2 q·r + ‖r‖², clipped at 0; the same formula
    for calibration and test rows, so that an exact duplicate gets the same value either way.

    The cross products are summed in one fixed order (:func:`row_products`), not by BLAS, whose
    last bits depend on the thread count and on the other rows of the batch: the calibration's
    leave-one-out distances, stored in every checkpoint, are then the same in every process (a
    worker restarted with other threads refits a new configuration version bit for bit)."""
    bank = scorer.bank_.astype(np.float64, copy=False)
    sq = row_products(queries, -2.0 * bank.T)
    sq += scorer.sq_norms_[None, :]
    sq += np.einsum("ij,ij->i", queries, queries)[:, None]
    return np.maximum(sq, 0.0)


def _leave_one_out_sq(scorer: KNN, k: int) -> tuple[FloatArray, FloatArray]:
    """Each calibration row's k-th and (k−1)-th smallest squared distance to the *other* rows
    (the (k−1)-th is 0 for k = 1)."""
    bank = scorer.bank_.astype(np.float64, copy=False)
    m = bank.shape[0]
    kth, prev = np.empty(m), np.zeros(m)
    step = max(1, _BLOCK_ELEMENTS // m)
    for start in range(0, m, step):
        stop = min(start + step, m)
        sq = _sq_distances(bank[start:stop], scorer)
        sq[np.arange(stop - start), np.arange(start, stop)] = np.inf  # not its own neighbour
        kth[start:stop] = kth_smallest_rows(sq, k)
        if k > 1:
            prev[start:stop] = kth_smallest_rows(sq, k - 1)
    return kth, prev
