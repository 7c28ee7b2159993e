"""The mixed (Gower-type) embedding of tabular code rows (docs/tabular.md, "The mixed embedding").

A stream's :class:`~monitor.streams.schema.FeatureSchema` reads each event into a *code row*:
one float per feature, the number itself for a numeric feature, a category code for a
categorical one, NaN where the value is missing. Distances between code rows mean nothing for
codes, so the covariate scorer, the OOD feature scorers and the density ratio read the
embedding :func:`mixed_embedding` makes of them, fixed by the calibration:

* a numeric feature: standardised by the calibration's mean and standard deviation, a missing
  value imputed by 0 (the mean), plus a 0/1 missing-indicator column when the calibration had
  missing values in it;
* a categorical feature with K vocabulary codes: one-hot over the K codes, "other" (a code of K:
  a calibration category outside the vocabulary), "unseen" (K + 1: never in the calibration, a
  column that is 0 on every calibration row, so an unseen category lies outside the calibration
  support: the covariate monitor's coordinate check flags it) and "missing", each
  column scaled by √½, so that two rows differing in that feature's category are at a squared
  Euclidean distance of exactly 2 · ½ = 1 more than if they agreed (up to rounding).

The squared Euclidean distance of two embedded rows is then a Gower-type distance (Gower,
Biometrics 1971): standardised squared differences on numeric features, one per category or
missingness mismatch. It is a fixed function of the raw features, chosen from the calibration
alone, so a conformal score computed from it is as valid as any (Vovk, Gammerman & Shafer,
*Algorithmic Learning in a Random World*, 2nd ed. 2022, Thm. 11.1).

>>> layout = (NumericLayout(mean=1.0, scale=2.0, indicator=True), CategoricalLayout(n_codes=2))
>>> mixed_embedding(np.array([[3.0, 1.0], [np.nan, np.nan]]), layout).round(3)
array([[1.   , 0.   , 0.   , 0.707, 0.   , 0.   , 0.   ],
       [0.   , 1.   , 0.   , 0.   , 0.   , 0.   , 0.707]])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CategoricalLayout", "NumericLayout", "category_text", "embedding_width",
           "mixed_embedding", "numeric_mask", "unseen_columns"]

#: Default number of categories with their own code (the rest of the calibration's are "other").
MAX_CATEGORIES = 64
#: Most distinct values a categorical feature remembers from the calibration (its seen set).
MAX_SEEN = 10_000

#: The scale of a one-hot column: a category mismatch sets two columns apart, 2 · (√½)² = 1.
ONE_HOT_SCALE = math.sqrt(0.5)


def category_text(value: str | bool | float | int) -> str:
    """The category a raw value stands for: a string itself, ``true``/``false``, a number's
    text (an integral number without its ``.0``: ``1`` and ``1.0`` are one category).

    >>> [category_text(v) for v in ("DE", True, 1.0, 2, 2.5)]
    ['DE', 'true', '1', '2', '2.5']
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    number = float(value)
    if number.is_integer() and abs(number) < 2**53:
        return str(int(number))
    return repr(number)


@dataclass(frozen=True)
class NumericLayout:
    """A numeric feature's columns: ``(x - mean) / scale`` and, when ``indicator``, missing."""

    mean: float
    scale: float
    indicator: bool

    @property
    def width(self) -> int:
        return 2 if self.indicator else 1


@dataclass(frozen=True)
class CategoricalLayout:
    """A categorical feature's one-hot columns: ``n_codes`` vocabulary codes, other, unseen,
    missing."""

    n_codes: int

    @property
    def width(self) -> int:
        return self.n_codes + 3


Layout = NumericLayout | CategoricalLayout


def embedding_width(layout: Sequence[Layout]) -> int:
    """Columns of the embedding."""
    return sum(column.width for column in layout)


def numeric_mask(layout: Sequence[Layout]) -> np.ndarray:
    """Which embedding columns are standardised numbers (the rest: 0/1 or √½ indicators)."""
    mask = np.zeros(embedding_width(layout), dtype=bool)
    at = 0
    for column in layout:
        mask[at] = isinstance(column, NumericLayout)
        at += column.width
    return mask


def unseen_columns(layout: Sequence[Layout]) -> tuple[int, ...]:
    """The embedding's "unseen" columns (one per categorical feature): 0 on every calibration
    row, so a nonzero value is a category the calibration never had."""
    out, at = [], 0
    for column in layout:
        if isinstance(column, CategoricalLayout):
            out.append(at + column.n_codes + 1)
        at += column.width
    return tuple(out)


def mixed_embedding(C: np.ndarray, layout: Sequence[Layout]) -> np.ndarray:
    """The embedding ``(n, embedding_width(layout))`` of a code matrix ``C`` ``(n, d)``."""
    C = np.asarray(C, dtype=float)
    if C.ndim != 2 or C.shape[1] != len(layout):
        raise ValueError(f"expected a code matrix of {len(layout)} columns, got shape {C.shape}")
    out = np.zeros((C.shape[0], embedding_width(layout)))
    rows = np.arange(C.shape[0])
    at = 0
    for j, column in enumerate(layout):
        values = C[:, j]
        missing = np.isnan(values)
        if isinstance(column, NumericLayout):
            out[:, at] = np.where(missing, 0.0, (values - column.mean) / column.scale)
            if column.indicator:
                out[:, at + 1] = missing
        else:
            # codes 0..K-1 the vocabulary, K other, K+1 unseen; missing after them
            k = column.n_codes
            cell = np.where(missing, k + 2, np.minimum(np.nan_to_num(values, nan=0.0), k + 1))
            out[rows, at + cell.astype(np.intp)] = ONE_HOT_SCALE
        at += column.width
    return out
