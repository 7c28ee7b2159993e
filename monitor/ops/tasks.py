"""The bundled prediction tasks: real data shipped with river and a model fitted on part of it,
the rest held out as the pool streams are drawn from (no downloads).

The regression task is built from the Statlog (Shuttle) data bundled with river
(``river/datasets/shuttle.csv.gz``: 49 097 rows, nine integer sensor readings ``f1 … f9``).
Three of the readings are (up to ±2) sums of others — ``f7 = f3 − f1``, ``f8 = f3 − f5``,
``f9 = f1 − f5`` — so the task predicts ``f9`` from ``f2, f3, f4, f6, f7``: ``f1 = f3 − f7`` is
then recoverable but ``f5`` is not, which leaves a real, strongly heteroscedastic prediction
problem (R² ≈ 0.90 on held-out rows; the mean absolute residual is ≈ 0.5 in the lowest quartile
of predictions and ≈ 9 in the highest). A ``HistGradientBoostingRegressor`` (100 iterations) is
fitted on a training split of 10 000 rows; the other 39 097 rows are the *pool* from which
calibration sets and streams are drawn, so the model never saw them.

A classification task (:func:`load_banana_classification`) is built from the Banana data bundled
with river (``river/datasets/banana.zip``: 5 300 rows, two features, two overlapping classes): a
``HistGradientBoostingClassifier`` fitted on 1 300 rows, the other 4 000 the pool (accuracy
≈ 0.89). ``bench/bench_compare.py --task classification`` scripts its shifts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

__all__ = [
    "BANANA_FEATURES",
    "SHUTTLE_COLUMNS",
    "SHUTTLE_FEATURES",
    "SHUTTLE_TARGET",
    "ClassificationTask",
    "RegressionTask",
    "banana_path",
    "load_banana",
    "load_banana_classification",
    "load_shuttle",
    "load_shuttle_regression",
    "shuttle_path",
]

FloatArray = NDArray[np.float64]

SHUTTLE_COLUMNS: tuple[str, ...] = tuple(f"f{i}" for i in range(1, 10))
SHUTTLE_FEATURES: tuple[str, ...] = ("f2", "f3", "f4", "f6", "f7")
SHUTTLE_TARGET = "f9"

_N_TRAIN = 10_000


def shuttle_path() -> Path:
    """Path of the Shuttle CSV bundled with river."""
    import river.datasets

    return Path(river.datasets.__file__).parent / "shuttle.csv.gz"


@functools.lru_cache(maxsize=1)
def load_shuttle() -> FloatArray:
    """All 49 097 Shuttle rows, columns ``f1 … f9`` then ``anomaly`` (read-only array)."""
    data = np.loadtxt(shuttle_path(), delimiter=",", skiprows=1)
    data.setflags(write=False)
    return data


@dataclass(frozen=True, eq=False)
class RegressionTask:
    """A fitted model and the held-out pool of rows it never saw.

    Attributes
    ----------
    X, y
        The pool: features (columns ``feature_names``) and target of the held-out rows.
    pred
        The model's predictions for the pool rows (computed once).
    model
        The fitted regressor; :meth:`predict` is its prediction.
    """

    name: str
    feature_names: tuple[str, ...]
    target_name: str
    X: FloatArray
    y: FloatArray
    pred: FloatArray
    model: HistGradientBoostingRegressor
    seed: int

    def predict(self, X: ArrayLike) -> FloatArray:
        """The model's predictions for the rows of ``X``."""
        with threadpool_limits(1):
            pred = self.model.predict(np.asarray(X, dtype=np.float64))
        return np.asarray(pred, dtype=np.float64)

    def column(self, name: str) -> int:
        """Position of feature ``name`` in ``X``."""
        return self.feature_names.index(name)


@functools.lru_cache(maxsize=4)
def load_shuttle_regression(seed: int = 0) -> RegressionTask:
    """The Shuttle regression task: predict ``f9`` from ``f2, f3, f4, f6, f7``.

    ``seed`` chooses the 10 000 training rows and the model's random state; the remaining rows
    form the pool. Cached: repeated calls with the same seed return the same object.

    Examples
    --------
    >>> task = load_shuttle_regression()
    >>> task.X.shape, task.feature_names
    ((39097, 5), ('f2', 'f3', 'f4', 'f6', 'f7'))
    """
    data = load_shuttle()
    order = np.random.default_rng(seed).permutation(data.shape[0])
    cols = np.array([SHUTTLE_COLUMNS.index(c) for c in SHUTTLE_FEATURES])
    target = SHUTTLE_COLUMNS.index(SHUTTLE_TARGET)
    train, pool = order[:_N_TRAIN], order[_N_TRAIN:]
    X, y = data[np.ix_(pool, cols)].copy(), data[pool, target].copy()
    model = HistGradientBoostingRegressor(max_iter=100, random_state=seed)
    # One thread: OpenMP oversubscription on a shared machine costs far more than it saves here.
    with threadpool_limits(1):
        model.fit(data[np.ix_(train, cols)], data[train, target])
        pred = np.asarray(model.predict(X), dtype=np.float64)
    for arr in (X, y, pred):
        arr.setflags(write=False)
    return RegressionTask("shuttle", SHUTTLE_FEATURES, SHUTTLE_TARGET, X, y, pred, model, seed)


# ---------------------------------------------------------------------------------------------
# Classification: the Banana data bundled with river

BANANA_FEATURES: tuple[str, ...] = ("x1", "x2")
_N_TRAIN_BANANA = 1300


def banana_path() -> Path:
    """Path of the Banana archive bundled with river (``banana.zip``, libsvm format)."""
    import river.datasets

    return Path(river.datasets.__file__).parent / "banana.zip"


@functools.lru_cache(maxsize=1)
def load_banana() -> FloatArray:
    """All 5 300 Banana rows: columns ``x1``, ``x2`` then the class (0 or 1); read-only.

    The Banana data (OpenML 1460, bundled with river as ``banana.zip``): two features, two
    classes shaped like overlapping bananas (44.8 % of rows in class 1), so that even a good
    model errs on about one row in nine.

    Examples
    --------
    >>> data = load_banana()
    >>> data.shape, sorted(set(data[:, 2].tolist()))
    ((5300, 3), [0.0, 1.0])
    """
    import zipfile

    with zipfile.ZipFile(banana_path()) as archive:
        text = archive.read("banana.all.txt").decode("ascii")
    rows = []
    for line in text.splitlines():
        label, *pairs = line.split()
        features = dict(pair.split(":") for pair in pairs)
        rows.append([float(features["1"]), float(features["2"]), float(float(label) > 0)])
    data = np.array(rows, dtype=np.float64)
    data.setflags(write=False)
    return data


@dataclass(frozen=True, eq=False)
class ClassificationTask:
    """A fitted classifier and the held-out pool of rows it never saw.

    Attributes
    ----------
    X, y
        The pool: features (columns ``feature_names``) and class indices (int64).
    proba
        The model's class probabilities for the pool rows, ``(n, k)`` (computed once).
    """

    name: str
    feature_names: tuple[str, ...]
    X: FloatArray
    y: NDArray[np.int64]
    proba: FloatArray
    model: Any
    seed: int

    def column(self, name: str) -> int:
        """Position of feature ``name`` in ``X``."""
        return self.feature_names.index(name)


@functools.lru_cache(maxsize=4)
def load_banana_classification(seed: int = 0) -> ClassificationTask:
    """The Banana classification task: a ``HistGradientBoostingClassifier`` (100 iterations)
    fitted on 1 300 rows chosen by ``seed``; the other 4 000 rows are the pool (accuracy ≈ 0.89
    on them for seed 0). Cached like :func:`load_shuttle_regression`.

    Examples
    --------
    >>> task = load_banana_classification()
    >>> task.X.shape, task.proba.shape, round(float((task.proba.argmax(1) == task.y).mean()), 2)
    ((4000, 2), (4000, 2), 0.89)
    """
    from sklearn.ensemble import HistGradientBoostingClassifier

    data = load_banana()
    order = np.random.default_rng(seed).permutation(data.shape[0])
    train, pool = order[:_N_TRAIN_BANANA], order[_N_TRAIN_BANANA:]
    X, y = data[pool, :2].copy(), data[pool, 2].astype(np.int64)
    model = HistGradientBoostingClassifier(max_iter=100, random_state=seed)
    with threadpool_limits(1):
        model.fit(data[train, :2], data[train, 2].astype(np.int64))
        proba = np.asarray(model.predict_proba(X), dtype=np.float64)
    for arr in (X, y, proba):
        arr.setflags(write=False)
    return ClassificationTask("banana", BANANA_FEATURES, X, y, proba, model, seed)
