"""Online density-ratio estimation by probabilistic classification (WATCH, Section 4.2).

w(x) = P(target | x) / P(source | x) from river's ``StandardScaler | LogisticRegression``,
trained one point at a time with ``learn_one`` and never refit from scratch. Training is
balanced: every target point is followed by one source point drawn from a reservoir of source
points, so the class prior odds are 1 and the classifier odds equal the density ratio
p_target(x) / p_source(x) with no prior correction (Bickel, Brückner & Scheffer 2009;
Tibshirani et al. 2019, Section 3.2 — a constant factor would cancel in the normalised
weights anyway, but the clipping bounds are absolute, so the scale matters).
"""

from __future__ import annotations

import collections
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from river import linear_model, optim, preprocessing, utils

from monitor.martingales._state import check_state, new_state, rng_from_state, rng_state

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
        self._scaler = preprocessing.StandardScaler()
        self._model = linear_model.LogisticRegression(
            optimizer=optim.SGD(self.learning_rate), l2=self.l2, intercept_lr=self.learning_rate
        )
        self._source = np.empty((int(self.reservoir), int(self.n_features)), np.float64)
        self._n_source_seen = 0
        self._n_target = 0
        self._cache: tuple[list[float], list[float], list[float], float] | None = None

    @property
    def n_source(self) -> int:
        """Source points seen (the reservoir holds min(n_source, reservoir) of them)."""
        return self._n_source_seen

    @property
    def n_target(self) -> int:
        """Target points learned."""
        return self._n_target

    def _vector(self, x: ArrayLike) -> NDArray[np.float64]:
        arr = np.asarray(x, dtype=np.float64).reshape(-1)
        if arr.size != int(self.n_features) or not np.isfinite(arr).all():
            raise ValueError(f"x must be {self.n_features} finite numbers, got {arr.tolist()!r}")
        return arr

    def _learn(self, x: NDArray[np.float64], label: bool) -> None:
        features = dict(enumerate(x.tolist()))
        self._scaler.learn_one(features)
        self._model.learn_one(self._scaler.transform_one(features), label)
        self._cache = None

    def learn_source(self, x: ArrayLike) -> None:
        """Add a source (calibration / pre-adaptation) point to the reservoir."""
        arr = self._vector(x)
        self._n_source_seen += 1
        if self._n_source_seen <= int(self.reservoir):
            self._source[self._n_source_seen - 1] = arr
            return
        slot = int(self._rng.integers(self._n_source_seen))
        if slot < int(self.reservoir):
            self._source[slot] = arr

    def learn_target(self, x: ArrayLike) -> None:
        """Learn a target point, then one source point drawn from the reservoir (balanced)."""
        arr = self._vector(x)
        self._learn(arr, True)
        self._n_target += 1
        filled = min(self._n_source_seen, int(self.reservoir))
        if filled:  # with no source point yet, only the target half can be learned
            self._learn(self._source[int(self._rng.integers(filled))], False)

    def _linear(self) -> tuple[list[float], list[float], list[float], float]:
        """(means, stds, coefficients, intercept) of the current model, cached until it learns."""
        if self._cache is None:
            d = int(self.n_features)
            means = [float(self._scaler.means.get(i, 0.0)) for i in range(d)]
            stds = [math.sqrt(float(self._scaler.vars.get(i, 0.0))) for i in range(d)]
            weights = dict(self._model._weights)
            coef = [float(weights.get(i, 0.0)) for i in range(d)]
            self._cache = (means, stds, coef, float(self._model.intercept))
        return self._cache

    def weights(self, X: ArrayLike) -> NDArray[np.float64]:
        """Vectorised w(x) for each row of ``X`` (n, n_features); equal to :meth:`weight` per row.

        The logit is accumulated feature by feature (intercept first) and exponentiated with
        libm's exp, the same operations in the same order as :meth:`weight`.
        """
        arr = np.asarray(X, dtype=np.float64).reshape(-1, int(self.n_features))
        means, stds, coef, intercept = self._linear()
        logit = np.full(arr.shape[0], intercept)
        for j, (m, sd, c) in enumerate(zip(means, stds, coef, strict=True)):
            # a constant feature standardises to 0 (river's convention); 0·c keeps -0.0 rules
            term = ((arr[:, j] - m) / sd) * c if sd > 0.0 else np.full(arr.shape[0], 0.0 * c)
            logit = logit + term
        clipped = np.clip(logit, self._log_lo, self._log_hi)
        w = np.fromiter(map(math.exp, clipped.tolist()), np.float64, clipped.size)
        # exp(log c) may miss c by an ulp: the bounds are returned exactly
        inside = np.where(logit <= self._log_lo, self._lo, w)
        return np.where(logit >= self._log_hi, self._hi, inside)

    def weight(self, x: ArrayLike) -> float:
        """w(x) for one point, in plain Python floats (fast path of :meth:`weights`)."""
        values = self._vector(x).tolist()
        means, stds, coef, logit = self._linear()
        for v, m, sd, c in zip(values, means, stds, coef, strict=True):
            logit += ((v - m) / sd) * c if sd > 0.0 else 0.0 * c
        if logit >= self._log_hi:
            return self._hi
        return self._lo if logit <= self._log_lo else math.exp(logit)

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (no pickle): scaler moments, model coefficients, reservoir, rng."""
        d = int(self.n_features)
        scaler = self._scaler
        filled = min(self._n_source_seen, int(self.reservoir))
        params = {"n_features": d, "seed": self.seed, "clip": [float(c) for c in self.clip],
                  "reservoir": int(self.reservoir), "learning_rate": float(self.learning_rate),
                  "l2": float(self.l2)}
        return new_state(
            self, params=params, rng=rng_state(self._rng),
            scaler={"counts": {str(k): int(v) for k, v in scaler.counts.items()},
                    "means": {str(k): float(v) for k, v in scaler.means.items()},
                    "vars": {str(k): float(v) for k, v in scaler.vars.items()}},
            model={"weights": {str(k): float(v) for k, v in dict(self._model._weights).items()},
                   "intercept": float(self._model.intercept),
                   "n_iterations": int(self._model.optimizer.n_iterations)},
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
        sc = state["scaler"]
        obj._scaler.counts = collections.Counter({int(k): v for k, v in sc["counts"].items()})
        obj._scaler.means = collections.defaultdict(float, _int_keys(sc["means"]))
        obj._scaler.vars = collections.defaultdict(float, _int_keys(sc["vars"]))
        model = state["model"]
        obj._model._weights = utils.VectorDict(_int_keys(model["weights"]))
        obj._model.intercept = float(model["intercept"])
        obj._model.optimizer.n_iterations = int(model["n_iterations"])
        source = np.asarray(state["source"], dtype=np.float64).reshape(-1, obj._source.shape[1])
        obj._source[: source.shape[0]] = source
        obj._n_source_seen, obj._n_target = int(state["n_source_seen"]), int(state["n_target"])
        obj._cache = None
        return obj


def _int_keys(mapping: dict[str, Any]) -> dict[int, float]:
    return {int(k): float(v) for k, v in mapping.items()}
