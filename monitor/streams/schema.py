"""A stream's feature schema: which features are numeric and which categorical (docs/tabular.md).

:meth:`FeatureSchema.fit` infers it from the calibration's raw feature values (a feature with
any string or boolean is categorical, one of numbers numeric; ``null`` is a missing value in
either) or follows a declaration (the stream configuration's ``features:``, ``vocabulary:``,
``max_categories``). It then reads every event (:meth:`FeatureSchema.read`) into a *code row*,
one float per feature:

* numeric: the number; NaN when missing;
* categorical: ``0..K-1`` the K most frequent calibration categories (ties: first appearance)
  or the pinned vocabulary in its order, ``K`` "other" (a calibration category outside them),
  ``K + 1`` "unseen" (not in the calibration's seen set: its :data:`MAX_SEEN` most frequent
  values), NaN when missing. ``true``/``false`` are categories; a number in a categorical
  feature is the category of its text (``1`` and ``1.0`` are ``"1"``).

A string or a boolean in a numeric feature is an :class:`~monitor.streams.events.InvalidEvent`
naming the feature and the value. :meth:`FeatureSchema.encode` turns code rows into the matrix
the covariate scorer, the OOD feature scorers and the density ratio read: the code matrix
itself for a *plain* schema (every feature numeric, nothing missing in the calibration: a
numeric-only stream runs bit-identically as before), else the mixed embedding of
:mod:`monitor.core.tabular`.

Data-quality indicators (:attr:`FeatureSchema.indicators`, one 0/1 value per event each): per
feature ``missing``; per categorical ``unseen`` (outside part A's seen set); per numeric
``out_of_range`` (outside part A's [min, max]). Their calibration reference
(:attr:`FeatureSchema.quality_reference`) is counted on the whole calibration for ``missing``
and on part B for the other two: A and B are a seeded split of the calibration into halves, so
that an event's indicator and the reference's are the same fixed function (set by A) of
exchangeable rows, and a test of the event's rate against the reference is exact.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from monitor.core.tabular import (
    MAX_CATEGORIES,
    MAX_SEEN,
    CategoricalLayout,
    NumericLayout,
    category_text,
    mixed_embedding,
    numeric_mask,
    unseen_columns,
)
from monitor.errors import MonitorError
from monitor.streams.events import InvalidEvent

__all__ = ["CategoricalFeature", "FeatureRow", "FeatureSchema", "NumericFeature",
           "QualityCount", "SchemaError", "category_text"]

FeatureKind = Literal["numeric", "categorical"]
Rate = Literal["missing", "unseen", "out_of_range"]

#: Version of :meth:`FeatureSchema.state_dict`.
STATE_FORMAT = 1


class SchemaError(MonitorError, ValueError):
    """Calibration values that do not fit a schema; the message names the row and the feature."""


@dataclass(frozen=True)
class NumericFeature:
    """A numeric feature: the calibration's mean and standard deviation (for the embedding),
    part A's range (``out_of_range``) and whether any calibration value was missing."""

    name: str
    mean: float = 0.0
    std: float = 1.0
    low: float = math.nan
    high: float = math.nan
    may_be_missing: bool = False
    kind: Literal["numeric"] = field(default="numeric", init=False)


@dataclass(frozen=True)
class CategoricalFeature:
    """A categorical feature: its coded ``vocabulary``, the calibration's ``seen`` values and
    part A's (``seen_a``, for ``unseen``), each at most :data:`MAX_SEEN`, most frequent first."""

    name: str
    vocabulary: tuple[str, ...]
    seen: tuple[str, ...]
    seen_a: tuple[str, ...]
    kind: Literal["categorical"] = field(default="categorical", init=False)

    def __post_init__(self) -> None:
        other = len(self.vocabulary)
        codes = dict.fromkeys(self.seen, float(other))
        codes.update((text, float(k)) for k, text in enumerate(self.vocabulary))
        object.__setattr__(self, "_codes", codes)
        object.__setattr__(self, "_seen_a", frozenset(self.seen_a))

    @property
    def other(self) -> float:
        return float(len(self.vocabulary))

    @property
    def unseen(self) -> float:
        return float(len(self.vocabulary) + 1)

    def code(self, text: str) -> float:
        return self._codes.get(text, self.unseen)  # type: ignore[attr-defined]

    def seen_in_a(self, text: str) -> bool:
        return text in self._seen_a  # type: ignore[attr-defined]


Feature = NumericFeature | CategoricalFeature


@dataclass(frozen=True)
class QualityCount:
    """The calibration reference of one data-quality indicator: ``ones`` of ``n`` rows."""

    feature: str
    rate: Rate
    n: int
    ones: int


@dataclass(frozen=True)
class FeatureRow:
    """One event's features as the schema reads them.

    ``codes``: the code row; ``quality``: the 0/1 indicators in the order of
    :attr:`FeatureSchema.indicators`; ``unknown``: keys the schema does not have (object form:
    a schema change, not an error); ``absent``: the schema's features the event left out.
    """

    codes: list[float]
    quality: tuple[bool, ...]
    unknown: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


_ABSENT = object()


class FeatureSchema:
    """The features of a stream: their kinds, codes and calibration statistics.

    Build one with :meth:`fit` (or :meth:`from_state`).

    Examples
    --------
    >>> rows = [[float(i), "DE" if i % 3 else "FR"] for i in range(20)]
    >>> schema = FeatureSchema.fit(rows, ("amount", "country"))
    >>> schema.kinds, schema.is_plain
    (('numeric', 'categorical'), False)
    >>> row = schema.read({"amount": 5, "country": "IT", "device": "ios"})
    >>> row.codes, row.unknown
    ([5.0, 3.0], ('device',))
    >>> schema.encode(schema.codes(rows)).shape   # amount; DE, FR, other, unseen, missing
    (20, 6)
    """

    def __init__(self, features: Sequence[Feature], names: tuple[str, ...] | None,
                 reference: Sequence[QualityCount], max_categories: int = MAX_CATEGORIES) -> None:
        self.features = tuple(features)
        self.names = names
        self.max_categories = max_categories
        self.quality_reference = tuple(reference)
        self._index = {f.name: j for j, f in enumerate(self.features)}
        self._layout = tuple(
            NumericLayout(f.mean, f.std, f.may_be_missing) if isinstance(f, NumericFeature)
            else CategoricalLayout(len(f.vocabulary)) for f in self.features)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        rows: Sequence[Sequence[Any]],
        names: tuple[str, ...] | None,
        *,
        kinds: Mapping[str, FeatureKind] | None = None,
        vocabulary: Mapping[str, Sequence[str | bool | float]] | None = None,
        max_categories: int = MAX_CATEGORIES,
        seed: int = 0,
    ) -> FeatureSchema:
        """The schema of calibration ``rows`` (raw values, one list per row in the order of
        ``names``; ``None`` for missing); ``names`` None for list-form features.

        ``kinds`` declares features' kinds (the others are inferred), ``vocabulary`` pins a
        categorical feature's coded categories; ``seed`` draws the A/B split.

        Raises
        ------
        SchemaError
            Naming the row and the feature: a string or boolean in a declared-numeric feature,
            a feature missing in every row with no declared kind, a declaration of a feature
            the calibration does not have.
        """
        labels = names if names is not None else tuple(str(k) for k in range(len(rows[0])))
        kinds, vocabulary = dict(kinds or {}), dict(vocabulary or {})
        unknown = sorted(set(kinds) - set(labels)) + sorted(set(vocabulary) - set(labels))
        if unknown:
            raise SchemaError(f"feature {unknown[0]!r} is declared, but the calibration's "
                              f"features are {list(labels)}")
        part_a = _part_a(len(rows), seed)
        features: list[Feature] = []
        reference: list[QualityCount] = []
        for j, name in enumerate(labels):
            values = [row[j] for row in rows]
            kind = kinds.get(name) or _inferred_kind(name, values, name in vocabulary)
            if kind == "numeric":
                feature: Feature = _numeric(name, values, part_a)
            else:
                feature = _categorical(name, values, part_a, vocabulary.get(name),
                                       max_categories)
            features.append(feature)
            reference += _reference(feature, values, part_a)
        return cls(features, names, reference, max_categories)

    # -- properties -----------------------------------------------------------------------------

    @property
    def kinds(self) -> tuple[FeatureKind, ...]:
        return tuple(f.kind for f in self.features)

    @property
    def labels(self) -> tuple[str, ...]:
        """The features' names (their positions ``"0"``, ``"1"``... for list-form features)."""
        return tuple(f.name for f in self.features)

    @property
    def is_plain(self) -> bool:
        """Every feature numeric and never missing in the calibration: the code row is the
        feature row and :meth:`encode` the identity."""
        return all(isinstance(f, NumericFeature) and not f.may_be_missing for f in self.features)

    @property
    def indicators(self) -> tuple[tuple[str, Rate], ...]:
        """The data-quality indicators, (feature, rate), in the order of ``FeatureRow.quality``."""
        return tuple((q.feature, q.rate) for q in self.quality_reference)

    @property
    def width(self) -> int:
        """Columns of :meth:`encode`'s matrix."""
        return len(self.features) if self.is_plain else int(self.numeric_columns.size)

    @property
    def numeric_columns(self) -> np.ndarray:
        """Which columns of :meth:`encode`'s matrix are numbers (the density ratio's
        normal-scores transform applies to those only)."""
        if self.is_plain:
            return np.ones(len(self.features), dtype=bool)
        return numeric_mask(self._layout)

    @property
    def unseen_columns(self) -> tuple[int, ...]:
        """The columns of :meth:`encode`'s matrix that mark a category the calibration never
        had (0 on every calibration row); none for a plain schema."""
        return () if self.is_plain else unseen_columns(self._layout)

    @property
    def encoded_features(self) -> tuple[str, ...]:
        """The original feature of each column of :meth:`encode`'s matrix (for attribution)."""
        if self.is_plain:
            return self.labels
        return tuple(f.name for f, c in zip(self.features, self._layout, strict=True)
                     for _ in range(c.width))

    # -- reading --------------------------------------------------------------------------------

    def read(self, features: Sequence[Any] | Mapping[str, Any]) -> FeatureRow:
        """One event's raw features (a list by position, or an object by name, an absent name
        being a missing value) as a :class:`FeatureRow`.

        Raises
        ------
        InvalidEvent
            A list of another length, or a string or boolean in a numeric feature (naming it).
        """
        unknown: tuple[str, ...] = ()
        absent: tuple[str, ...] = ()
        if isinstance(features, Mapping) and self.names is not None:
            values = [features.get(name, _ABSENT) for name in self.names]
            if len(features) != len(self.names) or _ABSENT in values:
                unknown = tuple(k for k in features if k not in self._index)
                absent = tuple(n for n, v in zip(self.names, values, strict=True)
                               if v is _ABSENT)
        else:
            values = list(features.values() if isinstance(features, Mapping) else features)
            if len(values) != len(self.features):
                raise InvalidEvent(f"wrong feature dimension: got {len(values)}, the stream "
                                   f"expects {len(self.features)}")
        codes: list[float] = []
        quality: list[bool] = []
        for feature, value in zip(self.features, values, strict=True):
            missing = value is None or value is _ABSENT
            code = math.nan if missing else self._code(feature, value)
            codes.append(code)
            quality.append(missing)
            if isinstance(feature, NumericFeature):
                quality.append(not missing and not feature.low <= code <= feature.high)
            else:
                quality.append(not missing and not feature.seen_in_a(category_text(value)))
        return FeatureRow(codes, tuple(quality), unknown, absent)

    def numeric_quality(self, C: np.ndarray) -> np.ndarray:
        """The (n, 2d) data-quality indicators of a code matrix of a schema whose features are
        all numeric (as :meth:`read` gives them, per feature ``missing`` then
        ``out_of_range``), vectorised: the batch path's events of a numeric stream."""
        if not all(isinstance(f, NumericFeature) for f in self.features):
            raise ValueError("numeric_quality needs a schema of numeric features only")
        C = np.asarray(C, dtype=float).reshape(-1, len(self.features))
        low = np.array([f.low for f in self.features])  # type: ignore[union-attr]
        high = np.array([f.high for f in self.features])  # type: ignore[union-attr]
        missing = np.isnan(C)
        outside = _out_of_range(C, low, high)
        out = np.empty((C.shape[0], 2 * len(self.features)), dtype=bool)
        out[:, 0::2], out[:, 1::2] = missing, outside
        return out

    def codes(self, rows: Sequence[Sequence[Any]]) -> np.ndarray:
        """The code matrix of raw rows in the schema's order (``None`` for missing).

        Raises
        ------
        SchemaError
            ``calibration row i: feature 'name': ...`` for a value a feature cannot hold.
        """
        out = np.empty((len(rows), len(self.features)))
        for i, row in enumerate(rows):
            for j, (feature, value) in enumerate(zip(self.features, row, strict=True)):
                try:
                    out[i, j] = math.nan if value is None else self._code(feature, value)
                except InvalidEvent:
                    raise SchemaError(f"calibration row {i}: feature {feature.name!r}: "
                                      f"{_text(value)} is not a number (the feature is "
                                      "numeric)") from None
        return out

    def encode(self, C: np.ndarray) -> np.ndarray:
        """The matrix the covariate scorer, OOD feature scorers and density ratio read, of a
        code matrix ``C`` ``(n, d)``: ``C`` itself for a plain schema (a missing value, which
        its calibration never had, takes the calibration mean), else the mixed embedding
        (:mod:`monitor.core.tabular`)."""
        if not self.is_plain:
            return mixed_embedding(C, self._layout)
        missing = np.isnan(C)
        if not missing.any():
            return C
        means = np.array([f.mean for f in self.features if isinstance(f, NumericFeature)])
        return np.where(missing, means, C)

    def _code(self, feature: Feature, value: Any) -> float:
        if isinstance(feature, CategoricalFeature):
            return feature.code(category_text(value))
        if isinstance(value, bool | str):
            raise InvalidEvent(f"field 'features.{feature.name}': {_text(value)} is not a "
                               f"number (feature {feature.name!r} is numeric)")
        return float(value)

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The schema as JSON-ready values (stored with the stream's configuration version)."""
        return {
            "format": STATE_FORMAT,
            "names": None if self.names is None else list(self.names),
            "max_categories": self.max_categories,
            "features": [_feature_state(f) for f in self.features],
            "reference": [[q.feature, q.rate, q.n, q.ones] for q in self.quality_reference],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FeatureSchema:
        """The schema :meth:`state_dict` described."""
        if state.get("format") != STATE_FORMAT:
            raise SchemaError(f"unknown feature schema format {state.get('format')!r}")
        names = None if state["names"] is None else tuple(state["names"])
        features = [_feature_from_state(f) for f in state["features"]]
        reference = [QualityCount(f, r, n, ones) for f, r, n, ones in state["reference"]]
        return cls(features, names, reference, state["max_categories"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureSchema) and (
            json.dumps(self.state_dict()) == json.dumps(other.state_dict()))

    def __hash__(self) -> int:
        return hash(json.dumps(self.state_dict()))

    def __repr__(self) -> str:
        kinds = ", ".join(f"{f.name}: {f.kind}" for f in self.features)
        return f"FeatureSchema({kinds})"


# -- fitting ---------------------------------------------------------------------------------------


def _part_a(n: int, seed: int) -> np.ndarray:
    """Part A of the seeded split of ``n`` calibration rows (a boolean mask, ⌊n/2⌋ rows)."""
    mask = np.zeros(n, dtype=bool)
    mask[np.random.default_rng(seed).permutation(n)[: n // 2]] = True
    return mask


def _inferred_kind(name: str, values: Sequence[Any], pinned: bool) -> FeatureKind:
    if pinned or any(isinstance(v, str | bool | np.bool_) for v in values):
        return "categorical"
    if all(v is None for v in values):
        raise SchemaError(f"feature {name!r} is missing in every calibration row: declare its "
                          f"kind (features: {{{name}: numeric}} or categorical)")
    return "numeric"


def _numeric(name: str, values: Sequence[Any], part_a: np.ndarray) -> NumericFeature:
    x = np.full(len(values), math.nan)
    for i, v in enumerate(values):
        if isinstance(v, str | bool | np.bool_):
            raise SchemaError(f"calibration row {i}: feature {name!r}: {_text(v)} is not a "
                              "number (the feature is declared numeric)")
        if v is not None:
            x[i] = float(v)
    present = ~np.isnan(x)
    if not present.any():
        return NumericFeature(name, may_be_missing=True)
    std = float(np.std(x[present]))
    in_a = x[present & part_a]
    low, high = (float(in_a.min()), float(in_a.max())) if in_a.size else (math.nan, math.nan)
    return NumericFeature(name, float(np.mean(x[present])), std if std > 0 else 1.0, low, high,
                          bool((~present).any()))


def _categorical(name: str, values: Sequence[Any], part_a: np.ndarray,
                 pinned: Sequence[Any] | None, max_categories: int) -> CategoricalFeature:
    texts = [None if v is None else category_text(v) for v in values]
    ranked = _most_frequent(t for t in texts if t is not None)
    ranked_a = _most_frequent(t for t, a in zip(texts, part_a, strict=True)
                              if a and t is not None)
    if pinned is None:
        vocabulary = tuple(ranked[:max_categories])
    else:
        vocabulary = tuple(dict.fromkeys(category_text(v) for v in pinned))
    seen = tuple(dict.fromkeys([*vocabulary, *ranked]))[:max(MAX_SEEN, len(vocabulary))]
    return CategoricalFeature(name, vocabulary, seen, tuple(ranked_a[:MAX_SEEN]))


def _most_frequent(texts: Any) -> list[str]:
    """Distinct values, most frequent first, ties in order of first appearance."""
    counts = Counter(texts)  # insertion-ordered; sorted() is stable
    return [t for t, _ in sorted(counts.items(), key=lambda item: -item[1])]


def _out_of_range(x: np.ndarray, low: Any, high: Any) -> np.ndarray:
    """``out_of_range``: present (not NaN) and outside [low, high] (part A's range)."""
    with np.errstate(invalid="ignore"):
        return ~np.isnan(x) & ~((low <= x) & (x <= high))


def _reference(feature: Feature, values: Sequence[Any], part_a: np.ndarray) -> list[QualityCount]:
    """The calibration counts of ``feature``'s indicators: missing over every row, the other
    over part B (their sets are part A's)."""
    missing = np.array([v is None for v in values])
    part_b = ~part_a
    if isinstance(feature, NumericFeature):
        x = np.array([math.nan if v is None else float(v) for v in values])
        other = _out_of_range(x, feature.low, feature.high)
        rate: Rate = "out_of_range"
    else:
        other = np.array([v is not None and not feature.seen_in_a(category_text(v))
                          for v in values], dtype=bool)
        rate = "unseen"
    return [QualityCount(feature.name, "missing", len(values), int(missing.sum())),
            QualityCount(feature.name, rate, int(part_b.sum()), int((other & part_b).sum()))]


# -- state -----------------------------------------------------------------------------------------


def _feature_state(feature: Feature) -> dict[str, Any]:
    if isinstance(feature, CategoricalFeature):
        return {"kind": "categorical", "name": feature.name,
                "vocabulary": list(feature.vocabulary), "seen": list(feature.seen),
                "seen_a": list(feature.seen_a)}
    return {"kind": "numeric", "name": feature.name, "mean": feature.mean, "std": feature.std,
            "low": _finite_or_none(feature.low), "high": _finite_or_none(feature.high),
            "may_be_missing": feature.may_be_missing}


def _feature_from_state(state: Mapping[str, Any]) -> Feature:
    if state["kind"] == "categorical":
        return CategoricalFeature(state["name"], tuple(state["vocabulary"]),
                                  tuple(state["seen"]), tuple(state["seen_a"]))
    return NumericFeature(state["name"], state["mean"], state["std"],
                          _nan_if_none(state["low"]), _nan_if_none(state["high"]),
                          state["may_be_missing"])


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _text(value: Any) -> str:
    """A raw value as it was on the wire."""
    return json.dumps(value.item() if isinstance(value, np.generic) else value)
