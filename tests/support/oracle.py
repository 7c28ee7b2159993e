"""The per-event reference path: a stream and a pipeline driven one event at a time.

Production runs :meth:`StreamMonitor.step` over whole batches (``monitor.engine.pipeline``). The
tests compare it with this independent computation, the way the worker processed events before
the batch path (issue #13): each event validated on its own, each detector stepped once per
event (:meth:`StreamDetectors.update_covariate` / ``update_conditional``), each record built
from the detectors' state right after the update that produced it. It writes the same records
into the same stream, so ``drain``, ``state_dict`` and checkpoints are compared as they are.

It uses the stream's checks and record builders that ``step`` uses too (``_feature_list``,
``_check_label``, ``_alarm_record``, ``_window_record``, …); what it computes per event —
updates, traces, alarms, revisions, attribution windows, OOD windows — is its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from monitor.engine.pipeline import (
    BatchOutput,
    Pipeline,
    _internal_error,
    _record_time,
    _where,
    dead_letter,
)
from monitor.streams.events import Event, InvalidEvent, LabelEvent, PredictionEvent, decode_event
from monitor.streams.factory import conditional_score
from monitor.streams.join import Joined, Pending
from monitor.streams.monitor import StreamMonitor
from monitor.streams.monitor_records import finite, opens_attribution
from monitor.streams.records import TracePoint

__all__ = ["PerEventPipeline", "PerEventStream"]

log = logging.getLogger(__name__)

_NO_ROWS = np.empty((0, 0), np.float64)


class PerEventStream:
    """Feeds a :class:`StreamMonitor` one event at a time (the reference of ``step``).

    Parameters
    ----------
    monitor
        The stream; its state and records are the ones updated.
    """

    def __init__(self, monitor: StreamMonitor) -> None:
        self.monitor = monitor
        # The checked features of the last prepared batch's events, by id(event); the event is
        # kept beside them so that its id cannot be reused while the entry lives.
        self._prepared: dict[int, tuple[PredictionEvent, tuple[np.ndarray, Any]]] = {}

    def prepare(self, events: Sequence[Event]) -> None:
        """Score the inputs of a batch's prediction events at once before they are observed
        (:meth:`CovariateMonitor.prepare`: no state change, identical results); events that
        do not fit the stream are left to :meth:`observe` to reject."""
        rows = []
        self._prepared = prepared = {}
        for event in events:
            if isinstance(event, PredictionEvent):
                try:
                    x = _features(self.monitor, event)
                except InvalidEvent:
                    continue
                prepared[id(event)] = (event, x)
                rows.append(x[0])
        if rows:
            self.monitor.detectors.covariate.prepare(_encoded(self.monitor, np.vstack(rows)))

    def observe(self, event: Event, fallback_ts: datetime) -> None:
        """Validate ``event`` against the stream, then update its monitors.

        Raises :class:`InvalidEvent` before any state changes when the event does not fit.
        """
        ts = event.ts or fallback_ts
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        if isinstance(event, PredictionEvent):
            self._observe_prediction(event, ts, untimed=event.ts is None)
        else:
            self._observe_label(event, ts)
        self.monitor.last_ts = ts
        self.monitor.events_without_ts += event.ts is None
        for joined in self.monitor.join.drain():
            self._observe_joined(joined)

    def _observe_prediction(self, event: PredictionEvent, ts: datetime, untimed: bool) -> None:
        """(``untimed``: the event had no ts: ``ts`` is the fallback time, which the label join
        and the records read and the time budgets do not)"""
        m = self.monitor
        found = self._prepared.pop(id(event), None)
        x, read = found[1] if found is not None and found[0] is event else _features(m, event)
        prediction = m._prediction(event)
        scale = m._scale(event)
        xe = _encoded(m, x.reshape(1, -1))[0]  # what the detectors and OOD scorers read
        inputs = _ood_inputs(m, event, xe)
        if event.label is not None:
            m._check_label(event.label)
        m._check_not_processed("prediction", event.id)
        if m.join.waiting(event.id) is not None:
            raise InvalidEvent(
                f"duplicate prediction id {event.id!r} (still waiting for its label)"
            )
        index = m.event_index
        m.event_index += 1
        seconds = math.nan if untimed else ts.timestamp()
        m.detectors.update_covariate(xe, index, None if untimed else seconds)
        m._attributed += [(d, ts) for d in m.attribution.add(x.reshape(1, -1), index)]
        self._collect_alarms(event.id, index, ts)
        if m._retired:
            self._revise_retired(xe.reshape(1, -1), [index], _NO_ROWS, [], ts)
        quality = m._quality_matrix(x.reshape(1, -1), [] if read is None else [(0, read.quality)])
        keys = [] if read is None or not (read.unknown or read.absent) else [
            (0, read.unknown, read.absent)]
        m._alarms += [a for _, a in m.quality.update(quality, [index], [event.id], [ts], keys,
                                                     [seconds])]
        self._trace("covariate", index, ts)
        if m.ood is not None:
            m.ood.add(event.id, inputs)
            for decision in m.ood.windows():
                m._windows.append(m._window_record(decision, ts))
        seconds = ts.timestamp()
        # its support flag waits with it, as in the batch path (its label scores it again here)
        m.join.add_prediction(
            Pending(event.id, index, seconds, tuple(x.tolist()), prediction, scale,
                    untimed=untimed, outside=m.detectors.covariate.outside_support)
        )
        if event.label is not None:
            m.join.add_label(event.id, event.label, seconds)

    def _observe_label(self, event: LabelEvent, ts: datetime) -> None:
        m = self.monitor
        m._check_label(event.label)
        m._check_not_processed("label", event.id)
        if m.join.marked:
            m._check_made_under(m.join.waiting(event.id))
        m.join.add_label(event.id, event.label, ts.timestamp())

    def _observe_joined(self, joined: Joined) -> None:
        # One time base: the conditional trace and its alarms carry the prediction's event time.
        m = self.monitor
        pending = joined.pending
        ts = datetime.fromtimestamp(pending.ts, UTC)
        score = conditional_score(m.config, pending.prediction, joined.label, pending.scale)
        m.detectors.update_conditional(
            _encoded(m, np.asarray(pending.features, np.float64).reshape(1, -1))[0], score,
            pending.event_index, None if pending.untimed else ts.timestamp()
        )
        m.labeled += 1
        self._collect_alarms(pending.event_id, pending.event_index, ts)
        if m._retired:
            row = _encoded(m, np.asarray(pending.features, np.float64).reshape(1, -1))
            self._revise_retired(_NO_ROWS, [], row, [pending.event_index], ts)
        self._trace("conditional", pending.event_index, ts)
        m._add_performance(
            m.performance.add([pending.prediction], [joined.label], [pending.event_index], [ts])
        )

    def _collect_alarms(self, event_id: str, index: int, ts: datetime) -> None:
        m = self.monitor
        for raised in m.detectors.new_alarms:
            alarm = m._alarm_record(raised, event_id, index, ts)
            m._alarms.append(alarm)
            if raised.revision == 1:
                m._traces.append(_trace_point(m, raised.detector, index, ts))
            if opens_attribution(alarm):
                m.attribution.open(alarm.id)

    def _revise_retired(
        self, X_cov: np.ndarray, cov_index: list[int], X_cond: np.ndarray,
        cond_index: list[int], ts: datetime,
    ) -> None:
        """The retired detectors' update by one prediction or one labelled event (the other
        empty)."""
        m = self.monitor
        width = m.calibration.n_features
        X_cov, X_cond = X_cov.reshape(-1, width), X_cond.reshape(-1, width)
        for retired in m._retired:
            for _, _, raised in retired.detectors.track_pending(X_cov, cov_index, X_cond,
                                                                cond_index):
                alarm = m._retired_revision(raised, ts)
                m._alarms.append(alarm)
                if opens_attribution(alarm):
                    m.attribution.open(alarm.id, *retired.window)
        m._retired = [r for r in m._retired if r.detectors.pending]

    def _trace(self, detector: str, index: int, ts: datetime) -> None:
        m = self.monitor
        count = m.event_index if detector == "covariate" else m.labeled
        if count % m.config.trace_every == 0:
            m._traces.append(_trace_point(m, detector, index, ts))


class PerEventPipeline(Pipeline):
    """A :class:`Pipeline` whose :meth:`process` decodes and observes each record on its own
    (:class:`PerEventStream`), as the worker did before the batch path: the reference the
    batch path must equal, record for record."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._per_event: dict[str, PerEventStream] = {}

    def process(self, records: Sequence[Any]) -> BatchOutput:
        out = BatchOutput()
        decoded = [(record, self._decode(record)) for record in records]
        self._prepare([event for _, event in decoded])
        for record, event in decoded:
            self._observe(record, event, out)
        out.read(records)
        for name in out.touched:
            stream = self.streams[name]
            out.add_records(*stream.drain(), *stream.drain_explanations())
        return out

    def _stream(self, name: str) -> PerEventStream:
        """The per-event driver of the stream monitored as ``name`` now (a configuration update
        replaces the monitor)."""
        monitor = self.streams[name]
        driver = self._per_event.get(name)
        if driver is None or driver.monitor is not monitor:
            driver = self._per_event[name] = PerEventStream(monitor)
        return driver

    def _decode(self, record: Any) -> Event | Exception:
        try:
            return decode_event(record.value, self.max_event_bytes)
        except Exception as exc:  # InvalidEvent, or an internal error reported in _observe
            return exc

    def _prepare(self, decoded: list[Event | Exception]) -> None:
        by_stream: dict[str, list[Event]] = {}
        for event in decoded:
            if not isinstance(event, Exception):
                by_stream.setdefault(event.stream, []).append(event)
        for name, events in by_stream.items():
            if name in self.streams:
                self._stream(name).prepare(events)

    def _observe(self, record: Any, event: Event | Exception, out: BatchOutput) -> None:
        stream = None  # known once the event decodes: stored with its dead letter, if any
        known = None if isinstance(event, Exception) else event
        try:
            if isinstance(event, Exception):
                raise event
            why = self._not_monitored(event.stream)
            if why is not None:
                raise InvalidEvent(why)
            stream = event.stream
            # The record's time is only the fallback of an event without ``ts``.
            self._stream(stream).observe(
                event, _record_time(record) if event.ts is None else event.ts
            )
        except InvalidEvent as exc:
            out.dead_letters.append(dead_letter(self.source, record, str(exc), known, stream))
            return
        except Exception as exc:  # the worker never dies on data: keep the record and go on
            log.exception("internal error on %s", _where(record))
            reason = _internal_error(exc)
            out.dead_letters.append(dead_letter(self.source, record, reason, known, stream))
            return
        out.events += 1
        out.touched.add(event.stream)


def _features(monitor: StreamMonitor, event: PredictionEvent) -> tuple[np.ndarray, Any]:
    """The event's code row and what the schema read of it (None: today's numeric path)."""
    codes, read = monitor._read_features(event)
    return np.asarray(codes, dtype=float), read


def _encoded(monitor: StreamMonitor, C: np.ndarray) -> np.ndarray:
    """Code rows as the detectors and the OOD scorers read them (docs/tabular.md)."""
    return monitor.calibration.schema.encode(C)


def _ood_inputs(
    monitor: StreamMonitor, event: PredictionEvent, x: np.ndarray
) -> dict[str, np.ndarray]:
    kinds = () if monitor.ood is None else monitor.ood.input_kinds
    inputs = {"features": x}
    for kind, value in monitor._ood_lists(event, kinds).items():
        inputs[kind] = np.asarray(value, dtype=float)
    return inputs


def _trace_point(monitor: StreamMonitor, detector: str, index: int, ts: datetime) -> TracePoint:
    """The trace point of ``detector`` read from its state right after its update."""
    detectors = monitor.detectors
    tracked = detectors.covariate if detector == "covariate" else detectors.conditional
    ess = getattr(tracked, "weights_ess", None)
    return TracePoint(
        stream=monitor.name,
        detector=detector,
        event_index=index,
        ts=ts,
        log_martingale=finite(tracked.log_martingale),
        p_value=finite(tracked.p_value),
        log_statistic=finite(tracked.log_statistic),
        log_threshold=finite(math.log(tracked.threshold)),
        weights_ess=None if ess is None else finite(ess),
        config_version=monitor.config_version,
    )
