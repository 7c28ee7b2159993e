"""The protocol every OOD scorer follows, and the small checks they share.

A scorer maps a batch of model inputs of one kind (``features``, ``logits`` or ``embedding``) to one
real score per row, **higher = more in-distribution**. Scorers that need calibration data learn it
in :meth:`Scorer.fit`; the others return ``self`` from ``fit`` unchanged.
"""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import Collection
from typing import Any, ClassVar, Literal, Self, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.errors import MonitorError

InputKind = Literal["features", "logits", "embedding"]
INPUT_KINDS: tuple[str, ...] = get_args(InputKind)
FloatArray = NDArray[np.float64]


class NotFittedError(MonitorError, RuntimeError):
    """``score`` was called on a scorer that needs ``fit`` first."""


class Scorer(abc.ABC):
    """Base class of OOD scorers: ``fit`` on calibration data, then ``score`` batches.

    Subclasses set the class attributes ``name`` (the registry name) and ``input`` (which model
    output they read), store their constructor arguments verbatim as public attributes, and list
    the attributes learnt by ``fit`` in ``_fitted`` so that :meth:`state_dict` can save them.
    """

    name: ClassVar[str]
    input: InputKind
    _fitted: ClassVar[tuple[str, ...]] = ()

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Learn from calibration inputs ``X`` (and optional class labels ``y``); default: no-op."""
        as_matrix(X)
        return self

    @abc.abstractmethod
    def score(self, X: ArrayLike) -> FloatArray:
        """Scores of the rows of ``X``, shape ``(n,)``; higher = more in-distribution."""

    def score_rows(self, X: ArrayLike) -> FloatArray:
        """:meth:`score` such that a row's score does not depend on the other rows of ``X``, to
        the last bit (a matrix product's rounding depends on the shape of the whole batch).

        This default scores each row on its own, as a batch of two copies (a one-row product
        would take BLAS's matrix-vector path): exact but slow; scorers used by the covariate
        monitor override it with a compiled row-by-row computation.
        """
        rows = np.asarray(X, dtype=np.float64)
        if rows.ndim != 2:
            return self.score(rows)
        out = np.empty(rows.shape[0])
        for i in range(rows.shape[0]):
            out[i] = self.score(np.repeat(rows[i : i + 1], 2, axis=0))[0]
        return out

    @property
    def is_fitted(self) -> bool:
        """Whether every attribute learnt by ``fit`` is present."""
        return all(hasattr(self, attr) for attr in self._fitted)

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments, as stored on the instance."""
        return {p: getattr(self, p) for p in _init_params(type(self))}

    def clone(self) -> Self:
        """A new, unfitted scorer with the same constructor arguments."""
        return type(self)(**self.get_params())

    @property
    def needs_fit(self) -> bool:
        """Whether ``fit`` learns anything (then calibration scores need a held-out split)."""
        return bool(self._fitted)

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready builtins and numpy arrays that rebuild this scorer with :meth:`from_state`."""
        fitted = {a: getattr(self, a) for a in self._fitted if hasattr(self, a)}
        return {"name": self.name, "params": self.get_params(), "fitted": fitted}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Inverse of :meth:`state_dict`."""
        scorer = cls(**state["params"])
        for attr, value in state["fitted"].items():
            setattr(scorer, attr, np.asarray(value) if isinstance(value, list) else value)
        return scorer

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={_short(v)}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"{type(self).__name__} must be fitted before score(); call fit()")


@functools.cache
def _init_params(cls: type) -> tuple[str, ...]:
    """Constructor argument names of a scorer class (every checkpoint asks for them)."""
    names = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    return tuple(p for p in names if p != "self")


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    return repr(value)


def as_matrix(X: ArrayLike, name: str = "X") -> FloatArray:
    """``X`` as a finite float64 matrix ``(n, d)``; a clear ValueError otherwise."""
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (n_samples, n_dims), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def check_width(X: FloatArray, expected: int, name: str = "X") -> None:
    """Raise if ``X`` has not the number of columns seen at fit time."""
    if X.shape[1] != expected:
        raise ValueError(f"{name} has {X.shape[1]} columns, the scorer was fitted on {expected}")


def check_choice(name: str, value: object, valid: Collection[object]) -> None:
    """Raise a ValueError naming the valid values when ``value`` is not one of them."""
    if value not in valid:
        raise ValueError(f"{name} must be one of {sorted(map(str, valid))}, got {value!r}")


def check_positive(name: str, value: float, *, strict: bool = True) -> None:
    """Raise unless ``value`` is a finite number > 0 (or >= 0 with ``strict=False``)."""
    ok = np.isfinite(value) and (value > 0 if strict else value >= 0)
    if not ok:
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


def check_percentile(name: str, value: float) -> None:
    """Raise unless ``0 <= value < 100``."""
    if not (np.isfinite(value) and 0 <= value < 100):
        raise ValueError(f"{name} must be a percentile in [0, 100), got {value!r}")


def fit_standardization(X: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Column means and standard deviations of ``X``; constant columns get scale 1 (left as is)."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale[scale <= 1e-12 * np.maximum(1.0, np.abs(mean))] = 1.0
    return mean, scale


def default_input(input_kind: str | None, standardize: bool) -> InputKind:
    """Input of a feature scorer: ``features`` if standardising raw columns, else ``embedding``."""
    if input_kind is None:
        return "features" if standardize else "embedding"
    check_choice("input_kind", input_kind, ("features", "embedding"))
    return "features" if input_kind == "features" else "embedding"
