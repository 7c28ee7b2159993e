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
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, text, tuple_
from sqlalchemy.orm import Session

from monitor.db.models import (
    IngestedEventRow,
    IngestRequestRow,
    StreamRow,
    event_key,
    utcnow,
)
from monitor.db.sink import DatabaseSink
from monitor.db.store import load_offsets, stored_stream
from monitor.engine.batch import Batch, Fencing
from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.errors import MonitorError
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.monitor import FeatureOrderError, StreamMonitor
from monitor.streams.records import Alarm, SourceOffset
from monitor.streams.setup import stored_calibration
from monitor.streams.state import decode_state, encode_state

__all__ = [
    "HTTP_SOURCE",
    "ClientGoneError",
    "IdempotencyKeyReusedError",
    "IngestQueueFullError",
    "IngestResult",
    "Ingestor",
    "build_monitor",
]

log = logging.getLogger(__name__)

#: Source name (and topic) of events that arrive over HTTP; dead letters carry it.
HTTP_SOURCE = "http"
#: Key of the PostgreSQL advisory lock that serialises HTTP ingest across API replicas.
_ADVISORY_KEY = int.from_bytes(
    hashlib.sha256(b"monitor:http-ingest").digest()[:8], "big", signed=True
)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one batch did: items accepted, dead letters by item index, alarms raised, items
    skipped as already ingested (by index), and whether this is a stored answer replayed for a
    retried ``Idempotency-Key``."""

    accepted: int
    dead_letters: list[tuple[int, str]] = field(default_factory=list)
    alarms: list[Alarm] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    alarm_json: list[dict[str, Any]] = field(default_factory=list)
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "dead_letters": [[i, r] for i, r in self.dead_letters],
            "duplicates": self.duplicates,
            "alarms": self.alarm_json,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IngestResult:
        return cls(
            accepted=data["accepted"],
            dead_letters=[(int(i), str(r)) for i, r in data["dead_letters"]],
            duplicates=list(data["duplicates"]),
            alarm_json=list(data["alarms"]),
            replayed=True,
        )


class IdempotencyKeyReusedError(MonitorError, ValueError):
    """An ``Idempotency-Key`` sent again with another body (409)."""


class ClientGoneError(MonitorError):
    """The client left before its batch was processed: nothing was committed."""


class IngestQueueFullError(MonitorError):
    """More requests wait than the queue holds (429 with ``Retry-After``)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the ingest queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


def build_monitor(
    config: StreamConfig, calibration: Calibration, config_version: int = 1
) -> StreamMonitor:
    """A fresh monitor of a configuration version; raises ``ValueError`` or ``LookupError`` if the
    configuration and calibration cannot be monitored together."""
    return StreamMonitor(config, calibration, config_version)


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
        max_queue: int = 16,
        dedup_seconds: float = 7 * 24 * 3600.0,
    ) -> None:
        self.sink = sink
        self.max_event_bytes = max_event_bytes
        self.on_alarm = on_alarm
        self.max_queue = max_queue
        self.dedup_seconds = dedup_seconds
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._queued = 0
        self._queue_lock = threading.Lock()
        self._batch_seconds = 0.1  # moving average, for Retry-After
        self._pruned_at = 0.0
        #: Streams whose events without ts have been logged: once per stream per API process.
        self._warned_without_ts: set[str] = set()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """A place in the bounded queue of batches (waiting or processing) for the duration of
        the block; :class:`IngestQueueFullError` when all ``max_queue`` are taken."""
        with self._queue_lock:
            if self._queued >= self.max_queue:
                wait = self._queued * self._batch_seconds
                raise IngestQueueFullError(max(1, int(wait + 0.999)))
            self._queued += 1
        try:
            yield
        finally:
            with self._queue_lock:
                self._queued -= 1

    def ingest(
        self,
        items: Sequence[Any],
        idempotency_key: str | None = None,
        client_gone: Callable[[], bool] | None = None,
    ) -> IngestResult:
        """Process ``items`` (decoded JSON values) in order and persist the results.

        Items whose ``(stream, kind, id)`` an earlier batch processed (within the
        de-duplication window) are skipped and listed in ``duplicates``. With an
        ``idempotency_key``, a key already stored answers its stored result and changes nothing
        (another body under the same key raises :class:`IdempotencyKeyReusedError`).
        ``client_gone`` is asked once the batch's turn comes, before anything is processed: if
        it answers true, :class:`ClientGoneError` is raised and nothing is committed.
        """
        payloads = [json.dumps(item).encode("utf-8") for item in items]
        digest = hashlib.sha256(b"\n".join(payloads)).hexdigest()
        now_ms = int(time.time() * 1000)
        with self._exclusive():
            if idempotency_key is not None:
                stored = self._stored_answer(idempotency_key, digest)
                if stored is not None:
                    return stored
            if client_gone is not None and client_gone():
                raise ClientGoneError("the client left before its batch was processed")
            started = time.monotonic()
            try:
                request = None if idempotency_key is None else (idempotency_key, digest)
                result = self._process(items, payloads, now_ms, request)
            except BaseException:
                self._cache.clear()  # a monitor may hold half-processed state
                raise
            self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * (time.monotonic() - started)
            self._prune()
        if self.on_alarm is not None:
            for alarm in result.alarms:
                self.on_alarm(alarm)
        return result

    def _process(
        self,
        items: Sequence[Any],
        payloads: list[bytes],
        now_ms: int,
        request: tuple[str, str] | None,
    ) -> IngestResult:
        keys = [_event_key(item) for item in items]
        seen = self._already_ingested({k for k in keys if k is not None})
        fresh = [i for i, k in enumerate(keys) if k is None or k not in seen]
        duplicates = [i for i, k in enumerate(keys) if k is not None and k in seen]
        pipeline = self._restore(_stream_names([items[i] for i in fresh]))
        base = self._next_offset()
        records = [
            RawRecord(HTTP_SOURCE, 0, base + n, payloads[i], now_ms) for n, i in enumerate(fresh)
        ]
        out = pipeline.process(records)
        states = pipeline.states(sorted(out.touched))
        offsets = [SourceOffset(HTTP_SOURCE, 0, base + len(records))]
        dead = [(fresh[d.offset - base], d.reason) for d in out.dead_letters]
        dead_items = {i for i, _ in dead}
        ingested = sorted({k for i in fresh if (k := keys[i]) is not None and i not in dead_items})
        result = IngestResult(
            accepted=out.events,
            dead_letters=dead,
            alarms=list(out.alarms),
            duplicates=duplicates,
            alarm_json=[a.to_json() for a in out.alarms],
        )
        answer = None if request is None else (*request, result.to_json())
        # One writer per stream: a stream bound to a consumer group (or a file source) refuses
        # the whole request (StreamBoundError, 409); the first request binds unbound streams.
        self.sink.persist(Batch.of(
            out, states, offsets=offsets, ingested=ingested, ingest_request=answer,
            fencing=Fencing(HTTP_SOURCE, "", streams=sorted(out.touched)),
        ))
        return result

    def _already_ingested(self, keys: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        if not keys:
            return set()
        found: set[tuple[str, str, str]] = set()
        ordered = sorted(keys)
        with self.sink.sessions() as session:
            for start in range(0, len(ordered), 500):
                chunk = ordered[start : start + 500]
                wanted = {(s, k, event_key(i)): (s, k, i) for s, k, i in chunk}
                query = select(
                    IngestedEventRow.stream, IngestedEventRow.kind, IngestedEventRow.event_id
                ).where(
                    tuple_(
                        IngestedEventRow.stream, IngestedEventRow.kind, IngestedEventRow.event_id
                    ).in_(list(wanted))
                )
                found |= {wanted[tuple(row)] for row in session.execute(query)}  # type: ignore[index]
        return found

    def _stored_answer(self, key: str, digest: str) -> IngestResult | None:
        with self.sink.sessions() as session:
            row = session.get(IngestRequestRow, key)
            if row is None:
                return None
            if row.body_sha256 != digest:
                raise IdempotencyKeyReusedError(
                    f"Idempotency-Key {key!r} was used for another body; use a new key per batch"
                )
            return IngestResult.from_json(row.response)

    def _prune(self) -> None:
        """Forget ingested events and stored answers older than the window (once a minute)."""
        now = time.monotonic()
        if now - self._pruned_at < 60:
            return
        self._pruned_at = now
        cutoff = utcnow() - timedelta(seconds=self.dedup_seconds)
        with self.sink.sessions() as session, session.begin():
            session.execute(delete(IngestedEventRow).where(IngestedEventRow.created_at < cutoff))
            session.execute(delete(IngestRequestRow).where(IngestRequestRow.created_at < cutoff))

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._lock, ingest_lock(self.sink.engine):
            yield

    def _next_offset(self) -> int:
        with self.sink.sessions() as session:
            return load_offsets(session, HTTP_SOURCE).get(0, 0)

    def _restore(self, names: set[str]) -> Pipeline:
        """A pipeline of the registered streams among ``names``, in their stored state; those
        that cannot run as stored (:class:`FeatureOrderError`) are stopped in it, so that their
        events are dead letters saying why."""
        pipeline = Pipeline({}, source="", max_event_bytes=self.max_event_bytes,
                            warned_without_ts=self._warned_without_ts)
        with self.sink.sessions() as session:
            rows = list(session.scalars(select(StreamRow).where(StreamRow.name.in_(sorted(names)))))
            for row in rows:
                cached = self._cache.get(row.name)
                if cached is None or cached.updated_at != row.updated_at:
                    try:
                        self._cache[row.name] = self._build(session, row)
                    except FeatureOrderError as exc:
                        self._cache.pop(row.name, None)
                        pipeline.stop(row.name, row.version, str(exc))
        for row in rows:
            cached = self._cache.get(row.name)
            if cached is None:
                continue
            state = self.sink.load_state(row.name)
            if state is None:
                state = decode_state(*cached.fresh_state)
            pipeline.resume(row.name, cached.monitor, state)
        return pipeline

    def _build(self, session: Session, row: StreamRow) -> _Cached:
        stored = stored_stream(session, row)
        config = StreamConfig.model_validate(stored.config)
        # The stored version: a state written under an older one is carried over by
        # StreamMonitor.load_state (the detectors restart from this version's calibration).
        monitor = build_monitor(config, stored_calibration(stored), row.version)
        return _Cached(row.updated_at, monitor, encode_state(monitor.state_dict()))


def _event_key(item: Any) -> tuple[str, str, str] | None:
    """``(stream, kind, id)`` of an item that has them (labels reuse their prediction's id)."""
    if not isinstance(item, dict):
        return None
    values = (item.get("stream"), item.get("kind"), item.get("id"))
    if all(isinstance(v, str) and v for v in values):
        return values  # type: ignore[return-value]
    return None


def _stream_names(items: Sequence[Any]) -> set[str]:
    return {
        item["stream"]
        for item in items
        if isinstance(item, dict) and isinstance(item.get("stream"), str)
    }


@contextmanager
def ingest_lock(engine: Any) -> Iterator[None]:
    """Hold the database-wide lock of HTTP ingest's writers (a PostgreSQL advisory lock; on
    SQLite the database's own write lock serialises them): ingest processes and a dead-letter
    replay write stream states one at a time."""
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_KEY})
        connection.commit()
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_KEY})
            connection.commit()
