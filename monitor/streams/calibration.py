"""Calibration data of a stream: labeled prediction events from the model's validation data.

Its features may be numbers, strings, booleans or missing (docs/tabular.md): the calibration
fits the stream's :class:`~monitor.streams.schema.FeatureSchema` (inferred, or following the
configuration's declaration) and holds the code matrix the schema reads them into, with the raw
values kept for :meth:`Calibration.to_rows`. Classification labels are class indexes (the
position of the class in the prediction's probability vector); a class name is refused with a
message that says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import MonitorError
from monitor.streams.events import InvalidEvent, PredictionEvent, decode_event
from monitor.streams.schema import FeatureSchema, SchemaError


class CalibrationError(MonitorError, ValueError):
    """Calibration data that cannot be used; the message says which line and why."""


@dataclass(frozen=True)
class Calibration:
    """Arrays of a stream's calibration events (all rows labeled).

    ``features`` is the code matrix ``(n, d)`` of the feature ``schema`` (for numeric features
    without missing values, the features themselves: a *plain* schema); ``raw_features`` the
    raw values of a schema that is not plain (rows in the schema's order, ``None`` missing).
    ``predictions`` is ``(n,)`` for regression and ``(n, C)`` for classification; ``logits`` and
    ``embedding`` are present only when every calibration event carries them, and so is
    ``scales`` (the model's predicted scale of its error, ``(n,)``: the ``normalized_residual``
    score needs it on every row). Built from arrays, the schema is the one of the feature
    matrix (NaN: missing).
    """

    features: np.ndarray
    predictions: np.ndarray
    labels: np.ndarray
    feature_names: tuple[str, ...] | None = None
    logits: np.ndarray | None = None
    embedding: np.ndarray | None = None
    scales: np.ndarray | None = None
    schema: FeatureSchema = None  # type: ignore[assignment]  # set by __post_init__
    raw_features: tuple[tuple[Any, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.schema is None:
            rows = np.asarray(self.features, dtype=float).tolist()
            object.__setattr__(self, "schema", _fit(rows, self.feature_names, {}))

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_classes(self) -> int | None:
        return int(self.predictions.shape[1]) if self.predictions.ndim == 2 else None

    @property
    def encoded(self) -> np.ndarray:
        """The matrix the covariate scorer, the OOD feature scorers and the density ratio read
        (:meth:`FeatureSchema.encode`): ``features`` itself for a plain schema."""
        return self.schema.encode(self.features)

    def inputs(self) -> dict[str, np.ndarray]:
        """Arrays by OOD input kind (``features``: the schema's embedding of the code matrix,
        the features themselves for a plain schema; ``logits``, ``embedding``)."""
        out = {"features": self.encoded}
        if self.logits is not None:
            out["logits"] = self.logits
        if self.embedding is not None:
            out["embedding"] = self.embedding
        return out

    @classmethod
    def from_events(
        cls,
        events: Sequence[PredictionEvent],
        feature_names: Sequence[str] | None = None,
        **schema_options: Any,
    ) -> Calibration:
        """From prediction events. Object features are ordered by ``feature_names`` where given
        (a stored stream's order: a JSON object read back from PostgreSQL's JSONB has its keys
        in JSONB's own order, not the order they were written in), else by the events' keys in
        the order they were first written (a file's or a Python dict's order); a key absent
        from an event is a missing value. ``schema_options`` (``kinds``, ``vocabulary``,
        ``max_categories``, ``seed``: :meth:`StreamConfig.schema_options`) go to
        :meth:`FeatureSchema.fit`."""
        if len(events) < 20:
            raise CalibrationError(
                f"calibration needs at least 20 labeled events, got {len(events)}"
            )
        unlabeled = [e.id for e in events if e.label is None]
        if unlabeled:
            raise CalibrationError(
                f"calibration events must carry a label; {unlabeled[0]!r} has none"
            )
        names = _feature_order([e.features for e in events], feature_names)
        features, schema, raw = _coded(_raw_rows(events, names), names, schema_options)
        try:
            predictions = np.asarray([e.prediction for e in events], dtype=float)
        except ValueError as exc:
            raise CalibrationError(f"calibration events disagree in shape: {exc}") from None
        labels = np.asarray([e.label for e in events])
        return cls(
            features=features,
            predictions=predictions,
            labels=labels,
            feature_names=names,
            schema=schema,
            raw_features=raw,
            logits=_optional(events, "logits"),
            embedding=_optional(events, "embedding"),
            scales=_optional(events, "scale"),
        )

    @classmethod
    def from_values(
        cls,
        rows: Sequence[Sequence[Any]],
        predictions: np.ndarray,
        labels: np.ndarray,
        feature_names: tuple[str, ...] | None = None,
        **schema_options: Any,
    ) -> Calibration:
        """From raw feature values (rows in the order of ``feature_names``, ``None`` missing:
        what the wire format decodes to) and arrays; ``schema_options`` as in
        :meth:`from_events`."""
        features, schema, raw = _coded(rows, feature_names, schema_options)
        return cls(features, predictions, labels, feature_names, schema=schema, raw_features=raw)

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[dict[str, Any] | bytes | str],
        feature_names: Sequence[str] | None = None,
        **schema_options: Any,
    ) -> Calibration:
        """From wire-format events (``kind`` defaults to ``prediction``); ``feature_names`` and
        ``schema_options`` as in :meth:`from_events`."""
        events = []
        for i, row in enumerate(rows):
            if isinstance(row, dict):
                row = {"kind": "prediction", "stream": "calibration", "id": str(i), **row}
            try:
                event = decode_event(row, max_bytes=1 << 30)
            except InvalidEvent as exc:
                raise CalibrationError(f"calibration row {i}: {_by_feature(exc)}") from None
            if not isinstance(event, PredictionEvent):
                raise CalibrationError(f"calibration row {i} is not a prediction event")
            events.append(event)
        return cls.from_events(events, feature_names, **schema_options)

    @classmethod
    def from_jsonl(cls, path: str | Path, **schema_options: Any) -> Calibration:
        try:
            with open(path, "rb") as fh:
                lines = [line for line in fh if line.strip()]
        except OSError as exc:
            raise CalibrationError(f"cannot read calibration file {path}: {exc.strerror}") from None
        return cls.from_rows(lines, **schema_options)

    def to_rows(self) -> list[dict[str, Any]]:
        """Wire-format rows (for storing the calibration with the stream)."""
        rows = []
        for i in range(len(self)):
            values = (self.features[i].tolist() if self.raw_features is None
                      else list(self.raw_features[i]))
            row: dict[str, Any] = {
                "features": _features(values, self.feature_names),
                "prediction": _plain(self.predictions[i]),
                "label": _plain(self.labels[i]),
            }
            if self.logits is not None:
                row["logits"] = self.logits[i].tolist()
            if self.embedding is not None:
                row["embedding"] = self.embedding[i].tolist()
            if self.scales is not None:
                row["scale"] = float(self.scales[i])
            rows.append(row)
        return rows


def _fit(rows: Sequence[Sequence[Any]], names: tuple[str, ...] | None,
         options: Mapping[str, Any]) -> FeatureSchema:
    try:
        return FeatureSchema.fit(rows, names, **options)
    except SchemaError as exc:
        raise CalibrationError(str(exc)) from None


def _coded(
    rows: Sequence[Sequence[Any]], names: tuple[str, ...] | None, options: Mapping[str, Any]
) -> tuple[np.ndarray, FeatureSchema, tuple[tuple[Any, ...], ...] | None]:
    """The code matrix of raw rows, their schema and the raw values to keep (none when the
    schema is plain: the code matrix is the features then)."""
    schema = _fit(rows, names, options)
    if schema.is_plain:
        return np.asarray(rows, dtype=float), schema, None
    try:
        return schema.codes(rows), schema, tuple(tuple(r) for r in rows)
    except SchemaError as exc:
        raise CalibrationError(str(exc)) from None


#: A decoding error of one feature, as the event decoder words it.
_FEATURE_FIELD = re.compile(r"^field 'features\.(?P<name>[^']*)': ")


def _by_feature(exc: InvalidEvent) -> str:
    """``field 'features.x': ...`` as ``feature 'x': ...`` (a calibration file's columns)."""
    return _FEATURE_FIELD.sub(lambda m: f"feature {m['name']!r}: ", str(exc))


def _feature_order(
    features: Sequence[list[Any] | dict[str, Any]], given: Sequence[str] | None
) -> tuple[str, ...] | None:
    """The features' names in the stream's order: ``given``, checked against the rows' keys,
    else every key in the order first written; ``None`` for list features."""
    if not all(isinstance(f, dict) for f in features):
        if any(isinstance(f, dict) for f in features):
            i = next(i for i, f in enumerate(features) if isinstance(f, dict)
                     != isinstance(features[0], dict))
            raise CalibrationError(f"calibration row {i}: features are "
                                   f"{_form(features[i])}, row 0's are {_form(features[0])}")
        if given is not None:
            raise CalibrationError(
                "calibration features are lists, but a feature order was given"
            )
        return None
    keys = tuple(dict.fromkeys(k for f in features for k in f))
    if given is None:
        return keys
    names = tuple(str(name) for name in given)
    if len(set(names)) != len(names) or set(names) != set(keys):
        raise CalibrationError(
            f"the stored feature order {list(names)} does not name the calibration's "
            f"features {sorted(keys)}"
        )
    return names


def _form(features: Any) -> str:
    return "an object" if isinstance(features, dict) else "a list"


def _raw_rows(events: Sequence[PredictionEvent], names: tuple[str, ...] | None) -> list[list[Any]]:
    """The raw feature values of each event in the schema's order (``None``: missing)."""
    if names is not None:
        return [[e.features.get(n) for n in names] for e in events]  # type: ignore[union-attr]
    width = len(events[0].features)
    for i, event in enumerate(events):
        if len(event.features) != width:
            raise CalibrationError(f"calibration row {i}: {len(event.features)} features, "
                                   f"row 0 has {width}")
    return [list(e.features) for e in events]


def _optional(events: Sequence[PredictionEvent], name: str) -> np.ndarray | None:
    values = [getattr(e, name) for e in events]
    if any(v is None for v in values):
        return None
    try:
        return np.asarray(values, dtype=float)
    except ValueError:
        raise CalibrationError(f"calibration '{name}' vectors differ in length") from None


def _features(values: list[Any], names: tuple[str, ...] | None) -> list[Any] | dict[str, Any]:
    if names is None:
        return values
    return dict(zip(names, values, strict=True))


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value
