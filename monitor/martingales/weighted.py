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
from bisect import bisect_left, bisect_right
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.martingales._state import check_state, decode_float, encode_float, new_state
from monitor.martingales.density_ratio import OnlineDensityRatio
from monitor.martingales.pvalues import ConformalPValue

__all__ = ["WeightedConformalPValue"]


class _FeatureStore:
    """Append-only (n, d) float64 rows with amortised O(d) appends (capacity doubling)."""

    def __init__(self, rows: NDArray[np.float64]) -> None:
        self.data = np.array(rows, dtype=np.float64, copy=True).reshape(rows.shape[0], -1)
        self.size = rows.shape[0]

    def append(self, row: NDArray[np.float64]) -> None:
        if self.size == self.data.shape[0]:
            grown = np.empty((max(16, 2 * self.size), self.data.shape[1]), np.float64)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size] = row
        self.size += 1

    @property
    def rows(self) -> NDArray[np.float64]:
        return self.data[: self.size]


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

    Examples
    --------
    Calibration x ~ N(0, 1); after adaptation, 200 benign points x ~ N(1, 1), then x near 6,
    outside the calibration support: their p-values are penalised and the martingale grows.

    >>> import numpy as np
    >>> from monitor.martingales import CompositeJumper
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
    ) -> None:
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
        self._plain = ConformalPValue(reference_scores, seed=seed)
        self._load_reference(reference_scores, reference_features)

    # ------------------------------------------------------------------ setup
    def _load_reference(self, scores: ArrayLike, features: ArrayLike) -> None:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        d = int(self.density_ratio.n_features)
        x = np.asarray(features, dtype=np.float64).reshape(-1, d)
        if x.shape[0] != s.size:
            raise ValueError(f"{s.size} reference scores but {x.shape[0]} feature rows")
        self._scores: list[float] = s.tolist()
        self._features = _FeatureStore(x)
        for row in x:
            self.density_ratio.learn_source(row)
        self._adapting = False
        self._penalised = False
        self._n_adapt = 0
        self._n_penalised = 0
        self._p_value = math.nan
        self._clear_batch()

    def _clear_batch(self) -> None:
        self._pending_scores: list[float] = []
        self._pending_weights: list[float] = []
        self._pending_x: list[NDArray[np.float64]] = []
        self._sorted_scores: list[float] = []
        self._order = np.empty(0, np.int64)
        self._cum = np.zeros(1)
        self._cum_list: list[float] = [0.0]
        self._sum_w2 = 0.0

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
        return len(self._scores)

    @property
    def weights_ess(self) -> float:
        """Effective sample size (Σw)² / Σw² of the current reference weights."""
        if not self._adapting:
            return float(len(self._scores))
        total = self._cum_list[-1] + sum(self._pending_weights)
        sq = self._sum_w2 + sum(w * w for w in self._pending_weights)
        return total * total / sq if sq > 0.0 else 0.0

    # --------------------------------------------------------------- updates
    def start_adaptation(self) -> None:
        """From now on weight by the estimated density ratio (the adaptation start A)."""
        if self._adapting:
            return
        self._adapting = True
        self._order = np.argsort(np.asarray(self._scores), kind="stable")
        self._refresh_weights()

    def update(self, score: float, x: ArrayLike) -> None:
        """p-value of ``score`` (with features ``x``) against the reference; then add it."""
        row = np.asarray(x, dtype=np.float64).reshape(-1)
        if not self._adapting:
            self._plain.update(score)
            self._p_value = self._plain.p_value
            self.density_ratio.learn_source(row)
            self._append(float(score), row)
            return
        score = float(score)
        if score != score:
            raise ValueError("score is NaN; a nonconformity score must be a number")
        w_t = self.density_ratio.weight(row)
        self._p_value = self._weighted_p(score, w_t)
        self._n_adapt += 1
        self._n_penalised += self._penalised
        self._pending_x.append(row)
        if self.grow_reference:
            self._append(score, row)
            self._pending_scores.append(score)
            self._pending_weights.append(w_t)
        if len(self._pending_x) >= int(self.batch_size):
            self._end_batch()

    def _append(self, score: float, row: NDArray[np.float64]) -> None:
        self._scores.append(score)
        self._features.append(row)

    def _weighted_p(self, score: float, w_t: float) -> float:
        """Weighted masses above / at ``score`` from prefix sums plus the pending micro-batch."""
        cum = self._cum_list
        hi = bisect_right(self._sorted_scores, score)
        lo = bisect_left(self._sorted_scores, score, 0, hi)
        above, tied, pending = cum[-1] - cum[hi], cum[hi] - cum[lo], 0.0
        for s, w in zip(self._pending_scores, self._pending_weights, strict=True):
            pending += w
            if s > score:
                above += w
            elif s == score:
                tied += w
        total = cum[-1] + pending + w_t
        u = self._plain.draw_uniform()  # drawn even when unused: one uniform per update
        self._penalised = w_t / total >= float(self.penalty_alpha)
        if self._penalised:
            return above / total
        return (above + u * (tied + w_t)) / total

    def _end_batch(self) -> None:
        for row in self._pending_x:
            self.density_ratio.learn_target(row)
        n_old = len(self._order)
        new_idx = n_old + np.argsort(np.asarray(self._pending_scores), kind="stable")
        scores = np.asarray(self._scores)
        at = np.searchsorted(scores[self._order], scores[new_idx], side="right")
        self._order = np.insert(self._order, at, new_idx)
        self._pending_scores, self._pending_weights, self._pending_x = [], [], []
        self._refresh_weights()

    def _refresh_weights(self) -> None:
        """Recompute every reference weight with the current (now frozen) density ratio."""
        weights = self.density_ratio.weights(self._features.rows)[self._order]
        self._cum = np.concatenate([[0.0], np.cumsum(weights)])
        self._cum_list = self._cum.tolist()
        self._sum_w2 = float(np.dot(weights, weights))
        self._sorted_scores = np.asarray(self._scores)[self._order].tolist()

    def reset(self, reference_scores: ArrayLike, reference_features: ArrayLike) -> None:
        """New calibration reference; ends adaptation and resets the density ratio."""
        self.reference_scores = reference_scores
        self.reference_features = reference_features
        self._plain.reset(reference_scores)
        self.density_ratio.reset()
        self._load_reference(reference_scores, reference_features)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (numpy arrays allowed), including the density ratio's."""
        params = {"batch_size": int(self.batch_size), "penalty_alpha": float(self.penalty_alpha),
                  "seed": self.seed, "grow_reference": bool(self.grow_reference)}
        return new_state(
            self, params=params, plain=self._plain.state_dict(),
            density_ratio=self.density_ratio.state_dict(),
            scores=np.asarray(self._scores, np.float64), features=self._features.rows.copy(),
            adapting=self._adapting, penalised=self._penalised, n_adapt=self._n_adapt,
            n_penalised=self._n_penalised, p_value=encode_float(self._p_value),
            order=self._order.copy(), cum=self._cum.copy(), sum_w2=self._sum_w2,
            pending_scores=list(self._pending_scores),
            pending_weights=list(self._pending_weights),
            pending_x=np.asarray(self._pending_x, np.float64).reshape(
                len(self._pending_x), int(self.density_ratio.n_features)
            ),
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> WeightedConformalPValue:
        """Rebuild from :meth:`state_dict` output."""
        check_state(state, cls)
        obj = cls.__new__(cls)
        params = state["params"]
        obj.batch_size, obj.penalty_alpha = params["batch_size"], params["penalty_alpha"]
        obj.seed, obj.grow_reference = params["seed"], bool(params["grow_reference"])
        obj.density_ratio = OnlineDensityRatio.from_state(state["density_ratio"])
        obj._plain = ConformalPValue.from_state(state["plain"])
        scores = np.asarray(state["scores"], np.float64)
        obj._scores = scores.tolist()
        features = np.asarray(state["features"], np.float64)
        obj._features = _FeatureStore(features.reshape(scores.size, -1))
        obj.reference_scores, obj.reference_features = obj._scores, obj._features.rows
        obj._adapting, obj._penalised = bool(state["adapting"]), bool(state["penalised"])
        obj._n_adapt, obj._n_penalised = int(state["n_adapt"]), int(state["n_penalised"])
        obj._p_value = decode_float(state["p_value"], math.nan)
        obj._order = np.asarray(state["order"], np.int64)
        obj._cum = np.asarray(state["cum"], np.float64)
        obj._cum_list = obj._cum.tolist()
        obj._sum_w2 = float(state["sum_w2"])
        obj._sorted_scores = scores[obj._order].tolist()
        obj._pending_scores = [float(v) for v in state["pending_scores"]]
        obj._pending_weights = [float(v) for v in state["pending_weights"]]
        d = int(obj.density_ratio.n_features)
        obj._pending_x = list(np.asarray(state["pending_x"], np.float64).reshape(-1, d))
        return obj
