"""The per-record pipeline: decode → validate → route by stream → detectors → result records.

Pure computation over records handed in by a source; no I/O. The worker (``monitor.engine.worker``)
persists what :meth:`Pipeline.process` returns together with the source offsets.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from monitor.errors import MonitorError
from monitor.streams.events import Event, InvalidEvent, decode_batch, epoch_time
from monitor.streams.monitor import FeatureOrderError, StreamMonitor
from monitor.streams.records import (
    Alarm,
    AlarmEvidence,
    DeadLetter,
    OODWindow,
    PerformanceWindow,
    TracePoint,
)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """What the pipeline needs of a source record (``connectors.Record`` fits this shape)."""

    topic: str
    partition: int
    offset: int
    value: bytes
    timestamp_ms: int | None = None


@dataclass(slots=True)
class BatchOutput:
    """Everything one batch produced, to be persisted in one transaction."""

    alarms: list[Alarm] = field(default_factory=list)
    trace_points: list[TracePoint] = field(default_factory=list)
    ood_windows: list[OODWindow] = field(default_factory=list)
    performance_windows: list[PerformanceWindow] = field(default_factory=list)
    alarm_evidence: list[AlarmEvidence] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    events: int = 0
    #: Records of streams bound to another writer, by stream, that the worker took out of the
    #: dead letters (they are not stored: monitor.engine.worker).
    refused: dict[str, int] = field(default_factory=dict)

    def add_records(
        self,
        alarms: list[Alarm],
        trace_points: list[TracePoint],
        ood_windows: list[OODWindow],
        performance_windows: Sequence[PerformanceWindow] = (),
        alarm_evidence: Sequence[AlarmEvidence] = (),
    ) -> None:
        self.alarms += alarms
        self.trace_points += trace_points
        self.ood_windows += ood_windows
        self.performance_windows += performance_windows
        self.alarm_evidence += alarm_evidence

    def read(self, records: Iterable[Any]) -> None:
        """Advance the next offset of each partition past ``records``."""
        for record in records:
            key = (record.topic, record.partition)
            self.offsets[key] = max(self.offsets.get(key, 0), record.offset + 1)


log = logging.getLogger(__name__)


class BatchStepError(MonitorError):
    """A stream's batch step failed on something other than the data (a bug): its state may be
    half-advanced. The worker reloads the streams from the last checkpoint and processes the
    records one at a time, where the failing record becomes an ``internal error`` dead letter
    and the others go on, as on the per-event path."""

    def __init__(self, stream: str, cause: Exception) -> None:
        super().__init__(f"stream {stream!r}: {type(cause).__name__}: {cause}")
        self.stream = stream


class Pipeline:
    """Routes raw records to the monitors of their streams.

    Parameters
    ----------
    streams
        The monitored streams by name. Records of any other stream go to the dead letters.
    source
        Name of the source, stored with dead letters (e.g. ``file:/data/events.jsonl``).
    max_event_bytes
        Larger records go to the dead letters unread.
    stopped
        Registered streams that cannot be run as stored: name → (configuration version, why);
        their events go to the dead letters saying why (:meth:`stop`).
    warned_without_ts
        The streams whose events without ``ts`` were logged already, shared with the caller's
        other pipelines (HTTP ingest builds one per request); by default this pipeline's own:
        one log line per stream per run.
    """

    def __init__(
        self,
        streams: Mapping[str, StreamMonitor],
        source: str = "",
        max_event_bytes: int = 256 * 1024,
        stopped: Mapping[str, tuple[int, str]] | None = None,
        warned_without_ts: set[str] | None = None,
    ) -> None:
        self.streams = dict(streams)
        #: Streams that cannot be run as stored
        #: (:class:`~monitor.streams.monitor.FeatureOrderError`):
        #: name → (configuration version, why). Their events go to the dead letters saying why.
        self.stopped: dict[str, tuple[int, str]] = {}
        self.source = source
        self.max_event_bytes = max_event_bytes
        self._warned_without_ts = set() if warned_without_ts is None else warned_without_ts
        for name, (version, reason) in (stopped or {}).items():
            self.stop(name, version, reason)

    def stop(self, name: str, version: int, reason: str) -> None:
        """Stop monitoring ``name`` (its events become dead letters with ``reason``; logged
        once, as one line); the other streams go on."""
        self.streams.pop(name, None)
        if self.stopped.get(name) != (version, reason):
            log.error("%s", reason)
        self.stopped[name] = (version, reason)

    def resume(self, name: str, monitor: StreamMonitor, state: dict[str, Any] | None) -> bool:
        """Monitor ``name`` with ``monitor``, resumed from ``state`` (none: from its
        calibration); a state it cannot resume stops the stream instead (:meth:`stop`).
        Whether it runs."""
        try:
            if state is not None:
                monitor.load_state(state)
        except FeatureOrderError as exc:
            self.stop(name, monitor.config_version, str(exc))
            return False
        self.stopped.pop(name, None)
        self.streams[name] = monitor
        return True

    def drop(self, name: str) -> StreamMonitor | None:
        """Stop monitoring ``name`` for now (its events become ``unknown stream`` dead letters,
        e.g. while the stream is bound to another writer); its monitor, or None."""
        return self.streams.pop(name, None)

    def add(self, name: str, monitor: StreamMonitor) -> None:
        """Monitor ``name`` with ``monitor`` (as it is), unless it is monitored already: the
        way back for a stream dropped by :meth:`drop`."""
        self.streams.setdefault(name, monitor)

    def monitor(self, name: str) -> StreamMonitor | None:
        """The monitor of the stream ``name``, or None if it is not monitored."""
        return self.streams.get(name)

    def names(self) -> list[str]:
        """The monitored streams' names, sorted."""
        return sorted(self.streams)

    def restore(
        self, states: Mapping[str, dict[str, Any] | None], afresh: Iterable[str] = ()
    ) -> None:
        """Resume each monitored stream of ``states`` from its stored state (``None``: none is
        stored); one without a state goes on as it is or, if it is in ``afresh``, starts again
        from its calibration. A state a stream cannot resume stops it (:meth:`resume`)."""
        fresh = set(afresh)
        for name, state in states.items():
            monitor = self.streams[name]
            if state is None and name in fresh:
                monitor = StreamMonitor(monitor.config, monitor.calibration, monitor.config_version)
            self.resume(name, monitor, state)

    def refuse_processed(self) -> None:
        """Make every monitored stream refuse the events it has processed already (a dead-letter
        replay: :attr:`StreamMonitor.refuse_processed`)."""
        for monitor in self.streams.values():
            monitor.refuse_processed = True

    def states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The detector states of the streams ``names``, to checkpoint."""
        return {name: self.streams[name].state_dict() for name in names}

    def _not_monitored(self, stream: str) -> str | None:
        """Why events of ``stream`` are not monitored here (``None``: they are)."""
        if stream in self.streams:
            return None
        stopped = self.stopped.get(stream)
        return unknown_stream_reason(stream) if stopped is None else stopped[1]

    def process(self, records: Sequence[Any]) -> BatchOutput:
        """Process records in order; bad records become dead letters, never exceptions.

        The batch is decoded at once, routed by stream, and each stream takes its share in one
        :meth:`StreamMonitor.step`.
        """
        out = BatchOutput()
        decoded = decode_batch([record.value for record in records], self.max_event_bytes)
        routed: dict[str, tuple[list[int], list[Event]]] = {}
        dead: list[tuple[int, DeadLetter]] = []
        for k, (record, event) in enumerate(zip(records, decoded, strict=True)):
            if isinstance(event, InvalidEvent):
                reason = str(event)
            elif (why := self._not_monitored(event.stream)) is not None:
                reason = why
            else:
                positions, events = routed.setdefault(event.stream, ([], []))
                positions.append(k)
                events.append(event)
                continue
            known = None if isinstance(event, InvalidEvent) else event
            dead.append((k, dead_letter(self.source, record, reason, known)))
        for name, (positions, events) in routed.items():
            monitor = self.streams[name]

            def fallback(i: int, positions: list[int] = positions) -> datetime:
                return _record_time(records[positions[i]])

            # A poll of one record (the worker isolating records after a failed step, or a
            # trickle of events) keeps the stream's state to undo a failed step.
            before = monitor.state_dict() if len(records) == 1 else None
            without_ts = monitor.events_without_ts
            try:
                rejected = monitor.step(events, fallback)
            except Exception as exc:  # a bug, not the data: the worker isolates the records
                if before is None:
                    raise BatchStepError(name, exc) from exc
                log.exception("internal error on %s", _where(records[positions[0]]))
                monitor.load_state(before)
                rejected = [(0, _internal_error(exc))]
            for i, reason in rejected:
                record = records[positions[i]]
                dead.append((positions[i], dead_letter(
                    self.source, record, reason, events[i], name
                )))
            if monitor.events_without_ts > without_ts:
                self._warn_without_ts(name)
            if len(rejected) < len(events):
                out.events += len(events) - len(rejected)
                out.touched.add(name)
                out.add_records(*monitor.drain(), *monitor.drain_explanations())
        dead.sort(key=lambda item: item[0])
        out.dead_letters = [letter for _, letter in dead]
        out.read(records)
        return out

    def _warn_without_ts(self, name: str) -> None:
        if name in self._warned_without_ts:
            return
        self._warned_without_ts.add(name)
        log.warning(
            "stream %r: events without ts, timed by the broker or at ingest; its alarm budget "
            "runs them on its event-count threshold, not on the stream's event rate (counted "
            "in GET /streams/%s and monitor_events_without_ts_total; logged once per run)",
            name, name,
        )

    def flush(self) -> BatchOutput:
        """Close partial OOD windows (end of a finite source)."""
        out = BatchOutput()
        for name, monitor in self.streams.items():
            if monitor.flush():
                out.touched.add(name)
                out.add_records(*monitor.drain(), *monitor.drain_explanations())
        return out

def unknown_stream_reason(stream: str) -> str:
    """The dead-letter reason of an event of a stream the pipeline does not monitor."""
    return f"unknown stream {stream!r}"


def _internal_error(exc: Exception) -> str:
    """The dead-letter reason of a record whose processing failed on a bug."""
    return f"internal error: {type(exc).__name__}: {exc}"


def _where(record: Any) -> str:
    return f"{record.topic}:{record.partition}@{record.offset}"


def _record_time(record: Any) -> datetime:
    """Event time fallback: the record's broker timestamp, else ingest time."""
    return record_time(record)[0]


def record_time(record: Any, event: Any = None) -> tuple[datetime, str]:
    """A dead letter's time and where it came from (docs/persistence.md, "One time base"): the
    event's own ``ts`` where it can be read (``"event"``: from the decoded event, else from the
    raw record's ``ts`` field), else the broker's timestamp (``"broker"``), else now
    (``"ingest"``)."""
    ts = getattr(event, "ts", None)
    if ts is None:
        ts = _raw_ts(getattr(record, "value", None))
    if isinstance(ts, datetime):
        return (ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)), "event"
    ts_ms = getattr(record, "timestamp_ms", None)
    if ts_ms is not None and ts_ms > 0:
        return datetime.fromtimestamp(ts_ms / 1000.0, tz=UTC), "broker"
    return datetime.now(UTC), "ingest"


def _raw_ts(value: Any) -> datetime | None:
    """The ``ts`` field of a record that did not decode as an event, when it reads as one."""
    if not isinstance(value, bytes | bytearray) or len(value) > DeadLetter.MAX_PAYLOAD * 64:
        return None
    try:
        data = json.loads(value)
        ts = data.get("ts") if isinstance(data, dict) else None
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            return epoch_time(ts)
        if not isinstance(ts, str):
            return None
        parsed = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return parsed if math.isfinite(parsed.timestamp()) else None


def dead_letter(
    source: str, record: Any, reason: str, event: Any = None, stream: str | None = None
) -> DeadLetter:
    """The dead letter of ``record`` from ``source`` (a source's ``name``), for ``reason``; the
    one builder of the pipeline's dead letters and the worker's (a record whose results cannot
    be stored). ``event`` (the record decoded, if it did) and ``stream`` (the monitored stream
    it names, if any) add its time and its stream.

    Examples
    --------
    >>> record = RawRecord("predictions", 0, 7, b"{not json")
    >>> dead_letter("kafka:predictions", record, "not valid JSON").source
    'kafka:predictions'
    """
    # Keyed like the stored offsets: "<scheme>:<topic>" (``kafka:predictions``,
    # ``file:/data/events.jsonl``), or the bare topic for sources without a name (``http``).
    scheme = source.split(":", 1)[0]
    ts, ts_source = record_time(record, event)
    return DeadLetter(
        source=f"{scheme}:{record.topic}" if scheme and record.topic else (source or record.topic),
        partition=record.partition,
        offset=record.offset,
        reason=reason,
        payload=bytes((record.value or b"")[: DeadLetter.MAX_PAYLOAD]),
        ts=ts,
        stream=stream,
        ts_source=ts_source,
    )
