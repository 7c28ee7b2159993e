"""The Python API for notebooks: :func:`watch` a model from a calibration set, feed it batches.

One in-memory stream (the same :class:`~monitor.streams.monitor.StreamMonitor` the service runs, no
database, no Kafka): :func:`watch` takes the calibration set as arrays, dict rows or a pandas
DataFrame, :meth:`NotebookMonitor.update` takes each batch the same ways and returns the alarms
it raised, each with its diagnosis (``kind``, ``changepoint``) and evidence;
:attr:`NotebookMonitor.trace` holds both martingale traces as numpy record arrays. pandas is
optional (``pip install 'monitor[pandas]'``): DataFrames are accepted and
:meth:`Trace.to_pandas` works when it is installed; everything else works without it.
Walkthrough: docs/python.md.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np

from monitor.streams.calibration import Calibration
from monitor.streams.config import DEFAULT_THRESHOLD, StreamConfig
from monitor.streams.events import MAX_MAGNITUDE, Event, LabelEvent, PredictionEvent, epoch_time
from monitor.streams.monitor import StreamMonitor
from monitor.streams.records import Alarm, AlarmEvidence, OODWindow, PerformanceWindow, TracePoint
from monitor.streams.state import decode_state, encode_state

__all__ = ["NotebookMonitor", "Trace", "watch"]

#: Version of the file written by :meth:`NotebookMonitor.save`.
SAVE_FORMAT = 1

#: Fields of a trace record array (:attr:`NotebookMonitor.trace`).
TRACE_FIELDS: tuple[str, ...] = (
    "event_index", "log_martingale", "p_value", "log_statistic", "log_threshold", "weights_ess",
)

_MIN_CALIBRATION = 20

#: Event times of a batch: one for every event or one per event; datetimes or epoch numbers.
Times = datetime | float | Sequence[datetime | float] | None


def watch(
    calibration: Any,
    *,
    prediction: str = "prediction",
    label: str = "label",
    features: Sequence[str] | None = None,
    task: str | None = None,
    name: str = "notebook",
    **options: Any,
) -> NotebookMonitor:
    """Start monitoring a model from its calibration set (held-out labeled data).

    Parameters
    ----------
    calibration
        ``(features, predictions, labels)`` arrays; or a pandas DataFrame / a list of dict rows
        with one column per feature plus the ``prediction`` and ``label`` columns (the rows may
        instead be wire-format events ``{"features": ..., "prediction": ..., "label": ...}``).
        Predictions are numbers (regression) or probability vectors (classification).
    prediction, label
        Column names of the prediction and the label in DataFrames and dict rows.
    features
        Feature columns, in order (default: every other column).
    task
        ``"regression"`` or ``"classification"`` (default: classification when predictions are
        probability vectors).
    name
        The stream's name in the alarms.
    **options
        Stream configuration fields (README "Stream configuration"), e.g.
        ``alarm={"rule": "ville", "alpha": 0.01}``. ``trace_every`` defaults to 1 here, and
        ``alarm`` to ``{"threshold": 100000}``: a notebook's events are stamped "now" unless
        given ``ts``, so a time budget (the service's default ``false_alarm_every: 7d``) would
        find no rate to follow and stay at its warm-up threshold (docs/detectors.md).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = X.sum(axis=1) + rng.normal(scale=0.1, size=300)
    >>> monitor = watch((X, X.sum(axis=1), y), alarm={"rule": "ville", "alpha": 0.01})
    >>> X_new = rng.normal(size=(400, 2)); y_new = X_new.sum(axis=1) + 3.0  # the model is off
    >>> [(a.detector, a.kind) for a in monitor.update(X_new, X_new.sum(axis=1), y_new)]
    [('conditional', 'insufficient_evidence'), ('conditional', 'concept_shift')]
    >>> monitor.trace.conditional.dtype.names[:3]
    ('event_index', 'log_martingale', 'p_value')
    """
    table = _Table.of(calibration, prediction, label, features)
    cal = table.calibration()
    if task is None:
        task = "classification" if cal.n_classes is not None else "regression"
    try:
        config = StreamConfig(
            name=name, task=task, calibration="<in memory>",
            **{"trace_every": 1, "alarm": {"threshold": DEFAULT_THRESHOLD}, **options},
        )
    except ValueError as exc:
        raise ValueError(f"invalid monitor options: {exc}") from None
    return NotebookMonitor(StreamMonitor(config, cal), table.columns)


class NotebookMonitor:
    """One monitored model in memory, built by :func:`watch`.

    Attributes
    ----------
    stream
        The underlying :class:`~monitor.streams.monitor.StreamMonitor` (configuration, detectors).
    alarms
        Every alarm raised so far, in order; a covariate alarm's evidence gains its feature
        ``attribution`` once the events after it have been given (docs/explain.md).
    ood_windows
        The OOD decisions over closed windows of events (docs/ood.md).
    performance_windows
        The model's metrics over closed windows of labelled events (docs/explain.md; not kept
        by :meth:`save`).
    """

    def __init__(self, stream: StreamMonitor, columns: _Columns) -> None:
        self.stream = stream
        self.columns = columns
        self.alarms: list[Alarm] = []
        self.ood_windows: list[OODWindow] = []
        self.performance_windows: list[PerformanceWindow] = []
        # Each detector's trace as record-array chunks, one per batch, joined when read.
        self._chunks: dict[str, list[np.ndarray]] = {d: [] for d in _TRACED}

    @property
    def n_events(self) -> int:
        """Predictions seen so far (the next event's ``event_index``)."""
        return self.stream.event_index

    def update(
        self,
        data: Any,
        predictions: Any = None,
        labels: Any = None,
        *,
        ids: Sequence[str | int] | None = None,
        ts: Times = None,
    ) -> list[Alarm]:
        """Feed a batch of predictions (with their labels when known); return the new alarms.

        ``data`` is a features array ``(n, d)`` (then ``predictions`` is required and ``labels``
        optional, NaN or None marking a label not yet known), or a DataFrame / list of dict rows
        with the calibration's columns (an ``id`` column is used when present). Events get ids
        ``str(event_index)`` unless ``ids`` are given (an integer id is its decimal string, as on
        the wire); ``ts`` (datetimes, or numbers of epoch seconds — milliseconds from 1e11, as
        on the wire) defaults to now. Raises
        :class:`ValueError` before any change when the batch does not fit the calibration.
        """
        batch = self.columns.batch(data, predictions, labels, ids, self.stream.event_index)
        self._check(batch)
        when = _times(ts, len(batch.ids))
        events: list[Event] = [
            PredictionEvent(
                stream=self.stream.name, id=batch.ids[k], ts=when[k],
                features=batch.features[k], prediction=batch.predictions[k],
                label=batch.labels[k],
            )
            for k in range(len(batch.ids))
        ]
        return self._step(events)

    def add_labels(
        self, ids: Sequence[str | int], labels: Sequence[Any] | np.ndarray, *, ts: Times = None
    ) -> list[Alarm]:
        """Labels that arrive after their predictions, by event id; return the new alarms."""
        names = [str(i) for i in ids]
        if len(names) != len(labels):
            raise ValueError(f"got {len(names)} ids but {len(labels)} labels")
        values: list[int | float] = []
        for value in labels:
            known = _label(value, self.stream.calibration.n_classes)
            if known is None:
                raise ValueError("labels must be known (no NaN or None) in add_labels")
            values.append(known)
        when = _times(ts, len(names))
        events: list[Event] = [
            LabelEvent(stream=self.stream.name, id=i, ts=when[k], label=values[k])
            for k, i in enumerate(names)
        ]
        return self._step(events)

    @property
    def trace(self) -> Trace:
        """Both detectors' traces so far (one point per ``trace_every`` events, and alarms)."""
        return Trace(self._arrays())

    # -- persistence ----------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write everything needed to resume (configuration, calibration, detector state,
        alarms, traces) to one JSON file; :meth:`load` reads it back."""
        state = {
            "stream": self.stream.state_dict(),
            "trace": self._arrays(),
            "alarms": [a.to_json() for a in self.alarms],
            "columns": self.columns.to_json(),
        }
        text, blob = encode_state(state)
        document = {
            "format": SAVE_FORMAT,
            "config": self.stream.config.model_dump(mode="json"),
            "calibration": self.stream.calibration.to_rows(),
            "state": text,
            "blob": None if blob is None else base64.b64encode(blob).decode("ascii"),
        }
        Path(path).write_text(json.dumps(document), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> NotebookMonitor:
        """A monitor saved by :meth:`save`, in the same state."""
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(document, dict) or document.get("format") != SAVE_FORMAT:
            raise ValueError(f"{path} is not a monitor saved by NotebookMonitor.save")
        blob = document["blob"]
        state = decode_state(document["state"], None if blob is None else base64.b64decode(blob))
        config = StreamConfig.model_validate(document["config"])
        stream = StreamMonitor(config, Calibration.from_rows(document["calibration"]))
        stream.load_state(state["stream"])
        loaded = cls(stream, _Columns.from_json(state["columns"]))
        loaded.alarms = [_alarm(a) for a in state["alarms"]]
        loaded._chunks = {d: [state["trace"][d]] for d in _TRACED}
        return loaded

    # -- internals ------------------------------------------------------------------------------

    def _check(self, batch: _Batch) -> None:
        seen: set[str] = set()
        for i in batch.ids:
            if i in seen or self.stream.join.has_prediction(i):
                raise ValueError(f"duplicate event id {i!r} (a prediction is waiting for it)")
            seen.add(i)

    def _step(self, events: list[Event]) -> list[Alarm]:
        rejected = self.stream.step(events, lambda k: datetime.now(UTC))
        alarms, points, windows = self.stream.drain()
        self.alarms += alarms
        for detector in _TRACED:
            rows = [_row(p) for p in points if p.detector == detector]
            if rows:
                self._chunks[detector].append(_unique(np.array(rows, dtype=_TRACE_DTYPE)))
        self.ood_windows += windows
        performance, evidence = self.stream.drain_explanations()
        self.performance_windows += performance
        self._complete(evidence)
        if rejected:
            k, reason = rejected[0]
            raise ValueError(
                f"{len(rejected)} event(s) did not fit the stream and were skipped "
                f"(the others were processed), first: row {k}: {reason}"
            )
        return alarms

    def _complete(self, evidence: list[AlarmEvidence]) -> None:
        """Merge late evidence (feature attributions, docs/explain.md) into the alarms."""
        extra = {e.alarm_id: e.evidence for e in evidence}
        if extra:
            self.alarms = [replace(a, evidence={**a.evidence, **extra[a.id]}) if a.id in extra
                           else a for a in self.alarms]

    def _arrays(self) -> dict[str, np.ndarray]:
        for detector, chunks in self._chunks.items():
            if len(chunks) != 1:
                joined = np.concatenate(chunks) if chunks else np.empty(0, dtype=_TRACE_DTYPE)
                self._chunks[detector] = [joined]
        return {d: chunks[0] for d, chunks in self._chunks.items()}


_TRACED: tuple[str, str] = ("covariate", "conditional")

_TRACE_DTYPE = np.dtype([(f, np.int64 if f == "event_index" else np.float64)
                         for f in TRACE_FIELDS])


def _unique(chunk: np.ndarray) -> np.ndarray:
    """A batch's trace points without repeats: an alarm's point can repeat the regular point of
    the same event (the database keeps one, its key being the event index)."""
    _, first = np.unique(chunk["event_index"], return_index=True)
    return chunk[np.sort(first)]


def _row(point: TracePoint) -> tuple[Any, ...]:
    ess = math.nan if point.weights_ess is None else point.weights_ess
    return (point.event_index, point.log_martingale, point.p_value, point.log_statistic,
            point.log_threshold, ess)


class Trace:
    """The detectors' traces as numpy record arrays (fields :data:`TRACE_FIELDS`, natural logs;
    NaN where a value does not exist, e.g. p-values while a detector re-baselines)."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._arrays = {d: a.view(np.recarray) for d, a in arrays.items()}
        for view in self._arrays.values():
            view.flags.writeable = False  # views of the monitor's own arrays

    @property
    def covariate(self) -> np.recarray:
        """The covariate monitor's trace (one point per prediction)."""
        return self._arrays["covariate"]

    @property
    def conditional(self) -> np.recarray:
        """The conditional monitor's trace (one point per labeled prediction)."""
        return self._arrays["conditional"]

    def __len__(self) -> int:
        return sum(len(a) for a in self._arrays.values())

    def to_pandas(self) -> Any:
        """One DataFrame with a ``detector`` column (needs pandas: ``pip install
        'monitor[pandas]'``)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Trace.to_pandas needs pandas: pip install 'monitor[pandas]' (or read the record "
                "arrays Trace.covariate and Trace.conditional)"
            ) from None
        frames = [pd.DataFrame(a).assign(detector=d) for d, a in self._arrays.items()]
        return pd.concat(frames, ignore_index=True)[["detector", *TRACE_FIELDS]]


# -- input tables ---------------------------------------------------------------------------------


class _Batch:
    """A validated batch: plain Python values, ready to become events."""

    def __init__(self, ids: list[str], features: list[list[float]], predictions: list[Any],
                 labels: list[Any]) -> None:
        self.ids, self.features, self.predictions, self.labels = ids, features, predictions, labels


class _Columns:
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
    def from_json(cls, data: dict[str, Any]) -> _Columns:
        names = None if data["names"] is None else tuple(data["names"])
        return cls(names, data["prediction"], data["label"], data["n_features"],
                   data["n_classes"])

    def batch(self, data: Any, predictions: Any, labels: Any, ids: Sequence[str | int] | None,
              first: int) -> _Batch:
        if _is_table(data):
            if predictions is not None or labels is not None:
                raise ValueError("give predictions and labels as columns of the rows/DataFrame, "
                                 "not as separate arguments")
            table = _Table.of(data, self.prediction, self.label, self.names, labels_optional=True)
            X, predictions, labels = table.X, table.predictions, table.labels
            ids = ids if ids is not None else table.ids
        else:
            X = _matrix(data, "features")
            if predictions is None:
                raise ValueError("predictions are required with a features array")
        n = X.shape[0]
        if X.shape[1] != self.n_features:
            raise ValueError(f"features have {X.shape[1]} columns, the calibration has "
                             f"{self.n_features}")
        P = _predictions(predictions, n, self.n_classes)
        y = [None] * n if labels is None else _labels(labels, n, self.n_classes)
        names = [str(first + k) for k in range(n)] if ids is None else [str(i) for i in ids]
        if len(names) != n:
            raise ValueError(f"got {len(names)} ids for {n} rows")
        return _Batch(names, X.tolist(), P, y)


class _Table:
    """Features, predictions and labels read from arrays, dict rows or a DataFrame."""

    def __init__(self, X: np.ndarray, predictions: Any, labels: Any, columns: _Columns,
                 ids: list[str] | None = None) -> None:
        self.X, self.predictions, self.labels, self.columns, self.ids = (
            X, predictions, labels, columns, ids)

    @classmethod
    def of(cls, data: Any, prediction: str, label: str, features: Sequence[str] | None,
           labels_optional: bool = False) -> _Table:
        if isinstance(data, Calibration):
            return cls._arrays(data.features, data.predictions, data.labels, prediction, label,
                               data.feature_names)
        if isinstance(data, tuple):
            if len(data) != 3:
                raise ValueError("calibration arrays are (features, predictions, labels), got "
                                 f"{len(data)} items")
            return cls._arrays(*data, prediction, label, None)
        if _is_dataframe(data):
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
                names: tuple[str, ...] | None) -> _Table:
        X = _matrix(X, "features")
        n_classes = _n_classes(predictions)
        columns = _Columns(names, prediction, label, X.shape[1], n_classes)
        return cls(X, predictions, labels, columns)

    @classmethod
    def _rows(cls, rows: Sequence[Mapping[str, Any]], prediction: str, label: str,
              features: Sequence[str] | None, labels_optional: bool) -> _Table:
        if not rows:
            raise ValueError("no rows")
        wire = "features" in rows[0] and (features is None or "features" not in features)
        if wire:
            names = _wire_names(rows[0]["features"]) if features is None else tuple(features)
            X = np.array([_wire_features(r.get("features"), names, i)
                          for i, r in enumerate(rows)], dtype=float)
        else:
            names = tuple(features) if features is not None else tuple(
                c for c in rows[0] if c not in (prediction, label, "id", "ts"))
            X = _matrix([[_cell(r, c, i) for c in names] for i, r in enumerate(rows)], "features")
        preds = [_cell(r, prediction, i) for i, r in enumerate(rows)]
        if labels_optional:
            labels: list[Any] = [r.get(label) for r in rows]
        else:
            labels = [_cell(r, label, i) for i, r in enumerate(rows)]
        ids = [str(r["id"]) for r in rows] if all("id" in r for r in rows) else None
        columns = _Columns(names, prediction, label, X.shape[1], _n_classes(preds))
        return cls(X, preds, labels, columns, ids)

    def calibration(self) -> Calibration:
        n = self.X.shape[0]
        if n < _MIN_CALIBRATION:
            raise ValueError(f"calibration needs at least {_MIN_CALIBRATION} rows, got {n}")
        n_classes = self.columns.n_classes
        P = np.array(_predictions(self.predictions, n, n_classes), dtype=float)
        y = _labels(self.labels, n, n_classes)
        if any(v is None for v in y):
            raise ValueError("every calibration row needs a label (found NaN or None)")
        labels = np.array(y, dtype=np.int64 if n_classes else float)
        return Calibration(self.X, P, labels, self.columns.names)


def _is_dataframe(data: Any) -> bool:
    # Without importing pandas: it is optional and slow to import.
    return type(data).__name__ == "DataFrame" and hasattr(data, "to_dict")


def _is_table(data: Any) -> bool:
    return _is_dataframe(data) or (
        isinstance(data, Sequence) and not isinstance(data, str | bytes) and bool(data)
        and all(isinstance(r, Mapping) for r in data))


def _matrix(values: Any, what: str) -> np.ndarray:
    try:
        X = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be numbers: {exc}") from None
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array (rows × columns), got shape "
                         f"{X.shape}")
    _check_finite(X, what)
    return X


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
    return [_label(v, n_classes) for v in values]


def _label(value: Any, n_classes: int | None) -> int | float | None:
    """A label as the stream wants it; None when unknown (None or NaN)."""
    if value is None or (isinstance(value, float | np.floating) and math.isnan(value)):
        return None
    if isinstance(value, bool | str | bytes):
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


def _wire_features(features: Any, names: tuple[str, ...] | None, i: int) -> list[float]:
    if isinstance(features, Mapping):
        if names is None or set(features) != set(names):
            raise ValueError(f"row {i}: feature names {sorted(features)} differ from {names}")
        return [features[n] for n in names]
    if names is not None or not isinstance(features, Iterable):
        raise ValueError(f"row {i}: 'features' must be a list of numbers or a name → number map")
    return list(features)


def _times(ts: Times, n: int) -> list[datetime | None]:
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


def _alarm(data: dict[str, Any]) -> Alarm:
    fields = dict(data)
    fields["ts"] = datetime.fromisoformat(fields["ts"].replace("Z", "+00:00"))
    return Alarm(**fields)
