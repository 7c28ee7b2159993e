"""Online density-ratio estimation by probabilistic classification (WATCH, Section 4.2).

w(x) = P(target | x) / P(source | x) from an online ``StandardScaler | LogisticRegression``
trained one point at a time and never refit from scratch. The learner is river's ``learn_one``
arithmetic compiled (:mod:`monitor.core.martingales._logistic`, verified equal to river by
``tests/martingales/test_logistic.py``). Training is
balanced: every target point is followed by one source point drawn from a reservoir of source
points, so the class prior odds are 1 and the classifier odds equal the density ratio
p_target(x) / p_source(x) with no prior correction (Bickel, Brückner & Scheffer 2009;
Tibshirani et al. 2019, Section 3.2 — a constant factor would cancel in the normalised
weights anyway, but the clipping bounds are absolute, so the scale matters).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales._logistic import (
    ScaledLogisticSGD,
    logits_of_columns,
    odds_of_logits,
    ratio_of_row,
)
from monitor.core.martingales.state import check_state, new_state, rng_from_state, rng_state

__all__ = ["OnlineDensityRatio"]


class OnlineDensityRatio:
    """Estimated w(x) = P(target | x) / P(source | x), learned online.

    Before any target point is learned the logistic model is zero and w(x) = 1 everywhere.
    ``weight``/``weights`` evaluate the model's logit exactly as river does (standardise with
    the running mean and population variance — a zero-variance feature maps to 0 — then
    coefficients · z + intercept) and return exp(logit) with the logit clipped to
    [log clip[0], log clip[1]]: the ratio can never be 0, infinite or NaN.

    Parameters
    ----------
    n_features
        Length of every feature vector.
    seed
        Seed of the generator for reservoir sampling and for drawing the paired source point.
    clip
        (low, high) bounds of w(x), 0 < low ≤ 1 ≤ high.
    reservoir
        Capacity of the uniform reservoir of source points (Vitter's Algorithm R).
    learning_rate
        SGD learning rate of the logistic regression (coefficients and intercept).
    l2
        L2 penalty of the logistic regression.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> dr = OnlineDensityRatio(n_features=1, seed=0)
    >>> for x in rng.normal(0.0, 1.0, size=(500, 1)):
    ...     dr.learn_source(x)
    >>> for x in rng.normal(1.0, 1.0, size=(2000, 1)):   # target shifted to the right
    ...     dr.learn_target(x)
    >>> bool(dr.weight([2.0]) > 1.0 > dr.weight([-1.0]))
    True

    References
    ----------
    Prinster, Han, Liu, Saria. WATCH: Adaptive Monitoring for AI Deployments via
    Weighted-Conformal Martingales. ICML 2025 (arXiv 2505.04608), Section 4.2.
    """

    def __init__(
        self,
        n_features: int,
        seed: int | None = None,
        clip: tuple[float, float] = (1e-3, 1e3),
        reservoir: int = 2000,
        learning_rate: float = 0.01,
        l2: float = 0.0,
    ) -> None:
        if int(n_features) < 1:
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        lo, hi = (float(c) for c in clip)
        if not 0.0 < lo <= 1.0 <= hi < math.inf:
            raise ValueError(f"clip must be (low, high) with 0 < low <= 1 <= high, got {clip!r}")
        if int(reservoir) < 1:
            raise ValueError(f"reservoir must be a positive integer, got {reservoir!r}")
        if not float(learning_rate) > 0.0 or float(l2) < 0.0:
            raise ValueError("learning_rate must be > 0 and l2 >= 0")
        self.n_features = n_features
        self.seed = seed
        self.clip = clip
        self.reservoir = reservoir
        self.learning_rate = learning_rate
        self.l2 = l2
        self._lo, self._hi = lo, hi
        self._log_lo, self._log_hi = math.log(lo), math.log(hi)
        self._rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        """Forget the model and the source reservoir (the random stream continues)."""
        self._model = ScaledLogisticSGD(int(self.n_features), float(self.learning_rate),
                                        float(self.l2))
        self._source = np.empty((int(self.reservoir), int(self.n_features)), np.float64)
        self._n_source_seen = 0
        self._n_target = 0
        self._lin: NDArray[np.float64] | None = None

    @property
    def n_source(self) -> int:
        """Source points seen (the reservoir holds min(n_source, reservoir) of them)."""
        return self._n_source_seen

    @property
    def n_target(self) -> int:
        """Target points learned."""
        return self._n_target

    def _matrix(self, X: ArrayLike) -> NDArray[np.float64]:
        arr = np.asarray(X, dtype=np.float64).reshape(-1, int(self.n_features))
        if not np.isfinite(arr).all():
            raise ValueError(f"x must be {self.n_features} finite numbers per point")
        return arr

    def _vector(self, x: ArrayLike) -> NDArray[np.float64]:
        arr = np.asarray(x, dtype=np.float64).reshape(-1)
        if arr.size != int(self.n_features) or not np.isfinite(arr).all():
            raise ValueError(f"x must be {self.n_features} finite numbers, got {arr.tolist()!r}")
        return arr

    def learn_source(self, x: ArrayLike) -> None:
        """Add a source (calibration / pre-adaptation) point to the reservoir."""
        self._add_sources(self._vector(x)[np.newaxis])

    def learn_sources(self, X: ArrayLike) -> None:
        """:meth:`learn_source` for each row of ``X`` in turn (same reservoir, same draws)."""
        self._add_sources(self._matrix(X))

    def _add_sources(self, X: NDArray[np.float64]) -> None:
        """Vitter's Algorithm R: the k-th source point replaces a uniform slot with prob. R/k."""
        capacity, seen = int(self.reservoir), self._n_source_seen
        fill = min(X.shape[0], max(0, capacity - seen))
        self._source[seen : seen + fill] = X[:fill]
        if fill < X.shape[0]:
            # one draw per point, integers(k) for the k-th: an array of bounds draws the same
            slots = self._rng.integers(np.arange(seen + fill + 1, seen + X.shape[0] + 1))
            for i in np.flatnonzero(slots < capacity).tolist():  # in order: later ones win
                self._source[slots[i]] = X[fill + i]
        self._n_source_seen = seen + X.shape[0]

    def learn_target(self, x: ArrayLike) -> None:
        """Learn a target point, then one source point drawn from the reservoir (balanced)."""
        self._learn_targets(self._vector(x)[np.newaxis])

    def learn_targets(self, X: ArrayLike) -> None:
        """:meth:`learn_target` for each row of ``X`` in turn (same draws, same arithmetic)."""
        self._learn_targets(self._matrix(X))

    def _learn_targets(self, X: NDArray[np.float64]) -> None:
        filled = min(self._n_source_seen, int(self.reservoir))
        # with no source point yet, only the target half can be learned
        draws = np.empty(0, np.int64)
        if filled:
            draws = np.asarray(self._rng.integers(filled, size=X.shape[0]), np.int64)
        self._model.learn_pairs(X, self._source, draws)
        self._n_target += X.shape[0]
        self._lin = None

    def linear_params(self) -> NDArray[np.float64]:
        """The frozen model, packed: [intercept, log lo, log hi, lo, hi, means, stds, coefs].

        Cached until the model learns; read-only (the weighted p-values' kernels take it).
        """
        if self._lin is None:
            self._lin = self._model.packed((self._log_lo, self._log_hi, self._lo, self._hi))
            self._lin.flags.writeable = False
        return self._lin

    def weights(self, X: ArrayLike) -> NDArray[np.float64]:
        """Vectorised w(x) for each row of ``X`` (n, n_features); equal to :meth:`weight` per row.

        The logit is accumulated feature by feature (intercept first) and exponentiated with
        libm's exp, the same operations in the same order as :meth:`weight`.
        """
        arr = np.asarray(X, dtype=np.float64).reshape(-1, int(self.n_features))
        lin = self.linear_params()
        logits = np.empty(arr.shape[0], np.float64)
        logits_of_columns(np.ascontiguousarray(arr.T), arr.shape[0], lin, logits)
        return odds_of_logits(logits, lin)

    def weight(self, x: ArrayLike) -> float:
        """w(x) for one point: exp of the clipped logit (standardise, then coefficients · z)."""
        return float(ratio_of_row(self._vector(x), self.linear_params()))

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (no pickle): scaler moments, model coefficients, reservoir, rng.

        The layout of the river-backed implementation (feature index → value dicts, a feature
        present once it has been learned), so states stored by either load in both.
        """
        d = int(self.n_features)
        m = self._model
        filled = min(self._n_source_seen, int(self.reservoir))
        seen = [i for i in range(d) if m.counts[i] > 0]
        params = {"n_features": d, "seed": self.seed, "clip": [float(c) for c in self.clip],
                  "reservoir": int(self.reservoir), "learning_rate": float(self.learning_rate),
                  "l2": float(self.l2)}
        return new_state(
            self, params=params, rng=rng_state(self._rng),
            scaler={"counts": {str(i): int(m.counts[i]) for i in seen},
                    "means": {str(i): float(m.means[i]) for i in seen},
                    "vars": {str(i): float(m.vars[i]) for i in seen}},
            model={"weights": {str(i): float(m.coef[i]) for i in seen},
                   "intercept": float(m.intercept), "n_iterations": int(m.n_iterations)},
            source=self._source[:filled].copy(), n_source_seen=self._n_source_seen,
            n_target=self._n_target,
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> OnlineDensityRatio:
        """Rebuild from :meth:`state_dict` output."""
        check_state(state, cls)
        params = dict(state["params"])
        params["clip"] = tuple(params["clip"])
        obj = cls(**params)
        obj._rng = rng_from_state(state["rng"])
        sc, model, m = state["scaler"], state["model"], obj._model
        for key, target in (("counts", m.counts), ("means", m.means), ("vars", m.vars)):
            for i, v in sc[key].items():
                target[int(i)] = v
        for i, v in model["weights"].items():
            m.coef[int(i)] = float(v)
        m.intercept, m.n_iterations = float(model["intercept"]), int(model["n_iterations"])
        source = np.asarray(state["source"], dtype=np.float64).reshape(-1, obj._source.shape[1])
        obj._source[: source.shape[0]] = source
        obj._n_source_seen, obj._n_target = int(state["n_source_seen"]), int(state["n_target"])
        return obj
