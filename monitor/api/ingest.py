"""``POST /events``: an HTTP batch through the worker's decode → validate → dead-letter path.

The database is the source of truth: before each batch the affected streams' detector state is
restored from their stored checkpoints, and the batch's results are written together with the new
checkpoints and the ``http`` source offset in one transaction (:meth:`DatabaseSink.persist`).
Batches are serialised: a lock inside the process, plus a PostgreSQL advisory lock held from the
restore to the commit so that several API replicas never fork a stream's state.

Each item becomes a record of topic ``http``, partition 0, at the next offset of that source
(stored with the batch), so dead letters of different requests never collide and a dead letter
can be traced to its request.

Do not feed the same stream from a running worker and from HTTP at the same time: the worker
keeps its state in memory between batches and would overwrite the checkpoints written here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from monitor.calibration import Calibration
from monitor.config import StreamConfig
from monitor.db.models import StreamRow
from monitor.db.repositories import CALIBRATION_FIELDS, calibration_query
from monitor.db.store import load_offsets
from monitor.pipeline import Pipeline, RawRecord
from monitor.records import Alarm, SourceOffset
from monitor.runner import DatabaseSink
from monitor.state import decode_state, encode_state
from monitor.stream import StreamMonitor

__all__ = ["HTTP_SOURCE", "IngestResult", "Ingestor", "build_monitor"]

log = logging.getLogger(__name__)

#: Source name (and topic) of events that arrive over HTTP; dead letters carry it.
HTTP_SOURCE = "http"
#: Key of the PostgreSQL advisory lock that serialises HTTP ingest across API replicas.
_ADVISORY_KEY = int.from_bytes(
    hashlib.sha256(b"monitor:http-ingest").digest()[:8], "big", signed=True
)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one batch did: items accepted, dead letters by item index, alarms raised."""

    accepted: int
    dead_letters: list[tuple[int, str]] = field(default_factory=list)
    alarms: list[Alarm] = field(default_factory=list)


def build_monitor(config: StreamConfig, calibration: Calibration) -> StreamMonitor:
    """A fresh monitor; raises ``ValueError`` or ``LookupError`` if the configuration and
    calibration cannot be monitored together."""
    return StreamMonitor(config, calibration)


@dataclass
class _Cached:
    """A stream's monitor object, reused across batches, and its state before any event."""

    updated_at: datetime
    monitor: StreamMonitor
    fresh_state: tuple[str, bytes | None]


class Ingestor:
    """Processes HTTP event batches against the registered streams.

    Parameters
    ----------
    sink
        Persistence of batch outputs and checkpoints.
    max_event_bytes
        Larger items become dead letters unread.
    on_alarm
        Called with each alarm after its batch is durable (webhooks).
    """

    def __init__(
        self,
        sink: DatabaseSink,
        max_event_bytes: int,
        on_alarm: Callable[[Alarm], None] | None = None,
    ) -> None:
        self.sink = sink
        self.max_event_bytes = max_event_bytes
        self.on_alarm = on_alarm
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}

    def ingest(self, items: Sequence[Any]) -> IngestResult:
        """Process ``items`` (decoded JSON values) in order and persist the results."""
        payloads = [json.dumps(item).encode("utf-8") for item in items]
        now_ms = int(time.time() * 1000)
        with self._exclusive():
            try:
                result = self._process(items, payloads, now_ms)
            except BaseException:
                self._cache.clear()  # a monitor may hold half-processed state
                raise
        if self.on_alarm is not None:
            for alarm in result.alarms:
                self.on_alarm(alarm)
        return result

    def _process(self, items: Sequence[Any], payloads: list[bytes], now_ms: int) -> IngestResult:
        monitors = self._restore(_stream_names(items))
        base = self._next_offset()
        records = [RawRecord(HTTP_SOURCE, 0, base + i, p, now_ms) for i, p in enumerate(payloads)]
        out = Pipeline(monitors, source="", max_event_bytes=self.max_event_bytes).process(records)
        states = {name: monitors[name].state_dict() for name in sorted(out.touched)}
        offsets = [SourceOffset(HTTP_SOURCE, 0, base + len(records))]
        self.sink.persist(out, offsets, states)
        dead = [(d.offset - base, d.reason) for d in out.dead_letters]
        return IngestResult(accepted=out.events, dead_letters=dead, alarms=list(out.alarms))

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._lock:
            if self.sink.engine.dialect.name != "postgresql":
                yield
                return
            with self.sink.engine.connect() as connection:
                connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_KEY})
                connection.commit()
                try:
                    yield
                finally:
                    connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_KEY})
                    connection.commit()

    def _next_offset(self) -> int:
        with self.sink.sessions() as session:
            return load_offsets(session, HTTP_SOURCE).get(0, 0)

    def _restore(self, names: set[str]) -> dict[str, StreamMonitor]:
        """Monitors of the registered streams among ``names``, in their stored state."""
        with self.sink.sessions() as session:
            rows = list(session.scalars(select(StreamRow).where(StreamRow.name.in_(sorted(names)))))
            for row in rows:
                cached = self._cache.get(row.name)
                if cached is None or cached.updated_at != row.updated_at:
                    self._cache[row.name] = self._build(session, row)
        monitors = {}
        for row in rows:
            cached = self._cache[row.name]
            state = self.sink.load_state(row.name)
            if state is None:
                state = decode_state(*cached.fresh_state)
            cached.monitor.load_state(state)
            monitors[row.name] = cached.monitor
        return monitors

    def _build(self, session: Session, row: StreamRow) -> _Cached:
        config = StreamConfig.model_validate(row.config)
        events = session.scalars(calibration_query(row.name))
        rows = [
            {name: getattr(e, name) for name in CALIBRATION_FIELDS if getattr(e, name) is not None}
            for e in events
        ]
        monitor = build_monitor(config, Calibration.from_rows(rows))
        return _Cached(row.updated_at, monitor, encode_state(monitor.state_dict()))


def _stream_names(items: Sequence[Any]) -> set[str]:
    return {
        item["stream"]
        for item in items
        if isinstance(item, dict) and isinstance(item.get("stream"), str)
    }
