"""The front door: from a fitted model and its held-out data to a stream the service monitors.

:func:`stream_from` writes the two files a stream needs — the calibration (labeled prediction
events, JSONL) and the stream configuration (YAML) — checked by the loader ``monitor run``
uses, and returns a :class:`StreamFiles` whose :meth:`~StreamFiles.to_events` (or the top-level
:func:`to_events`) writes later predictions and labels as wire-format events. ``monitor init``
and ``monitor events`` are the same on CSV / JSONL files (docs/python.md, README "Your own
model").

Classification labels on the wire are class indexes (a class's position in the prediction's
probability vector). The front door maps class names to indexes: through the estimator's
``classes_``, else the sorted distinct labels, a mapping written into the configuration
(``classes:``) and applied to the calibration and to every event it writes. The service itself
reads indexes only: an event written by other code must carry the index.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

import yaml

from monitor.frontdoor_tables import (
    ColumnSpec,
    FrontDoorError,
    Table,
    class_order,
    infer_task,
    is_class_name,
    is_vector,
    label_indexes,
    model_predictions,
    numbers,
    one_hot,
    probability_rows,
)
from monitor.notebook_tables import event_times

__all__ = ["ADVISED_CALIBRATION", "FrontDoorError", "StreamFiles", "calibration_advice",
           "detection_floor", "ood_floor", "stream_from", "to_events"]

_log = logging.getLogger(__name__)

#: Fewer calibration rows than this draw a warning (docs/detectors.md, "How large a
#: calibration set"): the p-values' resolution 1/(m+1) slows detection and starves the OOD flags.
ADVISED_CALIBRATION = 500
#: The threshold the front door's configuration sets when events carry no times: the budget in
#: events whose threshold (2 × events) is the service's floor of 100 000.
EVENTS_BUDGET = 50_000


@dataclass(frozen=True)
class _Spec:
    """Where a table's target, predictions, times and ids are (names or values)."""

    target: ColumnSpec = None
    prediction: ColumnSpec = None
    proba: Sequence[str] | ColumnSpec = None
    model: Any = None
    ts: ColumnSpec = None
    ids: ColumnSpec = None

    def check(self) -> None:
        given = [k for k in ("prediction", "proba", "model") if getattr(self, k) is not None]
        if len(given) != 1:
            raise FrontDoorError("give exactly one of prediction= (a column of predictions), "
                                 "proba= (probability columns) or model= (a fitted estimator); "
                                 f"got {given or 'none'}")

    def used_columns(self) -> set[str]:
        names = {v for v in (self.target, self.prediction, self.ts, self.ids)
                 if isinstance(v, str)}
        if isinstance(self.proba, str):
            names.add(self.proba)
        elif isinstance(self.proba, list | tuple) and all(isinstance(c, str) for c in self.proba):
            names.update(self.proba)
        return names

    def with_columns(self, **given: Any) -> _Spec:
        """This spec with the given names/values instead (``None``: keep this one's)."""
        if any(given.get(k) is not None for k in ("prediction", "proba", "model")):
            base = {"prediction": None, "proba": None, "model": None}
        else:
            base = {}
        kept = {k: getattr(self, k) for k in ("target", "prediction", "proba", "model", "ts",
                                                "ids")}
        return _Spec(**(kept | base | {k: v for k, v in given.items() if v is not None}))


@dataclass(frozen=True)
class _Read:
    """A table read for a stream: feature rows, predictions, labels (wire values)."""

    task: str
    names: tuple[str, ...]
    features: list[list[Any]]
    predictions: list[Any]
    labels: list[Any] | None
    classes: list[Any] | None


def _read(table: Table, spec: _Spec, names: Sequence[str], task: str | None,
          classes: Sequence[Any] | None) -> _Read:
    """Features, predictions and labels of ``table``; ``classes`` fixed (a stream's) or
    ``None`` (found here: the model's ``classes_``, else the sorted distinct labels)."""
    spec.check()
    labels = None if spec.target is None else table.values(spec.target, "target")
    task, predictions, classes = _predictions(table, spec, names, task, classes, labels)
    if task not in ("classification", "regression"):
        raise FrontDoorError(f"task must be 'classification' or 'regression', got {task!r}")
    if task == "regression":
        classes = None
    wire_labels = None if labels is None else label_indexes(labels, classes)
    return _Read(task, tuple(names), table.feature_rows(names), predictions, wire_labels,
                 None if classes is None else list(classes))


def _predictions(table: Table, spec: _Spec, names: Sequence[str], task: str | None,
                 classes: Sequence[Any] | None, labels: Sequence[Any] | None
                 ) -> tuple[str, list[Any], Sequence[Any] | None]:
    """(task, wire-format predictions, classes) from the model, the probability columns or
    the prediction column."""
    if spec.model is not None:
        task, predictions, found = model_predictions(spec.model, table.model_input(names), task)
        return task, predictions, classes if classes is not None else found
    if spec.proba is not None:
        values, task = _proba_values(table, spec.proba), task or "classification"
    else:
        values = table.values(spec.prediction, "prediction")
        task = task or infer_task(values)
        if task == "regression":
            return task, numbers(values, "prediction"), None
        if not any(is_vector(v) for v in values):  # predicted class names: one-hot
            classes = classes if classes is not None else class_order(labels or (), values)
            return task, one_hot(values, classes), classes
    P = probability_rows(values, None if classes is None else len(classes))
    return task, P, classes if classes is not None else _proba_classes(labels, len(P[0]))


def _proba_values(table: Table, proba: Any) -> list[Any]:
    if isinstance(proba, list | tuple) and proba and all(isinstance(c, str) for c in proba):
        columns = [table.values(c, "proba") for c in proba]
        return [list(row) for row in zip(*columns, strict=True)]
    return table.values(proba, "proba")


def _proba_classes(labels: Sequence[Any] | None, n_classes: int) -> list[Any]:
    """Classes of probability vectors without an estimator: the sorted class names when the
    labels are names, else the indexes 0..C-1."""
    names = [v for v in labels or () if is_class_name(v)]
    if not names:
        return list(range(n_classes))
    order = class_order(labels or ())
    if len(order) != n_classes:
        raise FrontDoorError(f"the labels name {len(order)} classes but the probability vectors "
                             f"have {n_classes}: give classes=[...] in the vectors' order")
    return order


@dataclass(frozen=True)
class StreamFiles:
    """A stream's files, written by :func:`stream_from`, and how to read its data.

    ``warnings`` holds what the caller should know (a small calibration set: docs/detectors.md,
    "How large a calibration set"), also logged.
    """

    name: str
    task: str
    config_path: Path
    calibration_path: Path
    features: tuple[str, ...]
    classes: tuple[Any, ...] | None
    n_calibration: int
    warnings: tuple[str, ...] = ()
    #: Events carry the features by name (the front door's calibrations); a calibration of
    #: feature lists (written elsewhere) is followed by position, its columns ``x0, x1, …``.
    named_features: bool = True
    _spec: _Spec = field(default_factory=_Spec, repr=False)

    def to_events(
        self,
        data: Any,
        out: str | Path | None = None,
        *,
        target: ColumnSpec = None,
        prediction: ColumnSpec = None,
        proba: Sequence[str] | ColumnSpec = None,
        model: Any = None,
        ts: ColumnSpec = None,
        ids: ColumnSpec = None,
        label_delay: int | None = None,
    ) -> Path:
        """Write ``data``'s rows as prediction (and label) events; returns the file's path.

        The columns default to those given to :func:`stream_from` (a column absent from
        ``data`` — a target not known yet — is left out when it was a default); ``out``
        defaults to ``<name>_events.jsonl`` beside the configuration. See :func:`to_events`.
        """
        spec = self._spec.with_columns(target=target, prediction=prediction, proba=proba,
                                       model=model, ts=ts, ids=ids)
        table = Table.of(data, self.features)
        spec = _present(spec, table, explicit={"target": target, "ts": ts, "ids": ids})
        path = Path(out) if out is not None else self.config_path.with_name(
            f"{self.name}_events.jsonl")
        read = _read(table, spec, self.features, self.task, self.classes)
        _write_jsonl(path, _events(self.name, read, table, spec, label_delay,
                                   self.named_features))
        return path

    def commands(self, events: str = "EVENTS.jsonl") -> list[str]:
        """The commands that monitor this stream's events (printed by ``monitor init``)."""
        config = str(self.config_path)
        return [f"monitor run --config {config} --source file:{events}",
                f"monitor alarms list --stream {self.name}",
                "monitor report --alarm ID"]


def _present(spec: _Spec, table: Table, explicit: dict[str, Any]) -> _Spec:
    """``spec`` without the default columns (target, ts, ids) ``table`` lacks."""
    drop = {k: None for k in ("target", "ts", "ids")
            if explicit[k] is None and isinstance(getattr(spec, k), str)
            and getattr(spec, k) not in table.columns}
    return _Spec(**(spec.__dict__ | drop)) if drop else spec


def stream_from(
    data: Any,
    target: ColumnSpec,
    *,
    prediction: ColumnSpec = None,
    proba: Sequence[str] | ColumnSpec = None,
    model: Any = None,
    features: Sequence[str] | None = None,
    name: str = "my-stream",
    task: str | None = None,
    classes: Sequence[Any] | None = None,
    ts: ColumnSpec = None,
    ids: ColumnSpec = None,
    out_dir: str | Path = "monitor-stream",
) -> StreamFiles:
    """Write a stream's calibration file and configuration from held-out labeled data.

    Parameters
    ----------
    data
        The held-out rows the model never trained on: a pandas DataFrame, a dict of columns,
        a list of dict rows, a 2-D numpy array (name its columns with ``features``) or the path
        of a CSV / JSONL file. Feature values may be numbers, strings, booleans or missing
        (docs/tabular.md).
    target
        The true labels: a column name or the values. Classification labels may be class
        names; they are mapped to class indexes (module docstring).
    prediction, proba, model
        Exactly one: a column of predictions (numbers for regression; probability vectors, or
        predicted class names read as one-hot vectors, for classification), probability
        columns in class order (a list of names, one column of vectors, or a 2-D array), or a
        fitted estimator (``predict_proba`` for classification, else ``predict``).
    features
        Feature columns in order (default: every column not named above).
    name
        The stream's name (letters, digits, ``_ . -``).
    task
        ``"classification"`` or ``"regression"``; default: classification for an estimator
        with ``predict_proba``, probability columns, vectors or class names, else regression.
    classes
        The classes in the order of the probability vectors (default: the estimator's
        ``classes_``, else the sorted distinct labels).
    ts
        The column of event times, if the events will carry them: the configuration then
        budgets false alarms in time (one a week); without, in events.
    ids
        The column of event ids, if any (not a feature; :meth:`StreamFiles.to_events` uses it).
    out_dir
        The folder written (created if needed): ``<name>.yaml`` and
        ``<name>_calibration.jsonl``.

    Raises
    ------
    FrontDoorError
        Data that cannot be read as a stream; the message says what to give.
    monitor.streams.setup.RunError
        Files the service would refuse (raised before returning, never later by
        ``monitor run``).
    """
    spec = _Spec(target=target, prediction=prediction, proba=proba, model=model, ts=ts, ids=ids)
    table = Table.of(data, features)
    names = tuple(features) if features is not None else tuple(
        c for c in table.columns if c not in spec.used_columns())
    read = _read(table, spec, names, task, None if classes is None else list(classes))
    if read.labels is None or any(v is None for v in read.labels):
        raise FrontDoorError("every calibration row needs its true label (target)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = StreamFiles(
        name=name, task=read.task, config_path=out / f"{name}.yaml",
        calibration_path=out / f"{name}_calibration.jsonl", features=names,
        classes=None if read.classes is None else tuple(read.classes),
        n_calibration=table.n, _spec=spec,
    )
    _write_jsonl(files.calibration_path, _calibration_rows(name, read))
    _write_config(files, time_budget=ts is not None)
    _check(files.config_path)
    advice = calibration_advice(table.n)
    if advice is not None:
        _log.warning("stream %r: %s", name, advice)
        files = StreamFiles(**{**files.__dict__, "warnings": (advice,)})
    return files


def to_events(
    data: Any,
    config: str | Path,
    out: str | Path | None = None,
    *,
    target: ColumnSpec = None,
    prediction: ColumnSpec = None,
    proba: Sequence[str] | ColumnSpec = None,
    model: Any = None,
    ts: ColumnSpec = None,
    ids: ColumnSpec = None,
    label_delay: int | None = None,
) -> Path:
    """Write ``data``'s rows as events of the stream configured in ``config``.

    The stream's name, task, classes (``classes:``) and feature columns come from its
    configuration and calibration. Each row is a prediction event (``id`` from ``ids``, else
    ``e-000000``, ``e-000001``…; ``ts`` from the ``ts`` column or values, else none: the
    alarm budget then counts events, and the label join uses the arrival time). ``target``
    gives the labels: inline in the prediction (``label_delay=None``), or as label events each
    written after the prediction
    ``label_delay`` rows later (the rest at the end), with that row's time. Returns ``out``
    (default ``<name>_events.jsonl`` beside ``config``).
    """
    return stream_files(config).to_events(
        data, out, target=target, prediction=prediction, proba=proba, model=model, ts=ts,
        ids=ids, label_delay=label_delay)


def stream_files(config: str | Path) -> StreamFiles:
    """The :class:`StreamFiles` of an existing configuration (its calibration read back)."""
    from monitor.streams.setup import load_calibration, read_configs

    (stream,) = read_configs([str(config)])
    calibration = load_calibration(stream)
    named = calibration.feature_names is not None
    names = calibration.feature_names or tuple(f"x{j}" for j in range(calibration.n_features))
    assert isinstance(stream.calibration, str)  # a file: load_stream_config resolved it
    return StreamFiles(
        name=stream.name, task=stream.task, config_path=Path(config),
        calibration_path=Path(stream.calibration), features=names,
        classes=None if stream.classes is None else tuple(stream.classes),
        n_calibration=len(calibration), named_features=named,
    )


# -- calibration size (docs/detectors.md, "How large a calibration set") -----------------------


def detection_floor(m: int, threshold: float = 1e5) -> int:
    """Fewest events for the conditional monitor's default bet (plug-in power) under
    Shiryaev–Roberts to reach ``threshold`` when every p-value is 1/(m+1), the p-value of an
    event stranger than all m calibration rows (up to its tie-breaking uniform)."""
    import numpy as np

    from monitor.core.martingales.alarms import ShiryaevRoberts
    from monitor.core.martingales.betting import PlugInPower

    for n in (64, 1024, 16_384):
        rule = ShiryaevRoberts(threshold=threshold)
        hit = rule.update_many(PlugInPower().update_many(np.full(n, 1.0 / (m + 1))))
        if hit is not None:
            return hit + 1
    raise ValueError(f"threshold {threshold:g} is not reached by 16 384 events at m = {m}")


def ood_floor(m: int, window: int = 256, alpha: float = 0.1) -> int:
    """Fewest OOD flags in a window for BH to flag any: p ≥ 1/(m+1), so R ≥ n/(α(m+1))
    (docs/algorithms.md, "Discreteness floor")."""
    return max(1, math.ceil(window / (alpha * (m + 1)) - 1e-9))


def calibration_advice(m: int) -> str | None:
    """The warning for a calibration set of ``m`` rows; ``None`` from
    :data:`ADVISED_CALIBRATION` rows on."""
    if m >= ADVISED_CALIBRATION:
        return None
    from monitor.streams.config import REFERENCE_BANK

    return (
        f"the calibration has {m} rows, fewer than the {ADVISED_CALIBRATION} advised: a "
        f"conformal p-value resolves no better than 1/(m+1) = {1 / (m + 1):.4f}, so the "
        f"conditional monitor needs at least {detection_floor(m)} events of even an extreme "
        f"shift to reach its threshold of 100 000 ({detection_floor(2000)} with 2 000 rows), "
        f"and an OOD flag at alpha 0.1 needs {ood_floor(m)} flags in the same window of 256 "
        f"({ood_floor(REFERENCE_BANK)} from {REFERENCE_BANK} rows on, the most the OOD rule "
        f"reads by default: reference_bank); docs/detectors.md, \"How large a calibration set\""
    )


# -- writing -------------------------------------------------------------------------------------


def _calibration_rows(name: str, read: _Read) -> Iterator[dict[str, Any]]:
    assert read.labels is not None
    for i, (row, prediction, label) in enumerate(
            zip(read.features, read.predictions, read.labels, strict=True)):
        yield {"kind": "prediction", "stream": name, "id": f"cal-{i:06d}",
               "features": dict(zip(read.names, row, strict=True)), "prediction": prediction,
               "label": label}


def _events(name: str, read: _Read, table: Table, spec: _Spec, delay: int | None,
            named: bool) -> Iterator[dict[str, Any]]:
    """Prediction events in row order, labels inline or ``delay`` rows later."""
    if delay is not None and delay < 0:
        raise FrontDoorError(f"label_delay must be >= 0 rows, got {delay}")
    ids = ([str(v) for v in table.values(spec.ids, "ids")] if spec.ids is not None
           else [f"e-{i:06d}" for i in range(table.n)])
    times = [None] * table.n if spec.ts is None else _times(table.values(spec.ts, "ts"))
    labels = read.labels or [None] * table.n
    pending: list[dict[str, Any]] = []
    for i, (row, prediction) in enumerate(zip(read.features, read.predictions, strict=True)):
        event = {"kind": "prediction", "stream": name, "id": ids[i]} | _ts(times[i]) | {
            "features": dict(zip(read.names, row, strict=True)) if named else row,
            "prediction": prediction}
        if labels[i] is not None and delay is None:
            event["label"] = labels[i]
        yield event
        if labels[i] is not None and delay is not None:
            pending.append({"kind": "label", "stream": name, "id": ids[i], "label": labels[i]})
        while pending and (len(pending) > delay if delay is not None else False):
            yield pending.pop(0) | _ts(times[i])
    yield from (label | _ts(times[-1]) for label in pending)


def _times(values: list[Any]) -> list[str | None]:
    """Event times as the wire takes them: a string as given, a datetime or epoch number as
    ISO 8601 UTC."""
    out: list[str | None] = []
    for v in values:
        if v is None or isinstance(v, str):
            out.append(v)
            continue
        try:
            (t,) = event_times([v], 1)
        except ValueError as exc:
            raise FrontDoorError(f"ts: {exc}") from None
        assert t is not None
        out.append(t.astimezone(UTC).isoformat().replace("+00:00", "Z"))
    return out


def _ts(value: str | None) -> dict[str, str]:
    return {} if value is None else {"ts": value}


def _write_config(files: StreamFiles, time_budget: bool) -> None:
    alarm: dict[str, Any] = ({"rule": "shiryaev_roberts", "false_alarm_every": "7d"}
                             if time_budget else
                             {"rule": "shiryaev_roberts", "events": EVENTS_BUDGET})
    config: dict[str, Any] = {"name": files.name, "task": files.task,
                              "calibration": files.calibration_path.name}
    if files.classes is not None:
        config["classes"] = list(files.classes)
    config["alarm"] = alarm
    why = ("one false alarm a week at most, on the events' own times" if time_budget else
           f"a mean run length of {EVENTS_BUDGET} events per detector to a false alarm: "
           "events without times arrive all at once")
    header = (f"# Stream {files.name!r}, written by monitor's front door from "
              f"{files.n_calibration} held-out rows.\n# alarm: {why}.\n"
              "# Every other field has its default: README \"Stream configuration\".\n")
    files.config_path.write_text(header + yaml.safe_dump(config, sort_keys=False,
                                                         allow_unicode=True), encoding="utf-8")


def _check(config: Path) -> None:
    """Load the files as ``monitor run`` does: a refusal is raised now, not at run time."""
    from monitor.streams.setup import build_monitors, read_configs

    build_monitors(read_configs([str(config)]))


def _write_jsonl(path: Path, rows: Iterator[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":"), allow_nan=False) + "\n")
