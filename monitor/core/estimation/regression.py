"""DLE-style estimation for a regressor: expected MAE from a model of |y − ŷ|."""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

from monitor.core.detectors.base import FloatArray, as_matrix, check_int
from monitor.core.estimation.base import LossEstimator, check_rows, check_weights
from monitor.core.martingales.state import check_state, new_state

__all__ = ["AbsoluteErrorModel", "with_prediction"]


def with_prediction(X: ArrayLike, prediction: ArrayLike) -> FloatArray:
    """The rows an :class:`AbsoluteErrorModel` reads: the features, then the prediction."""
    arr = as_matrix(X, "X")
    pred = np.asarray(prediction, dtype=np.float64).reshape(-1)
    if pred.shape != (arr.shape[0],):
        raise ValueError(f"prediction must hold one value per row of X ({arr.shape[0]}), "
                         f"got shape {pred.shape}")
    return np.column_stack([arr, pred])


class AbsoluteErrorModel(LossEstimator):
    """Expected absolute error of a regressor given its input and its prediction.

    A gradient-boosted regression (scikit-learn's ``HistGradientBoostingRegressor``, squared
    loss, so it estimates the conditional *mean* of |y − ŷ|) of the labelled rows' absolute
    residuals on z = (x, ŷ): the direct loss estimation of NannyML's DLE. The expected MAE of a
    window is the mean of ℓ̂(z), floored at 0. Like every label-free estimate it is right under
    covariate shift within the region the error model saw, blind to concept shift;
    ``sample_weight`` weights the fit towards a target window (PAPE-style).

    The state holds the training rows and refits from them (the fit is deterministic: fixed
    ``random_state``, no early stopping, one thread), so it grows with the fit set.

    Parameters
    ----------
    max_iter, max_leaf_nodes, min_samples_leaf
        The boosting's size (scikit-learn's meaning).
    seed
        The boosting's ``random_state``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(-1, 1, size=(4000, 1))
    >>> y = rng.normal(0.0, 0.1 + np.abs(x[:, 0]))  # the model ŷ = 0 errs more at |x| large
    >>> Z = with_prediction(x, np.zeros(4000))
    >>> est = AbsoluteErrorModel(max_iter=50).fit(Z[:2000], y[:2000])
    >>> hard = np.abs(x[2000:, 0]) > 0.5  # a shift to the hard region
    >>> window, labels = Z[2000:][hard], y[2000:][hard]
    >>> round(est.estimate(window), 2), round(est.realised(window, labels), 2)
    (0.69, 0.68)
    """

    metric = "mae"

    def __init__(self, max_iter: int = 100, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 20, seed: int = 0) -> None:
        check_int("max_iter", max_iter, 1)
        check_int("max_leaf_nodes", max_leaf_nodes, 2)
        check_int("min_samples_leaf", min_samples_leaf, 1)
        check_int("seed", seed, 0)
        self.max_iter = max_iter
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.seed = seed
        self._model: Any = None
        self._train: tuple[FloatArray, FloatArray, FloatArray | None] | None = None

    def clone(self) -> Self:
        return type(self)(self.max_iter, self.max_leaf_nodes, self.min_samples_leaf, self.seed)

    def fit(self, Z: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        arr, labels = check_rows(Z, y)
        if arr.shape[1] < 2:
            raise ValueError("Z must hold the features then the prediction (with_prediction)")
        w = check_weights(sample_weight, arr.shape[0])
        residual = np.abs(labels.astype(np.float64) - arr[:, -1])
        self._fit_rows(arr, residual, w)
        return self

    def _fit_rows(self, Z: FloatArray, residual: FloatArray, w: FloatArray | None) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self._model = HistGradientBoostingRegressor(
            max_iter=self.max_iter, max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf, early_stopping=False,
            random_state=self.seed,
        )
        with threadpool_limits(1):
            self._model.fit(Z, residual, sample_weight=w)
        self._train = (Z, residual, w)

    def predicted_loss(self, Z: ArrayLike) -> FloatArray:
        """ℓ̂(z): the expected |y − ŷ| of each row, floored at 0."""
        if self._model is None:
            raise ValueError("AbsoluteErrorModel is not fitted: call fit first")
        arr = as_matrix(Z, "Z")
        with threadpool_limits(1):
            pred = np.asarray(self._model.predict(arr), np.float64)
        return np.maximum(pred, 0.0)

    def estimate(self, Z: ArrayLike) -> float:
        """Expected MAE of the window's predictions."""
        return float(np.mean(self.predicted_loss(Z)))

    def realised(self, Z: ArrayLike, y: ArrayLike) -> float:
        """MAE of the window's predictions (the last column of ``Z``) against its labels."""
        arr, labels = check_rows(Z, y)
        return float(np.mean(np.abs(labels.astype(np.float64) - arr[:, -1])))

    def state_dict(self) -> dict[str, Any]:
        Z, residual, w = self._train if self._train is not None else (None, None, None)
        return new_state(self, max_iter=self.max_iter, max_leaf_nodes=self.max_leaf_nodes,
                         min_samples_leaf=self.min_samples_leaf, seed=self.seed,
                         rows=Z, residual=residual, sample_weight=w)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(int(state["max_iter"]), int(state["max_leaf_nodes"]),
                  int(state["min_samples_leaf"]), int(state["seed"]))
        if state["rows"] is not None:
            w = state["sample_weight"]
            obj._fit_rows(np.asarray(state["rows"], np.float64),
                          np.asarray(state["residual"], np.float64),
                          None if w is None else np.asarray(w, np.float64))
        return obj
