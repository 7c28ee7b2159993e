"""The notebook API's input tables (:mod:`monitor.notebook`): calibration sets and batches given
as arrays, dict rows or pandas DataFrames, read into the values the wire format carries.

A feature cell is a number, a string, a boolean or missing (``None``, NaN, ``pd.NA``, ``NaT``);
pandas ``object``, ``category``, ``bool``, ``string`` and nullable (``Int64``, ``boolean``...)
columns all give such cells. When every cell is a finite number the features stay a float
matrix, read exactly as before (numeric notebooks run unchanged); otherwise they are rows of raw
values (``None`` missing), which the stream's :class:`~monitor.streams.schema.FeatureSchema`
reads into the same code rows as the same values on the wire. Errors name the row and the
column.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from numbers import Integral, Real
from typing import Any

import numpy as np

from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.events import MAX_MAGNITUDE, InvalidEvent, epoch_time
from monitor.streams.schema import FeatureSchema

_MIN_CALIBRATION = 20

#: Event times of a batch: one for every event or one per event; datetimes or epoch numbers.
Times = datetime | float | Sequence[datetime | float] | None

#: A table's features: a float matrix (every cell a finite number) or rows of raw values.
Features = np.ndarray | list[list[Any]]


class Batch:
    """A validated batch: plain Python values, ready to become events."""

    def __init__(self, ids: list[str], features: list[Any], predictions: list[Any],
                 labels: list[Any]) -> None:
        self.ids, self.features, self.predictions, self.labels = ids, features, predictions, labels


class Columns:
    """Where the calibration's columns are, to read later batches the same way."""

    def __init__(self, names: tuple[str, ...] | None, prediction: str, label: str,
                 n_features: int, n_classes: int | None) -> None:
        self.names, self.prediction, self.label = names, prediction, label
        self.n_features, self.n_classes = n_features, n_classes

    def to_json(self) -> dict[str, Any]:
        return {"names": None if self.names is None else list(self.names),
                "prediction": self.prediction, "label": self.label,
                "n_features": self.n_features, "n_classes": self.n_classes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Columns:
        names = None if data["names"] is None else tuple(data["names"])
        return cls(names, data["prediction"], data["label"], data["n_features"],
                   data["n_classes"])

    def batch(self, data: Any, predictions: Any, labels: Any, ids: Sequence[str | int] | None,
              first: int, schema: FeatureSchema) -> Batch:
        if is_table(data):
            if predictions is not None or labels is not None:
                raise ValueError("give predictions and labels as columns of the rows/DataFrame, "
                                 "not as separate arguments")
            table = Table.of(data, self.prediction, self.label, self.names, labels_optional=True)
            X, predictions, labels = table.X, table.predictions, table.labels
            ids = ids if ids is not None else table.ids
        else:
            X = read_features(data, self.names)
            if predictions is None:
                raise ValueError("predictions are required with a features array")
        n, width = _shape(X)
        if width != self.n_features:
            raise ValueError(f"features have {width} columns, the calibration has "
                             f"{self.n_features}")
        if isinstance(X, np.ndarray):
            rows: list[Any] = X.tolist()
        else:
            _check_rows(X, schema)
            # as the wire decodes them: a list holds numbers only, other values are a tuple
            rows = [tuple(r) for r in X]
        P = _predictions(predictions, n, self.n_classes)
        y = [None] * n if labels is None else _labels(labels, n, self.n_classes)
        names = [str(first + k) for k in range(n)] if ids is None else [str(i) for i in ids]
        if len(names) != n:
            raise ValueError(f"got {len(names)} ids for {n} rows")
        return Batch(names, rows, P, y)


class Table:
    """Features, predictions and labels read from arrays, dict rows or a DataFrame."""

    def __init__(self, X: Features, predictions: Any, labels: Any, columns: Columns,
                 ids: list[str] | None = None) -> None:
        self.X, self.predictions, self.labels, self.columns, self.ids = (
            X, predictions, labels, columns, ids)

    @classmethod
    def of(cls, data: Any, prediction: str, label: str, features: Sequence[str] | None,
           labels_optional: bool = False) -> Table:
        if isinstance(data, Calibration):
            X = data.features if data.raw_features is None else [list(r) for r in
                                                                   data.raw_features]
            return cls._arrays(X, data.predictions, data.labels, prediction, label,
                               data.feature_names)
        if isinstance(data, tuple):
            if len(data) != 3:
                raise ValueError("calibration arrays are (features, predictions, labels), got "
                                 f"{len(data)} items")
            return cls._arrays(*data, prediction, label, None)
        if is_dataframe(data):
            return cls._rows(data.to_dict("records"), prediction, label, features,
                             labels_optional)
        if isinstance(data, Sequence) and data and all(isinstance(r, Mapping) for r in data):
            return cls._rows(data, prediction, label, features, labels_optional)
        raise ValueError(
            "expected (features, predictions, labels) arrays, a list of dict rows or a pandas "
            f"DataFrame, got {type(data).__name__}"
        )

    @classmethod
    def _arrays(cls, X: Any, predictions: Any, labels: Any, prediction: str, label: str,
                names: tuple[str, ...] | None) -> Table:
        X = read_features(X, names)
        columns = Columns(names, prediction, label, _shape(X)[1], _n_classes(predictions))
        return cls(X, predictions, labels, columns)

    @classmethod
    def _rows(cls, rows: Sequence[Mapping[str, Any]], prediction: str, label: str,
              features: Sequence[str] | None, labels_optional: bool) -> Table:
        if not rows:
            raise ValueError("no rows")
        wire = "features" in rows[0] and (features is None or "features" not in features)
        if wire:
            names = _wire_names(rows[0]["features"]) if features is None else tuple(features)
            cells = [_wire_features(r.get("features"), names, i) for i, r in enumerate(rows)]
        else:
            names = tuple(features) if features is not None else tuple(
                c for c in rows[0] if c not in (prediction, label, "id", "ts"))
            cells = [[_cell(r, c, i) for c in names] for i, r in enumerate(rows)]
        X = read_features(cells, names)
        preds = [_cell(r, prediction, i) for i, r in enumerate(rows)]
        if labels_optional:
            labels: list[Any] = [r.get(label) for r in rows]
        else:
            labels = [_cell(r, label, i) for i, r in enumerate(rows)]
        ids = [str(r["id"]) for r in rows] if all("id" in r for r in rows) else None
        columns = Columns(names, prediction, label, _shape(X)[1], _n_classes(preds))
        return cls(X, preds, labels, columns, ids)

    def calibration(self, schema_options: Mapping[str, Any]) -> Calibration:
        """The calibration of this table, its features coded by the schema ``schema_options``
        (``StreamConfig.schema_options``) describe."""
        n = _shape(self.X)[0]
        if n < _MIN_CALIBRATION:
            raise ValueError(f"calibration needs at least {_MIN_CALIBRATION} rows, got {n}")
        n_classes = self.columns.n_classes
        P = np.array(_predictions(self.predictions, n, n_classes), dtype=float)
        y = _labels(self.labels, n, n_classes)
        if any(v is None for v in y):
            raise ValueError("every calibration row needs a label (found NaN or None)")
        labels = np.array(y, dtype=np.int64 if n_classes else float)
        if isinstance(self.X, np.ndarray) and not any(schema_options.get(k) for k in
                                                      ("kinds", "vocabulary")):
            return Calibration(self.X, P, labels, self.columns.names)  # numeric, as before
        rows = self.X.tolist() if isinstance(self.X, np.ndarray) else self.X
        try:
            return Calibration.from_values(rows, P, labels, self.columns.names, **schema_options)
        except CalibrationError as exc:
            raise ValueError(str(exc)) from None


def is_dataframe(data: Any) -> bool:
    # Without importing pandas: it is optional and slow to import.
    return type(data).__name__ == "DataFrame" and hasattr(data, "to_dict")


def is_table(data: Any) -> bool:
    return is_dataframe(data) or (
        isinstance(data, Sequence) and not isinstance(data, str | bytes) and bool(data)
        and all(isinstance(r, Mapping) for r in data))


# -- feature cells ------------------------------------------------------------------------------


def read_features(values: Any, names: Sequence[str] | None) -> Features:
    """A float matrix when every cell is a finite number (the numeric path), else rows of raw
    values (``None`` missing). Raises :class:`ValueError` naming the row and the column."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        X = np.asarray(values, dtype=float)
        _check_shape(X)
        if np.isfinite(X).all() and (np.abs(X) <= MAX_MAGNITUDE).all():
            return X
        values = X.tolist()  # NaN: missing; inf: an error naming its cell, below
    cells = [[_wire_value(v, i, _column(names, j)) for j, v in enumerate(row)]
             for i, row in enumerate(_table_rows(values))]
    if all(type(v) is float for row in cells for v in row):
        return np.asarray(cells, dtype=float)
    return cells


def _table_rows(values: Any) -> list[list[Any]]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ValueError("features must be numbers or other values in a 2-D table, got "
                         f"{type(values).__name__}")
    if isinstance(values, np.ndarray):
        _check_shape(values)
    rows = list(values)
    if not rows or any(isinstance(r, str | bytes) or not isinstance(r, Iterable) for r in rows):
        raise ValueError(f"features must be a non-empty 2-D array (rows × columns), got shape "
                         f"{np.shape(rows)}")
    out = [list(r) for r in rows]
    for i, row in enumerate(out):
        if len(row) != len(out[0]) or not row:
            raise ValueError(f"features: row {i} has {len(row)} values, row 0 has "
                             f"{len(out[0])}")
    return out


def _wire_value(value: Any, row: int, column: str) -> Any:
    """A cell as the wire format carries it: a float, a string, a boolean or None."""
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, Real):
        number = float(value)
        if math.isnan(number):
            return None
        if not math.isfinite(number) or abs(number) > MAX_MAGNITUDE:
            raise ValueError(f"features: row {row}, column {column}: {number!r} is not a finite "
                             f"number of magnitude <= {MAX_MAGNITUDE:g}")
        return number
    if isinstance(value, str):
        return str(value)
    raise ValueError(f"features: row {row}, column {column}: a {type(value).__name__} is not a "
                     "feature value (give a number, a string, a boolean or None)")


def _column(names: Sequence[str] | None, j: int) -> str:
    return repr(names[j]) if names is not None and j < len(names) else str(j)


def _check_rows(rows: list[list[Any]], schema: FeatureSchema) -> None:
    """Raw batch rows the stream can take (before any change), naming row and column."""
    for i, row in enumerate(rows):
        try:
            schema.read(row)
        except InvalidEvent as exc:
            raise ValueError(f"features: row {i}: {exc}") from None


def _check_shape(X: np.ndarray) -> None:
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"features must be a non-empty 2-D array (rows × columns), got shape "
                         f"{X.shape}")


def _shape(X: Features) -> tuple[int, int]:
    if isinstance(X, np.ndarray):
        return int(X.shape[0]), int(X.shape[1])
    return len(X), len(X[0])


# -- predictions, labels, columns --------------------------------------------------------------


def _check_finite(values: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(values) | (np.abs(values) > MAX_MAGNITUDE)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(f"{what} must be finite numbers of magnitude <= {MAX_MAGNITUDE:g}; "
                         f"row {row} is not")


def _n_classes(predictions: Any) -> int | None:
    first = np.asarray(predictions[0] if len(predictions) else [], dtype=float)
    return None if first.ndim == 0 else int(first.shape[0])


def _predictions(values: Any, n: int, n_classes: int | None) -> list[Any]:
    try:
        P = np.array([np.asarray(v, dtype=float) for v in values])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"predictions must be numbers or probability vectors: {exc}") from None
    expected = (n,) if n_classes is None else (n, n_classes)
    if P.shape != expected:
        kind = "numbers" if n_classes is None else f"probability vectors of length {n_classes}"
        raise ValueError(f"predictions must be {n} {kind}, got shape {P.shape}")
    _check_finite(P, "predictions")
    if n_classes is not None and ((P < 0).any() or (np.abs(P.sum(axis=1) - 1) > 1e-3).any()):
        raise ValueError("predicted probabilities must be >= 0 and sum to 1 in each row")
    return [float(v) for v in P] if n_classes is None else [row.tolist() for row in P]


def _labels(values: Any, n: int, n_classes: int | None) -> list[Any]:
    values = list(values)
    if len(values) != n:
        raise ValueError(f"got {len(values)} labels for {n} rows")
    return [label_value(v, n_classes) for v in values]


def label_value(value: Any, n_classes: int | None) -> int | float | None:
    """A label as the stream wants it; None when unknown (None or NaN)."""
    if value is None or (isinstance(value, float | np.floating) and math.isnan(value)):
        return None
    if isinstance(value, str):
        raise ValueError(f"label {value!r} is a class name; a classification label is the "
                         "class's index (its position in the prediction's probabilities), a "
                         "regression label a number")
    if isinstance(value, bool | bytes):
        raise ValueError(f"labels must be numbers, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or abs(number) > MAX_MAGNITUDE:
        raise ValueError(f"labels must be finite numbers, got {value!r}")
    if n_classes is None:
        return number
    if number != int(number) or not 0 <= number < n_classes:
        raise ValueError(f"classification labels must be class indexes in [0, {n_classes}), "
                         f"got {value!r}")
    return int(number)


def _cell(row: Mapping[str, Any], column: str, i: int) -> Any:
    try:
        return row[column]
    except KeyError:
        raise ValueError(f"row {i} has no column {column!r} (columns: {list(row)})") from None


def _wire_names(features: Any) -> tuple[str, ...] | None:
    return tuple(features) if isinstance(features, Mapping) else None


def _wire_features(features: Any, names: tuple[str, ...] | None, i: int) -> list[Any]:
    """A wire-format row's features in the order of ``names`` (an absent name: missing)."""
    if isinstance(features, Mapping):
        unknown = [k for k in features if names is None or k not in names]
        if names is None or unknown:
            raise ValueError(f"row {i}: feature {unknown[0]!r} is not one of the calibration's "
                             f"features {list(names or ())}")
        return [features.get(n) for n in names]
    if names is not None or not isinstance(features, Iterable):
        raise ValueError(f"row {i}: 'features' must be a list of values or a name → value map")
    return list(features)


def event_times(ts: Times, n: int) -> list[datetime | None]:
    if not isinstance(ts, Iterable):  # None, a datetime or a number: the same for every event
        return [_aware(ts)] * n
    times = [_aware(t) for t in ts]
    if len(times) != n:
        raise ValueError(f"got {len(times)} timestamps for {n} rows")
    return times


def _aware(ts: Any) -> datetime | None:
    if ts is None:
        return None
    if hasattr(ts, "to_pydatetime"):  # a pandas Timestamp
        ts = ts.to_pydatetime()
    if isinstance(ts, Real) and not isinstance(ts, bool | np.bool_):
        # the wire format's rule: epoch milliseconds from 1e11, else epoch seconds
        return epoch_time(int(ts) if isinstance(ts, Integral) else float(ts))
    if not isinstance(ts, datetime):
        raise ValueError(f"timestamps must be datetimes or epoch numbers, got {type(ts).__name__}")
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
