"""The front door's input tables (:mod:`monitor.frontdoor`): a held-out set or a batch of
predictions given as a pandas DataFrame, a dict of columns, dict rows, a 2-D numpy array with
feature names, or a CSV / JSONL file, read into columns of plain values; and the model's or the
columns' predictions, with the classes of a classification task.

pandas is optional: a DataFrame is recognised by duck typing (:func:`is_dataframe`), never by
importing pandas. Feature cells become what the wire format carries (a number, a string, a
boolean or ``None``) through :func:`monitor.notebook_tables.read_features`, which names the row
and the column of a cell it cannot take.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import MonitorError
from monitor.notebook_tables import is_dataframe, label_value, read_features

#: A column given by name, or its values (a list, a numpy array, a pandas Series).
ColumnSpec = str | Sequence[Any] | np.ndarray | None


class FrontDoorError(MonitorError, ValueError):
    """Data the front door cannot turn into a stream's files; the message says what to give."""


class Table:
    """Named columns of plain Python values, all of one length, and the object they came from
    (a DataFrame or an array is handed to a model as it was given)."""

    def __init__(self, columns: dict[str, list[Any]], source: Any) -> None:
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise FrontDoorError(f"columns differ in length: {sorted(lengths)}")
        self.columns, self.source = columns, source
        self.n = lengths.pop() if lengths else 0
        if self.n == 0:
            raise FrontDoorError("the data has no rows")

    @classmethod
    def of(cls, data: Any, features: Sequence[str] | None = None) -> Table:
        """A table from any accepted form (see the module docstring)."""
        if isinstance(data, str | Path):
            return cls(read_table_file(data), None)
        if is_dataframe(data):
            return cls({str(c): _plain_list(data[c]) for c in data.columns}, data)
        if isinstance(data, np.ndarray):
            return cls(_array_columns(data, features), data)
        if isinstance(data, Mapping):
            return cls({str(k): _plain_list(v) for k, v in data.items()}, None)
        if isinstance(data, Sequence) and data and all(isinstance(r, Mapping) for r in data):
            return cls(_row_columns(data), None)
        raise FrontDoorError(
            "expected a pandas DataFrame, a dict of columns, a list of dict rows, a 2-D numpy "
            f"array with feature names, or a CSV/JSONL path; got {type(data).__name__}"
        )

    def values(self, spec: ColumnSpec, what: str) -> list[Any]:
        """A column by name, or the given values checked against the table's length."""
        if isinstance(spec, str):
            if spec not in self.columns:
                raise FrontDoorError(f"{what}: no column {spec!r} (columns: "
                                     f"{', '.join(self.columns)})")
            return self.columns[spec]
        values = _plain_list(spec)
        if len(values) != self.n:
            raise FrontDoorError(f"{what}: {len(values)} values for {self.n} rows")
        return values

    def feature_rows(self, names: Sequence[str]) -> list[list[Any]]:
        """Rows of wire-format feature values (a number, a string, a boolean or ``None``)."""
        missing = [n for n in names if n not in self.columns]
        if missing:
            raise FrontDoorError(f"features: no column {missing[0]!r} (columns: "
                                 f"{', '.join(self.columns)})")
        if not names:
            raise FrontDoorError("no feature columns: every column is the target, the "
                                 "prediction, a probability, the time or the id")
        rows = [list(r) for r in zip(*(self.columns[n] for n in names), strict=True)]
        try:
            cells = read_features(rows, tuple(names))
        except ValueError as exc:
            raise FrontDoorError(str(exc)) from None
        return cells.tolist() if isinstance(cells, np.ndarray) else cells

    def model_input(self, names: Sequence[str]) -> Any:
        """The feature columns as a model takes them: a DataFrame's or an array's own columns,
        else a float matrix (an ``object`` one when a cell is not a number)."""
        if is_dataframe(self.source):
            return self.source[list(names)]
        if isinstance(self.source, np.ndarray):
            order = list(self.columns)
            return self.source[:, [order.index(n) for n in names]]
        rows = self.feature_rows(names)
        numeric = all(isinstance(v, float) for row in rows for v in row)
        return np.array(rows, dtype=float if numeric else object)


def read_table_file(path: str | Path) -> dict[str, list[Any]]:
    """The columns of a CSV file (a cell that reads as a number is one, an empty cell is
    missing, any other cell a string) or of a JSONL file of one object per line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise FrontDoorError(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        rows = []
        for k, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise FrontDoorError(f"{path} line {k}: not JSON ({exc.msg})") from None
        if not rows or not all(isinstance(r, dict) for r in rows):
            raise FrontDoorError(f"{path}: expected one JSON object per line")
        return _row_columns(rows)
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise FrontDoorError(f"{path}: no header line")
    columns: dict[str, list[Any]] = {name: [] for name in reader.fieldnames}
    for k, row in enumerate(reader, 2):
        if None in row or any(v is None for v in row.values()):
            raise FrontDoorError(f"{path} line {k}: {len(row)} cells, the header has "
                                 f"{len(reader.fieldnames)}")
        for name, cell in row.items():
            columns[name].append(csv_cell(cell))
    return columns


def csv_cell(text: str) -> Any:
    """A CSV cell's value: ``None`` when empty, a float when it reads as a finite number (a
    JSON list of numbers stays a list: a column of probability vectors), else the text."""
    stripped = text.strip()
    if not stripped:
        return None
    try:
        number = float(stripped)
    except ValueError:
        if stripped.startswith("["):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError:
                return text
        return text
    return number if math.isfinite(number) else text


def _plain_list(values: Any) -> list[Any]:
    """Python values of a column (numpy scalars as Python numbers)."""
    if hasattr(values, "tolist"):
        return list(values.tolist())
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def _array_columns(X: np.ndarray, features: Sequence[str] | None) -> dict[str, list[Any]]:
    if X.ndim != 2:
        raise FrontDoorError(f"a features array must be 2-D (rows × columns), got shape "
                             f"{X.shape}")
    names = list(features) if features is not None else [f"x{j}" for j in range(X.shape[1])]
    if len(names) != X.shape[1]:
        raise FrontDoorError(f"{len(names)} feature names for {X.shape[1]} columns")
    return {str(n): X[:, j].tolist() for j, n in enumerate(names)}


def _row_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Columns of dict rows; a key absent from a row is ``None`` there."""
    names = list(dict.fromkeys(str(k) for r in rows for k in r))
    return {n: [r.get(n) for r in rows] for n in names}


# -- predictions, classes, labels ---------------------------------------------------------------


def is_vector(value: Any) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def is_class_name(value: Any) -> bool:
    return isinstance(value, str | bool | np.bool_)


def model_predictions(model: Any, X: Any, task: str | None
                      ) -> tuple[str, list[Any], list[Any] | None]:
    """(task, predictions, classes) of a fitted scikit-learn-style estimator: the probabilities
    of ``predict_proba`` in the order of ``classes_`` (classification), or ``predict``."""
    if task != "regression" and hasattr(model, "predict_proba"):
        P = np.asarray(model.predict_proba(X), dtype=float)
        classes = _plain_list(getattr(model, "classes_", range(P.shape[1])))
        if len(classes) != P.shape[1]:
            raise FrontDoorError(f"the model has {len(classes)} classes_ but predict_proba "
                                 f"gives {P.shape[1]} probabilities")
        return "classification", P.tolist(), classes
    if task == "classification":
        raise FrontDoorError(f"a classification stream needs probabilities: "
                             f"{type(model).__name__} has no predict_proba")
    try:
        y = np.asarray(model.predict(X), dtype=float).ravel()
    except (TypeError, ValueError):
        raise FrontDoorError(f"{type(model).__name__}.predict gives no numbers: give "
                             "task='classification' to a classifier with predict_proba") from None
    return "regression", y.tolist(), None


def infer_task(predictions: Sequence[Any]) -> str:
    """Classification when a prediction is a probability vector or a class name (a string or
    a boolean), else regression."""
    if any(is_vector(p) or is_class_name(p) for p in predictions):
        return "classification"
    return "regression"


def class_order(labels: Sequence[Any], more: Sequence[Any] = ()) -> list[Any]:
    """The sorted distinct labels (numbers before names), missing ones left out."""
    seen = {_integral(_hashable(v)) for v in (*labels, *more) if not is_missing(v)}
    return sorted(seen, key=lambda v: (isinstance(v, str), v))


def _integral(value: Any) -> Any:
    """A whole float as an int (a CSV's ``2`` is read as 2.0): classes ``[0, 1, 2]``."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def one_hot(predictions: Sequence[Any], classes: Sequence[Any]) -> list[list[float]]:
    """Predicted class names as probability vectors (1 on the predicted class)."""
    index = class_index(classes)
    out = []
    for i, p in enumerate(predictions):
        row = [0.0] * len(classes)
        row[_lookup(index, p, i, "prediction", classes)] = 1.0
        out.append(row)
    return out


def probability_rows(values: Sequence[Any], n_classes: int | None = None) -> list[list[float]]:
    """Probability vectors as lists of floats, each of the same length, >= 0, summing to 1."""
    try:
        P = np.array([np.asarray(v, dtype=float) for v in values])
    except (TypeError, ValueError) as exc:
        raise FrontDoorError(f"probabilities must be vectors of numbers: {exc}") from None
    if P.ndim != 2 or P.shape[1] < 2 or (n_classes is not None and P.shape[1] != n_classes):
        want = f"{n_classes}" if n_classes is not None else "at least 2"
        raise FrontDoorError(f"probabilities must be vectors of {want} numbers, got shape "
                             f"{P.shape}")
    bad = ~np.isfinite(P).all(axis=1) | (P < 0).any(axis=1) | (np.abs(P.sum(axis=1) - 1) > 1e-3)
    if bad.any():
        raise FrontDoorError(f"row {int(np.argmax(bad))}: probabilities must be finite, >= 0 "
                             "and sum to 1")
    return P.tolist()


def numbers(values: Sequence[Any], what: str) -> list[float]:
    """Regression predictions as floats, naming the first row that is not a finite number."""
    out = []
    for i, v in enumerate(values):
        try:
            number = label_value(v, None)
        except ValueError:
            number = None
        if number is None:
            raise FrontDoorError(f"row {i}: {what} {v!r} is not a finite number")
        out.append(float(number))
    return out


def class_index(classes: Sequence[Any]) -> dict[Any, int]:
    return {_hashable(c): k for k, c in enumerate(classes)}


def label_indexes(labels: Sequence[Any], classes: Sequence[Any] | None) -> list[Any]:
    """Wire-format labels: a class's index in ``classes`` (classification), a number
    (regression); ``None`` where the label is missing."""
    if classes is None:
        try:
            return [label_value(v, None) for v in labels]
        except ValueError as exc:
            raise FrontDoorError(f"regression labels: {exc}") from None
    index = class_index(classes)
    return [None if is_missing(v) else _lookup(index, v, i, "label", classes)
            for i, v in enumerate(labels)]


def is_missing(value: Any) -> bool:
    return value is None or type(value).__name__ in ("NAType", "NaTType") or (
        isinstance(value, float | np.floating) and math.isnan(value))


def _hashable(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _lookup(index: dict[Any, int], value: Any, row: int, what: str, classes: Sequence[Any]
            ) -> int:
    key = _hashable(value)
    if isinstance(key, float) and key.is_integer() and key not in index:
        key = int(key)  # a CSV's or a float column's "2.0" for the class 2
    try:
        return index[key]
    except (KeyError, TypeError):
        shown = ", ".join(repr(c) for c in classes[:12]) + (", …" if len(classes) > 12 else "")
        raise FrontDoorError(f"row {row}: {what} {value!r} is not one of the stream's classes "
                             f"[{shown}]") from None
