"""The Python API for notebooks: :func:`watch` a model from a calibration set, feed it batches.

One in-memory stream (the same :class:`~monitor.streams.monitor.StreamMonitor` the service runs, no
database, no Kafka): :func:`watch` takes the calibration set as arrays, dict rows or a pandas
DataFrame, :meth:`NotebookMonitor.update` takes each batch the same ways and returns the alarms
it raised or revised, each with its diagnosis (``kind``, ``changepoint``) and evidence;
:attr:`NotebookMonitor.trace` holds both martingale traces as numpy record arrays. pandas is
optional (``pip install 'conformal-monitor[pandas]'``): DataFrames are accepted and
:meth:`Trace.to_pandas` works when it is installed; everything else works without it.
Feature cells may be numbers, strings, booleans or missing (:mod:`monitor.notebook_tables`
reads the input tables; docs/tabular.md). Walkthrough: docs/python.md.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from monitor.notebook_tables import Batch, Columns, Table, Times, event_times, label_value
from monitor.streams.alarm_ids import choose, not_found
from monitor.streams.calibration import Calibration
from monitor.streams.config import DEFAULT_THRESHOLD, StreamConfig
from monitor.streams.events import Event, LabelEvent, PredictionEvent
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
    [('conditional', 'concept_shift')]
    >>> [(a.kind, a.revision) for a in monitor.alarm_history]  # raised, then revised
    [('insufficient_evidence', 1), ('concept_shift', 2)]
    >>> monitor.trace.conditional.dtype.names[:3]
    ('event_index', 'log_martingale', 'p_value')
    """
    table = Table.of(calibration, prediction, label, features)
    if task is None:
        task = "classification" if table.columns.n_classes is not None else "regression"
    try:
        config = StreamConfig(
            name=name, task=task, calibration="<in memory>",
            **{"trace_every": 1, "alarm": {"threshold": DEFAULT_THRESHOLD}, **options},
        )
    except ValueError as exc:
        raise ValueError(f"invalid monitor options: {exc}") from None
    cal = table.calibration(config.schema_options)
    return NotebookMonitor(StreamMonitor(config, cal), table.columns)


class NotebookMonitor:
    """One monitored model in memory, built by :func:`watch`.

    Attributes
    ----------
    stream
        The underlying :class:`~monitor.streams.monitor.StreamMonitor` (configuration, detectors).
    alarm_history
        Every version of every alarm so far, in the order raised: an alarm raised as
        ``insufficient_evidence`` is here once more with ``revision`` 2 once the next events
        complete its evidence. A covariate alarm's evidence gains its feature ``attribution``
        once the events after it have been given (docs/explain.md).
    ood_windows
        The OOD decisions over closed windows of events (docs/ood.md).
    performance_windows
        The model's metrics over closed windows of labelled events (docs/explain.md; not kept
        by :meth:`save`).
    """

    def __init__(self, stream: StreamMonitor, columns: Columns) -> None:
        self.stream = stream
        self.columns = columns
        self.alarm_history: list[Alarm] = []
        self.ood_windows: list[OODWindow] = []
        self.performance_windows: list[PerformanceWindow] = []
        # Each detector's trace as record-array chunks, one per batch, joined when read.
        self._chunks: dict[str, list[np.ndarray]] = {d: [] for d in _TRACED}

    @property
    def alarms(self) -> list[Alarm]:
        """One entry per alarm raised so far, in the order raised: its latest revision."""
        return _latest(self.alarm_history)

    def alarm(self, alarm_id: str) -> Alarm:
        """The alarm (its latest revision) with this id, or whose id starts with this prefix of
        at least 4 hexadecimal digits (docs/python.md).

        Raises
        ------
        LookupError
            No alarm has this id; or several alarm ids start with it
            (:class:`~monitor.streams.alarm_ids.AmbiguousAlarmIdError`, listing them).
        """
        latest = {a.id: a for a in self.alarm_history}
        found = choose(alarm_id, latest)
        if found is None:
            raise LookupError(not_found(alarm_id))
        return latest[found]

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
        """Feed a batch of predictions (with their labels when known); return the alarms it
        raised or revised, one entry each (its latest revision).

        ``data`` is a features array ``(n, d)`` (then ``predictions`` is required and ``labels``
        optional, NaN or None marking a label not yet known), or a DataFrame / list of dict rows
        with the calibration's columns (an ``id`` column is used when present). Events get ids
        ``str(event_index)`` unless ``ids`` are given (an integer id is its decimal string, as on
        the wire); ``ts`` (datetimes, or numbers of epoch seconds — milliseconds from 1e11, as
        on the wire) defaults to now. Raises
        :class:`ValueError` before any change when the batch does not fit the calibration.
        """
        batch = self.columns.batch(data, predictions, labels, ids, self.stream.event_index,
                                   self.stream.calibration.schema)
        self._check(batch)
        when = event_times(ts, len(batch.ids))
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
        """Labels that arrive after their predictions, by event id; return the alarms they
        raised or revised, as :meth:`update`."""
        names = [str(i) for i in ids]
        if len(names) != len(labels):
            raise ValueError(f"got {len(names)} ids but {len(labels)} labels")
        values: list[int | float] = []
        for value in labels:
            known = label_value(value, self.stream.calibration.n_classes)
            if known is None:
                raise ValueError("labels must be known (no NaN or None) in add_labels")
            values.append(known)
        when = event_times(ts, len(names))
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
            "alarms": [a.to_json() for a in self.alarm_history],
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
        calibration = Calibration.from_rows(document["calibration"], **config.schema_options)
        stream = StreamMonitor(config, calibration)
        stream.load_state(state["stream"])
        loaded = cls(stream, Columns.from_json(state["columns"]))
        loaded.alarm_history = [Alarm.from_json(a) for a in state["alarms"]]
        loaded._chunks = {d: [state["trace"][d]] for d in _TRACED}
        return loaded

    # -- internals ------------------------------------------------------------------------------

    def _check(self, batch: Batch) -> None:
        seen: set[str] = set()
        for i in batch.ids:
            if i in seen or self.stream.join.has_prediction(i):
                raise ValueError(f"duplicate event id {i!r} (a prediction is waiting for it)")
            seen.add(i)

    def _step(self, events: list[Event]) -> list[Alarm]:
        rejected = self.stream.step(events, lambda k: datetime.now(UTC))
        alarms, points, windows = self.stream.drain()
        self.alarm_history += alarms
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
        return _latest(alarms)

    def _complete(self, evidence: list[AlarmEvidence]) -> None:
        """Merge late evidence (feature attributions, docs/explain.md) into the alarms."""
        extra = {e.alarm_id: e.evidence for e in evidence}
        if extra:
            self.alarm_history = [
                replace(a, evidence={**a.evidence, **extra[a.id]}) if a.id in extra else a
                for a in self.alarm_history
            ]

    def _arrays(self) -> dict[str, np.ndarray]:
        for detector, chunks in self._chunks.items():
            if len(chunks) != 1:
                joined = np.concatenate(chunks) if chunks else np.empty(0, dtype=_TRACE_DTYPE)
                self._chunks[detector] = [joined]
        return {d: chunks[0] for d, chunks in self._chunks.items()}


_TRACED: tuple[str, str] = ("covariate", "conditional")

_TRACE_DTYPE = np.dtype([(f, np.int64 if f == "event_index" else np.float64)
                         for f in TRACE_FIELDS])


def _latest(alarms: Sequence[Alarm]) -> list[Alarm]:
    """One entry per alarm id, at the place it was first raised: its last version."""
    latest: dict[str, Alarm] = {}
    for alarm in alarms:
        latest[alarm.id] = alarm  # a revision keeps its first key's place
    return list(latest.values())


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
        'conformal-monitor[pandas]'``)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Trace.to_pandas needs pandas: pip install 'conformal-monitor[pandas]' (or read "
                "the record arrays Trace.covariate and Trace.conditional)"
            ) from None
        frames = [pd.DataFrame(a).assign(detector=d) for d, a in self._arrays.items()]
        return pd.concat(frames, ignore_index=True)[["detector", *TRACE_FIELDS]]

