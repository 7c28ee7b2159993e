"""Weighted conformal p-values under an estimated covariate shift (WATCH's WCTM input).

After adaptation starts, the reference points (calibration + every earlier test point) and the
test point are weighted by an estimated density ratio w(x); with w̃ normalised over
reference ∪ {t}, the randomised weighted p-value is

    p_t = Σ_i w̃_i·1{s_i > s_t} + U_t·(Σ_i w̃_i·1{s_i = s_t} + w̃_t)

(Tibshirani, Barber, Candès & Ramdas 2019, Lemma 3 / eq. (7), written as a p-value; Prinster et
al. 2025, WATCH, eq. (8)). Under covariate shift with the true w it is uniform. When the test
point's own weight w̃_t ≥ ``penalty_alpha`` the weighted prediction interval at level
``penalty_alpha`` would be infinite (x is out of the reference's support), and the p-value is
*penalised*: p_t = Σ_i w̃_i·1{s_i > s_t}, deterministic and without the test point's own mass
or the ties (WATCH, Section 4.3), so that the martingale grows on out-of-support x.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales._weighted_kernels import (
    append_batch,
    refresh_weights,
    weighted_step_entry,
)
from monitor.core.martingales.density_ratio import OnlineDensityRatio
from monitor.core.martingales.pvalues import ConformalPValue
from monitor.core.martingales.state import check_state, decode_float, encode_float, new_state

__all__ = ["WeightedConformalPValue"]

_F64 = np.dtype(np.float64)


class WeightedConformalPValue:
    """Randomised weighted conformal p-values with micro-batched weights and an OOD penalty.

    Before :meth:`start_adaptation` every weight is 1 and the p-values are exactly those of
    :class:`ConformalPValue` with the same seed; each x is then a *source* point of the density
    ratio. After it, each x is a *target* point, learned at the next micro-batch boundary, and
    the reference weights are recomputed every ``batch_size`` updates (frozen in between, so
    the test point and the reference are weighted by the same function).

    Parameters
    ----------
    reference_scores
        Calibration nonconformity scores (larger = stranger).
    reference_features
        The calibration points' features, shape (n, density_ratio.n_features); they seed the
        density ratio's source reservoir.
    density_ratio
        The online classifier; this object trains it and resets it in :meth:`reset`.
    batch_size
        Updates between two weight refreshes (each costs O((n_reference) · d)).
    penalty_alpha
        Penalise when the test point's normalised weight w̃_t reaches this level, in (0, 1].
    seed
        Seed of the tie-breaking uniforms (the same stream as :class:`ConformalPValue`).
    grow_reference
        True (default): every test point joins the reference, as in the conformal test
        martingale. False: after adaptation starts the reference is frozen at the
        pre-adaptation points (WATCH's ``fixed_cal`` variant), which keeps the refresh cost
        constant and keeps penalising a persistent out-of-support region (see the docs).
    window
        None (default here): the reference keeps every point. An integer K: it keeps only the
        n_calibration + K most recent points (the calibration counts as the oldest); older ones
        are evicted at micro-batch boundaries (and when adaptation starts), so memory and the
        refresh cost stay O((n_calibration + K + batch_size) · d). Validity is then approximate, see
        ``docs/algorithms.md`` (section 5, bounded reference).

    Examples
    --------
    Calibration x ~ N(0, 1); after adaptation, 200 benign points x ~ N(1, 1), then x near 6,
    outside the calibration support: their p-values are penalised and the martingale grows.

    >>> import numpy as np
    >>> from monitor.core.martingales import CompositeJumper
    >>> rng = np.random.default_rng(0)
    >>> x_cal = rng.normal(size=(300, 1))
    >>> ratio = OnlineDensityRatio(n_features=1, seed=0, learning_rate=0.05)
    >>> wcp = WeightedConformalPValue(np.abs(rng.normal(size=300)), x_cal, ratio, seed=0,
    ...                               grow_reference=False)
    >>> wcp.start_adaptation()
    >>> for x in rng.normal(1.0, 1.0, size=(200, 1)):
    ...     wcp.update(float(np.abs(rng.normal())), x)
    >>> wcp.penalised_fraction
    0.0
    >>> jumper = CompositeJumper()
    >>> for x in rng.normal(6.0, 0.2, size=(100, 1)):
    ...     wcp.update(float(np.abs(rng.normal())), x)
    ...     jumper.update(wcp.p_value)
    >>> wcp.penalised, round(wcp.penalised_fraction, 2), bool(jumper.log_martingale > np.log(100))
    (True, 0.33, True)

    References
    ----------
    Tibshirani, Barber, Candès, Ramdas. Conformal prediction under covariate shift. NeurIPS 2019.
    Prinster, Han, Liu, Saria. WATCH: Adaptive Monitoring for AI Deployments via
    Weighted-Conformal Martingales. ICML 2025, arXiv 2505.04608.
    """

    def __init__(
        self,
        reference_scores: ArrayLike,
        reference_features: ArrayLike,
        density_ratio: OnlineDensityRatio,
        batch_size: int = 32,
        penalty_alpha: float = 0.1,
        seed: int | None = None,
        grow_reference: bool = True,
        window: int | None = None,
    ) -> None:
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1
        ):
            raise ValueError(f"window must be None or a positive integer, got {window!r}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not 0.0 < float(penalty_alpha) <= 1.0:
            raise ValueError(f"penalty_alpha must lie in (0, 1], got {penalty_alpha!r}")
        self.reference_scores = reference_scores
        self.reference_features = reference_features
        self.density_ratio = density_ratio
        self.batch_size = batch_size
        self.penalty_alpha = penalty_alpha
        self.seed = seed
        self.grow_reference = grow_reference
        self.window = window
        self._plain = ConformalPValue(reference_scores, seed=seed)
        self._load_reference(reference_scores, reference_features)

    # ------------------------------------------------------------------ setup
    def _load_reference(self, scores: ArrayLike, features: ArrayLike) -> None:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        d = int(self.density_ratio.n_features)
        x = np.asarray(features, dtype=np.float64).reshape(-1, d)
        if x.shape[0] != s.size:
            raise ValueError(f"{s.size} reference scores but {x.shape[0]} feature rows")
        self.density_ratio.learn_sources(x)
        self._configure()
        self._allocate(s.size)
        self._scores[: s.size], self._columns[:, : s.size] = s, x.T
        self._n = s.size
        self._n_fixed = s.size  # the reference never shrinks below the calibration size
        self._n_evicted = 0
        self._adapting = False
        self._penalised = False
        self._n_adapt = 0
        self._n_penalised = 0
        self._p_value = math.nan
        self._sum_w2 = 0.0

    def _configure(self) -> None:
        """Cache the validated parameters as the per-event path uses them."""
        self._batch, self._alpha = int(self.batch_size), float(self.penalty_alpha)
        self._grow, self._d = bool(self.grow_reference), int(self.density_ratio.n_features)
        self._window = None if self.window is None else int(self.window)
        self._lin = self.density_ratio.linear_params()
        self._draw_uniform = self._plain.draw_uniform
        # the current micro-batch; grown on demand up to batch_size rows
        self._pend = np.zeros((min(self._batch, 64), 2 + self._d), np.float64)
        self._n_pend = 0

    def _allocate(self, capacity: int) -> None:
        """Empty reference arrays (see ``_weighted_kernels`` for the layouts)."""
        capacity = max(16, capacity)
        self._scores = np.empty(capacity, np.float64)  # arrival order
        self._columns = np.empty((self._d, capacity), np.float64)
        self._order = np.empty(capacity, np.int64)
        self._ref = np.zeros((2, capacity + 1), np.float64)
        self._scratch = np.empty(capacity, np.float64)

    def _reserve(self, extra: int) -> None:
        """Room for ``extra`` more points: capacity doubling, amortised O(1) per point."""
        n = self._n
        if n + extra <= self._scores.size:
            return
        scores, columns, order, ref = self._scores, self._columns, self._order, self._ref
        self._allocate(max(2 * scores.size, n + extra))
        self._scores[:n], self._columns[:, :n], self._order[:n] = scores[:n], columns[:, :n], \
            order[:n]
        self._ref[0, :n], self._ref[1, : n + 1] = ref[0, :n], ref[1, : n + 1]

    # ------------------------------------------------------------ properties
    @property
    def p_value(self) -> float:
        """The last p-value (nan before the first update)."""
        return self._p_value

    @property
    def penalised(self) -> bool:
        """Whether the last p-value was penalised (out-of-support test point)."""
        return self._penalised

    @property
    def penalised_fraction(self) -> float:
        """Share of penalised p-values since adaptation started (0 before)."""
        return self._n_penalised / self._n_adapt if self._n_adapt else 0.0

    @property
    def adapting(self) -> bool:
        return self._adapting

    @property
    def n_reference(self) -> int:
        return self._n + (self._n_pend if self._grow else 0)

    @property
    def n_evicted(self) -> int:
        """Points evicted from the reference by ``window`` since the last reset."""
        return self._n_evicted

    @property
    def weights_ess(self) -> float:
        """Effective sample size (Σw)² / Σw² of the current reference weights."""
        if not self._adapting:
            return float(self._n)
        pending, sq = 0.0, 0.0
        if self._grow:
            # summed in order, as the compiled batch path (builtin sum() compensates from 3.12)
            for w in self._pend[: self._n_pend, 1].tolist():
                pending += w
                sq += w * w
        total = float(self._ref[1, self._n]) + pending
        sq = self._sum_w2 + sq
        return total * total / sq if sq > 0.0 else 0.0

    # --------------------------------------------------------------- updates
    def start_adaptation(self) -> None:
        """From now on weight by the estimated density ratio (the adaptation start A)."""
        if self._adapting:
            return
        self._evict()
        self._adapting = True
        n = self._n
        self._order[:n] = np.argsort(self._scores[:n], kind="stable")
        self._ref[0, :n] = self._scores[self._order[:n]]
        self._refresh_weights()

    def update(self, score: float, x: ArrayLike) -> None:
        """p-value of ``score`` (with features ``x``) against the reference; then add it."""
        if not self._adapting:
            self._update_unweighted(score, x)
            return
        score = float(score)
        if score != score:
            raise ValueError("score is NaN; a nonconformity score must be a number")
        # the compiled entry takes exactly a contiguous float64 vector
        if type(x) is not np.ndarray or x.dtype is not _F64 or x.ndim != 1 or x.strides[0] != 8:
            x = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(-1))
        k = self._n_pend
        if k == self._pend.shape[0]:
            self._pend = np.concatenate([self._pend, np.zeros_like(self._pend)])
        above, tied_w, total, w_t = weighted_step_entry()(
            x, self._lin, self._pend, self._ref, self._n, k, score, self._grow
        )
        if total != total:
            raise ValueError(f"x must be {self._d} finite numbers, got {x.tolist()!r}")
        u = self._draw_uniform()  # drawn even when unused: one uniform per update
        self._penalised = penalised = w_t / total >= self._alpha
        self._p_value = above / total if penalised else (above + u * tied_w) / total
        self._n_adapt += 1
        self._n_penalised += penalised
        self._n_pend = k + 1
        if k + 1 >= self._batch:
            self._end_batch()

    def _update_unweighted(self, score: float, x: ArrayLike) -> None:
        row = np.asarray(x, dtype=np.float64).reshape(-1)
        self._plain.update(score)
        self._p_value = self._plain.p_value
        self.density_ratio.learn_source(row)
        self._reserve(1)
        self._scores[self._n], self._columns[:, self._n] = float(score), row
        self._n += 1

    def _end_batch(self) -> None:
        """Learn the batch's target points, merge its scores, refresh every weight."""
        k, n = self._n_pend, self._n
        # rows checked finite by weighted_step: the ratio's unchecked batch path
        self.density_ratio._learn_targets(self._pend[:k, 2:])
        if self._grow:
            self._reserve(k)
            append_batch(self._scores, self._columns, self._order, self._ref, n, self._pend, k)
            self._n = n + k
            self._evict()
        self._n_pend = 0
        self._refresh_weights()

    def _evict(self) -> None:
        """Drop the oldest points beyond n_fixed + ``window``, calibration points first.

        Arrival indices [0, extra) leave and the later ones move down; the sorted scores keep
        their order (ties stay in arrival order). No point stays forever, so no part of the
        reference is fixed for the whole stream (``docs/algorithms.md``). The caller refreshes
        the weights.
        """
        n, window = self._n, self._window
        extra = 0 if window is None else n - self._n_fixed - window
        if extra <= 0:
            return
        kept = n - extra
        self._scores[:kept] = self._scores[extra:n]  # numpy copies overlapping slices safely
        self._columns[:, :kept] = self._columns[:, extra:n]
        if self._adapting:
            order = self._order[:n]
            keep = order >= extra
            self._order[:kept] = order[keep] - extra
            self._ref[0, :kept] = self._ref[0, :n][keep]
        self._n = kept
        self._n_evicted += extra

    def _refresh_weights(self) -> None:
        """Recompute every reference weight with the current (now frozen) density ratio."""
        self._lin = self.density_ratio.linear_params()
        self._sum_w2 = float(refresh_weights(
            self._columns, self._n, self._order, self._lin, self._ref, self._scratch
        ))

    def reset(self, reference_scores: ArrayLike, reference_features: ArrayLike) -> None:
        """New calibration reference; ends adaptation and resets the density ratio."""
        self.reference_scores = reference_scores
        self.reference_features = reference_features
        self._plain.reset(reference_scores)
        self.density_ratio.reset()
        self._load_reference(reference_scores, reference_features)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (numpy arrays allowed), including the density ratio's.

        The layout of the list-based implementation (scores and features in arrival order,
        the current micro-batch included when it joins the reference), so older states load.
        """
        params = {"batch_size": int(self.batch_size), "penalty_alpha": float(self.penalty_alpha),
                  "seed": self.seed, "grow_reference": bool(self.grow_reference),
                  "window": self._window}
        n, k = self._n, self._n_pend
        joined = k if self._grow else 0
        merged = n if self._adapting else 0
        pend = self._pend[:k]
        return new_state(
            self, params=params, plain=self._plain.state_dict(),
            density_ratio=self.density_ratio.state_dict(),
            scores=np.concatenate([self._scores[:n], pend[:joined, 0]]),
            features=np.concatenate([self._columns[:, :n].T, pend[:joined, 2:]]),
            adapting=self._adapting, penalised=self._penalised, n_adapt=self._n_adapt,
            n_penalised=self._n_penalised, p_value=encode_float(self._p_value),
            order=self._order[:merged].copy(), cum=self._ref[1, : merged + 1].copy(),
            sum_w2=self._sum_w2, n_fixed=self._n_fixed, n_evicted=self._n_evicted,
            pending_scores=pend[:joined, 0].tolist(),
            pending_weights=pend[:joined, 1].tolist(), pending_x=pend[:, 2:].copy(),
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> WeightedConformalPValue:
        """Rebuild from :meth:`state_dict` output."""
        check_state(state, cls)
        obj = cls.__new__(cls)
        params = state["params"]
        obj.batch_size, obj.penalty_alpha = params["batch_size"], params["penalty_alpha"]
        obj.seed, obj.grow_reference = params["seed"], bool(params["grow_reference"])
        obj.window = params.get("window")  # states saved before the bound: unbounded
        obj.density_ratio = OnlineDensityRatio.from_state(state["density_ratio"])
        obj._plain = ConformalPValue.from_state(state["plain"])
        obj._configure()
        scores = np.asarray(state["scores"], np.float64).reshape(-1)
        features = np.asarray(state["features"], np.float64).reshape(scores.size, obj._d)
        obj.reference_scores, obj.reference_features = scores, features
        obj._restore_reference(state, scores, features)
        obj._adapting, obj._penalised = bool(state["adapting"]), bool(state["penalised"])
        obj._n_adapt, obj._n_penalised = int(state["n_adapt"]), int(state["n_penalised"])
        obj._p_value = decode_float(state["p_value"], math.nan)
        obj._sum_w2 = float(state["sum_w2"])
        obj._n_fixed = int(state.get("n_fixed", 0))
        obj._n_evicted = int(state.get("n_evicted", 0))
        return obj

    def _restore_reference(self, state: dict[str, Any], scores: NDArray[np.float64],
                           features: NDArray[np.float64]) -> None:
        pending_x = np.asarray(state["pending_x"], np.float64).reshape(-1, self._d)
        joined = len(state["pending_scores"])
        n = self._n = scores.size - joined
        self._allocate(scores.size)
        self._scores[:n], self._columns[:, :n] = scores[:n], features[:n].T
        order = np.asarray(state["order"], np.int64).reshape(-1)
        self._order[: order.size] = order
        self._ref[0, : order.size] = scores[order]
        cum = np.asarray(state["cum"], np.float64).reshape(-1)
        self._ref[1, : cum.size] = cum
        k = self._n_pend = pending_x.shape[0]
        self._pend = np.zeros((max(k, self._pend.shape[0]), 2 + self._d), np.float64)
        self._pend[:k, 2:] = pending_x
        self._pend[:joined, 0] = np.asarray(state["pending_scores"], np.float64)
        self._pend[:joined, 1] = np.asarray(state["pending_weights"], np.float64)
