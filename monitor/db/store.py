"""Writing a batch of results atomically, and reading back what a restart needs.

One batch = one transaction: the alarms, trace points, OOD windows (and their flags), dead letters,
detector checkpoints and the source offsets they correspond to are committed together or not at
all. A worker that crashes anywhere resumes from a consistent (state, offset) pair, so it
reprocesses exactly the events whose results were not committed.

Replays are idempotent: alarms (deterministic ids, unique per stream, detector and event index),
trace points, OOD windows and flags and dead letters (unique per source location) are inserted with
``ON CONFLICT DO NOTHING``; checkpoints and offsets are upserted. An alarm's revision (a record
with ``revision`` > 1) is inserted into ``alarm_revisions`` the same way and updates the alarm's
row only when it is newer than the stored one. Offsets only ever increase: a
batch carrying a smaller offset than the stored one raises :class:`StaleWriterError` and
writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from monitor.db.dialect import insert, insert_missing
from monitor.db.engine import SQLITE_BEGIN
from monitor.db.errors import InvalidRecordError, PersistenceError, StaleWriterError
from monitor.db.fencing import Writer, check_bindings, check_fences
from monitor.db.models import (
    AlarmRevisionRow,
    AlarmRow,
    AlertOutboxRow,
    Base,
    CheckpointRow,
    DeadLetterRow,
    IngestedEventRow,
    IngestRequestRow,
    OODFlagRow,
    OODWindowRow,
    PerformanceWindowRow,
    SourceOffsetRow,
    StreamRow,
    TracePointRow,
    event_key,
    source_key,
    utcnow,
)
from monitor.db.queries import (
    calibration_event,
    calibration_query,
    checkpoint_query,
    create_stream,
    get_stream,
    list_streams,
    offsets_query,
    update_stream,
)
from monitor.streams.config import StreamConfig
from monitor.streams.records import (
    Alarm,
    AlarmEvidence,
    DeadLetter,
    OODWindow,
    PerformanceWindow,
    SourceOffset,
    TracePoint,
)
from monitor.streams.state import Checkpoint

__all__ = [
    "CheckpointMovedError",
    "StoredStream",
    "checkpoint_mark",
    "load_offsets",
    "load_state",
    "load_streams",
    "persist_batch",
    "persist_replay",
    "stored_stream",
    "upsert_stream",
]

Row = dict[str, Any]
_NO_CHECKPOINTS: Mapping[str, Checkpoint] = MappingProxyType({})


def persist_batch(
    session: Session,
    *,
    alarms: Sequence[Alarm] = (),
    trace_points: Sequence[TracePoint] = (),
    ood_windows: Sequence[OODWindow] = (),
    performance_windows: Sequence[PerformanceWindow] = (),
    alarm_evidence: Sequence[AlarmEvidence] = (),
    checkpoints: Mapping[str, Checkpoint] = _NO_CHECKPOINTS,
    offsets: Sequence[SourceOffset] = (),
    dead_letters: Sequence[DeadLetter] = (),
    ingested: Sequence[tuple[str, str, str]] = (),
    ingest_request: tuple[str, str, Mapping[str, Any]] | None = None,
    writer: Writer | None = None,
    fences: Mapping[tuple[str, int], int] | None = None,
    streams: Iterable[str] = (),
    alerts: Sequence[Mapping[str, Any]] = (),
    route: Callable[[Sequence[Alarm]], Sequence[Mapping[str, Any]]] | None = None,
) -> None:
    """Store one batch's results in one transaction, and commit it.

    Parameters
    ----------
    session
        A session with no transaction in progress; ``persist_batch`` begins one, commits it on
        success and rolls it back on any error.
    alarms, trace_points, ood_windows, performance_windows, dead_letters
        New results; ones already stored (a replay) are skipped.
    alarm_evidence
        Evidence completing stored alarms (a feature attribution), merged into their
        ``evidence`` as a new revision of each; stored after this batch's alarms.
    checkpoints
        Detector state per stream name after this batch; replaces the stored one.
    offsets
        Next offset to read per source partition after this batch.
    ingested, ingest_request
        HTTP ingest only: the ``(stream, kind, id)`` of the events processed, and the request's
        ``(Idempotency-Key, body SHA-256, answer)``, committed with the results.
    writer, streams
        The source of writes (see :mod:`monitor.db.fencing`): every stream of the results and
        checkpoints, and ``streams``, must be bound to it (unbound ones are bound to it now).
    fences
        ``{(offset key, partition): epoch}``: the writer's fencing tokens, checked (and locked)
        in this transaction.
    alerts
        ``alert_outbox`` rows of the alarms (:func:`monitor.alerts.outbox_rows`): queued with
        them, so no alarm is stored without its deliveries; ones already queued are skipped.
    route
        The ``alert_outbox`` rows of alarms (:func:`monitor.alerts.outbox_rows` under a routing):
        applied to this batch's alarms and to those revised here (an attribution completing an
        alarm's evidence), queued in the same transaction.

    Raises
    ------
    StaleWriterError
        An offset is smaller than the stored one (nothing is written).
    InvalidRecordError
        A record cannot be stored as given (nothing is written).
    FencedError
        A fencing token was superseded (a zombie writer; nothing is written).
    StreamBoundError
        A stream is bound to another writer (nothing is written).

    Examples
    --------
    >>> import tempfile
    >>> from datetime import UTC, datetime
    >>> from monitor.db.engine import make_engine, session_factory
    >>> from monitor.db.migrate import upgrade
    >>> folder = tempfile.TemporaryDirectory()
    >>> url = f"sqlite:///{folder.name}/monitor.db"
    >>> upgrade(url)
    >>> engine = make_engine(url)
    >>> ts = datetime(2026, 11, 30, 12, tzinfo=UTC)
    >>> with session_factory(engine)() as session:
    ...     persist_batch(
    ...         session,
    ...         trace_points=[TracePoint("bikes", "conditional", 9, ts, 0.5, 0.2, 0.7, 9.2)],
    ...         offsets=[SourceOffset("file:events.jsonl", 0, 10)],
    ...     )
    ...     load_offsets(session, "file:events.jsonl")
    {0: 10}
    >>> engine.dispose(); folder.cleanup()
    """
    if session.in_transaction():
        raise PersistenceError(
            "persist_batch commits its own transaction: call it with a session that has none in "
            "progress (commit or roll back the session first)"
        )
    rows = _BatchRows.build(alarms, trace_points, ood_windows, checkpoints, offsets, dead_letters,
                            performance_windows)
    with session.begin():
        # SQLite: take the write lock now rather than fail upgrading a read transaction later.
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
        if writer is not None:
            bound = {*streams, *checkpoints, *(a.stream for a in alarms),
                     *(t.stream for t in trace_points), *(w.stream for w in ood_windows),
                     *(w.stream for w in performance_windows),
                     *(e.stream for e in alarm_evidence)}
            check_bindings(session, writer, bound)
            check_fences(session, fences or {}, writer.group)
        _check_offsets(session, offsets)
        for model, model_rows in rows.inserts():
            insert_missing(session, model, model_rows)
        _revise_alarms(session, rows.revised)
        completed = _merge_evidence(session, alarm_evidence, utcnow())
        _queue_alerts(session, [*alerts, *(route([*alarms, *completed]) if route else ())])
        _upsert_checkpoints(session, rows.checkpoints)
        _upsert_offsets(session, rows.offsets)
        now = utcnow()
        if ingested:
            keyed = [
                {"stream": s, "kind": k, "event_id": event_key(i), "created_at": now}
                for s, k, i in ingested
            ]
            insert_missing(session, IngestedEventRow, keyed)
        if ingest_request is not None:
            key, digest, answer = ingest_request
            session.execute(insert(session, IngestRequestRow), [
                {"key": key, "body_sha256": digest, "response": dict(answer), "created_at": now}
            ])


def load_state(session: Session, stream: str) -> Checkpoint | None:
    """The stream's stored checkpoint, or ``None`` if it has none."""
    with _read(session):
        row = session.scalars(checkpoint_query(stream)).one_or_none()
        if row is None:
            return None
        return Checkpoint.decode(row.stream, row.version, row.event_index, row.state, row.arrays)


def load_offsets(session: Session, source: str) -> dict[int, int]:
    """Next offset to read per partition of ``source`` (partitions never stored are absent)."""
    with _read(session):
        return {row.partition: row.offset for row in session.scalars(offsets_query(source))}


def upsert_stream(
    session: Session, config: StreamConfig, calibration: Sequence[Mapping[str, Any]]
) -> None:
    """Register a stream, or replace its configuration and calibration events, and commit."""
    with _read(session):
        exists = get_stream(session, config.name) is not None
    if exists:
        update_stream(session, config, calibration)
    else:
        create_stream(session, config, calibration)


@dataclass(frozen=True)
class StoredStream:
    """A registered stream as stored: its configuration, calibration events (wire format), the
    configuration's version and its features' order (``None``: list features)."""

    config: dict[str, Any]
    calibration: list[dict[str, Any]]
    version: int
    feature_names: list[str] | None


def stored_stream(session: Session, row: StreamRow) -> StoredStream:
    """``row`` with its calibration events, read in the session's transaction."""
    events = [calibration_event(r) for r in session.scalars(calibration_query(row.name))]
    return StoredStream(row.config, events, int(row.version), row.feature_names)


def load_streams(session: Session) -> list[StoredStream]:
    """Every registered stream as stored, by name."""
    with _read(session):
        events: dict[str, list[dict[str, Any]]] = {}
        for row in session.scalars(calibration_query()):
            events.setdefault(row.stream, []).append(calibration_event(row))
        return [
            StoredStream(s.config, events.get(s.name, []), int(s.version), s.feature_names)
            for s in list_streams(session)
        ]


def stream_versions(session: Session) -> dict[str, int]:
    """Every registered stream's configuration version, by name (a light query: the worker
    asks it every few seconds to pick up streams registered or updated while it runs)."""
    with _read(session):
        return {name: int(version) for name, version in session.execute(
            select(StreamRow.name, StreamRow.version)
        )}


def load_stream(session: Session, name: str) -> StoredStream | None:
    """One registered stream as stored, or None."""
    with _read(session):
        row = session.get(StreamRow, name)
        return None if row is None else stored_stream(session, row)


@contextmanager
def _read(session: Session) -> Iterator[None]:
    """Read in the session's transaction, closing it afterwards if the read opened it (so that
    ``persist_batch`` can follow on the same session)."""
    opened = not session.in_transaction()
    try:
        yield
    finally:
        if opened:
            session.rollback()


@dataclass(slots=True)
class _BatchRows:
    """A batch turned into row dicts, validated before any write."""

    alarms: list[Row]
    alarm_revisions: list[Row]
    revised: list[Row]
    trace_points: list[Row]
    ood_windows: list[Row]
    ood_flags: list[Row]
    dead_letters: list[Row]
    checkpoints: list[Row]
    offsets: list[Row]
    performance_windows: list[Row]

    @classmethod
    def build(
        cls,
        alarms: Sequence[Alarm],
        trace_points: Sequence[TracePoint],
        ood_windows: Sequence[OODWindow],
        checkpoints: Mapping[str, Checkpoint],
        offsets: Sequence[SourceOffset],
        dead_letters: Sequence[DeadLetter],
        performance_windows: Sequence[PerformanceWindow] = (),
    ) -> _BatchRows:
        now = utcnow()
        return cls(
            alarms=[_alarm_row(a, now) for a in alarms if a.revision == 1],
            alarm_revisions=[_alarm_revision_row(a, now) for a in alarms],
            revised=[_alarm_row(a, now) for a in alarms if a.revision > 1],
            trace_points=[_trace_row(t, now) for t in trace_points],
            ood_windows=[_ood_window_row(w, now) for w in ood_windows],
            ood_flags=[_ood_flag_row(w, e) for w in ood_windows for e in w.flagged_ids],
            dead_letters=[_dead_letter_row(d, now) for d in dead_letters],
            checkpoints=[_checkpoint_row(s, c, now) for s, c in checkpoints.items()],
            offsets=_offset_rows(offsets, now),
            performance_windows=[_performance_row(w) for w in performance_windows],
        )

    def inserts(self) -> Iterable[tuple[type[Base], list[Row]]]:
        """Insert-if-absent tables in foreign-key order, with their rows."""
        yield AlarmRow, self.alarms
        yield AlarmRevisionRow, self.alarm_revisions
        yield TracePointRow, self.trace_points
        yield OODWindowRow, self.ood_windows
        yield OODFlagRow, self.ood_flags
        yield DeadLetterRow, self.dead_letters
        yield PerformanceWindowRow, self.performance_windows


def _queue_alerts(session: Session, alerts: Sequence[Mapping[str, Any]]) -> None:
    """Insert outbox rows not queued yet (unique per idempotency key and receiver)."""
    insert_missing(session, AlertOutboxRow, alerts)


def _revise_alarms(session: Session, rows: list[Row]) -> None:
    """Bring each revised alarm's row to its revision (a replayed older one changes nothing)."""
    for row in rows:
        session.execute(
            update(AlarmRow)
            .where(AlarmRow.id == row["id"], AlarmRow.revision < row["revision"])
            .values(kind=row["kind"], evidence=row["evidence"], revision=row["revision"],
                    revised_at=row["revised_at"])
        )


def _check_offsets(session: Session, offsets: Sequence[SourceOffset]) -> None:
    """Raise if any offset is below the stored one (locking the stored rows on PostgreSQL)."""
    stored: dict[tuple[str, int], int] = {}
    for source in sorted({o.source for o in offsets}):
        query = offsets_query(source).with_for_update()  # by the source's key
        stored.update({(source, r.partition): r.offset for r in session.scalars(query)})
    for o in offsets:
        previous = stored.get((o.source, o.partition))
        if previous is not None and o.offset < previous:
            raise StaleWriterError(o.source, o.partition, previous, o.offset)
        stored[(o.source, o.partition)] = o.offset


def _upsert_checkpoints(session: Session, rows: list[Row]) -> None:
    if not rows:
        return
    stmt = insert(session, CheckpointRow)
    columns = ("version", "event_index", "state", "arrays", "updated_at")
    stmt = stmt.on_conflict_do_update(
        index_elements=["stream"], set_={c: stmt.excluded[c] for c in columns}
    )
    session.execute(stmt, rows)


def _upsert_offsets(session: Session, rows: list[Row]) -> None:
    if not rows:
        return
    stmt = insert(session, SourceOffsetRow)
    # The guard keeps offsets monotonic even against a writer that raced past _check_offsets.
    stmt = stmt.on_conflict_do_update(
        index_elements=["source", "partition"],
        set_={
            "offset": stmt.excluded.offset,
            "source_name": stmt.excluded.source_name,
            "updated_at": stmt.excluded.updated_at,
        },
        where=SourceOffsetRow.offset <= stmt.excluded.offset,
    )
    session.execute(stmt, rows)


# --- records to rows ----------------------------------------------------------------------------


def _alarm_row(alarm: Alarm, now: datetime) -> Row:
    for name in ("statistic", "threshold"):
        if math.isnan(getattr(alarm, name)):
            raise InvalidRecordError(f"alarm {alarm.id} ({alarm.stream}) has a NaN {name}")
    return {
        "id": alarm.id,
        "stream": alarm.stream,
        "detector": alarm.detector,
        "kind": alarm.kind,
        "event_id": alarm.event_id,
        "event_index": alarm.event_index,
        "ts": alarm.ts,
        "changepoint": alarm.changepoint,
        "statistic": alarm.statistic,
        "threshold": alarm.threshold,
        "rule": alarm.rule,
        "evidence": alarm.evidence,
        "created_at": now,
        "revision": alarm.revision,
        "revised_at": alarm.revised_at,
    }


def _alarm_revision_row(alarm: Alarm, now: datetime) -> Row:
    return {
        "alarm_id": alarm.id,
        "revision": alarm.revision,
        "kind": alarm.kind,
        "evidence": alarm.evidence,
        "revised_at": alarm.revised_at,
        "created_at": now,
    }


def _trace_row(point: TracePoint, now: datetime) -> Row:
    # SQLite turns NaN into NULL by itself; doing it here makes PostgreSQL agree.
    return {
        "stream": point.stream,
        "detector": point.detector,
        "event_index": point.event_index,
        "ts": point.ts,
        "log_martingale": _nan_to_none(point.log_martingale),
        "p_value": _nan_to_none(point.p_value),
        "log_statistic": _nan_to_none(point.log_statistic),
        "log_threshold": _nan_to_none(point.log_threshold),
        "weights_ess": _nan_to_none(point.weights_ess),
        "config_version": point.config_version,
        "created_at": now,
    }


def _span(window: OODWindow | PerformanceWindow) -> Row:
    """The columns a window of a stream's events has, OOD or performance."""
    return {
        "stream": window.stream,
        "window_index": window.window_index,
        "start_index": window.start_index,
        "end_index": window.end_index,
        "ts": window.ts,
        "n": window.n,
    }


def _ood_window_row(window: OODWindow, now: datetime) -> Row:
    return {
        **_span(window),
        "n_flagged": window.n_flagged,
        "threshold": _nan_to_none(window.threshold),
        "rule": window.rule,
        "alpha": window.alpha,
        "created_at": now,
    }


def _performance_row(window: PerformanceWindow) -> Row:
    metrics = {}
    for name, value in window.metrics.items():
        if not math.isfinite(value):
            raise InvalidRecordError(
                f"performance window {window.window_index} of {window.stream}: metric {name} "
                f"is {value} (metrics must be finite)"
            )
        metrics[name] = float(value)
    return {**_span(window), "metrics": metrics}


def _merge_evidence(
    session: Session, updates: Sequence[AlarmEvidence], now: datetime
) -> list[Alarm]:
    """Merge each update into its stored alarm's evidence (keys it names are replaced) as a new
    revision of the alarm (one more ``revision``, ``revised_at`` = the update's event time, else
    ``now``, a row of
    ``alarm_revisions``), so that receivers are sent the completed evidence; returns the revised
    alarms. An update the alarm already holds (a replayed batch) changes nothing; an alarm not
    stored (deleted by retention) is skipped."""
    revised = []
    for item in updates:
        row = session.get(AlarmRow, item.alarm_id, with_for_update=True)
        if row is None or all(row.evidence.get(k) == v for k, v in item.evidence.items()):
            continue
        row.evidence = {**row.evidence, **item.evidence}
        row.revision += 1
        row.revised_at = item.ts or now
        session.add(AlarmRevisionRow(alarm_id=row.id, revision=row.revision, kind=row.kind,
                                     evidence=row.evidence, revised_at=row.revised_at,
                                     created_at=now))
        revised.append(_alarm_of(row))
    session.flush()
    return revised


def _alarm_of(row: AlarmRow) -> Alarm:
    return Alarm(
        stream=row.stream, detector=row.detector, kind=row.kind, event_id=row.event_id,
        event_index=row.event_index, ts=row.ts, changepoint=row.changepoint,
        statistic=row.statistic, threshold=row.threshold, rule=row.rule,
        evidence=row.evidence, revision=row.revision, revised_at=row.revised_at,
    )


def _ood_flag_row(window: OODWindow, event_id: str) -> Row:
    key = event_key(event_id)
    return {"stream": window.stream, "window_index": window.window_index, "event_id": key,
            "full_event_id": None if key == event_id else event_id}


def _dead_letter_row(letter: DeadLetter, now: datetime) -> Row:
    return {
        "source": source_key(letter.source),
        "source_name": letter.source,
        "partition": letter.partition,
        "offset": letter.offset,
        "reason": letter.reason,
        "payload": bytes(letter.payload[: DeadLetter.MAX_PAYLOAD]),
        "stream": letter.stream,
        "ts": letter.ts,
        "ts_source": letter.ts_source,
        "created_at": now,
    }


def _checkpoint_row(stream: str, checkpoint: Checkpoint, now: datetime) -> Row:
    if checkpoint.stream != stream:
        raise InvalidRecordError(
            f"checkpoint of stream {checkpoint.stream!r} was passed under key {stream!r}"
        )
    text, blob = checkpoint.encode()
    return {
        "stream": stream,
        "version": checkpoint.version,
        "event_index": checkpoint.event_index,
        "state": text,
        "arrays": blob,
        "updated_at": now,
    }


def _offset_rows(offsets: Sequence[SourceOffset], now: datetime) -> list[Row]:
    latest: dict[tuple[str, int], int] = {}
    for o in offsets:
        if o.offset < 0:
            raise InvalidRecordError(f"offset of {o.source} partition {o.partition} is negative")
        latest[(o.source, o.partition)] = o.offset
    return [
        {"source": source_key(s), "source_name": s, "partition": p, "offset": v, "updated_at": now}
        for (s, p), v in latest.items()
    ]


def _nan_to_none(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value



# --- dead-letter replay -------------------------------------------------------------------------


class CheckpointMovedError(PersistenceError):
    """A stream's checkpoint changed between the replay's load and its write (a worker is
    processing the stream): the replay batch was not stored."""

    def __init__(self, stream: str, expected: tuple[int, int] | None,
                 found: tuple[int, int] | None) -> None:
        def show(mark: tuple[int, int] | None) -> str:
            return "no checkpoint" if mark is None else f"event index {mark[1]}"

        super().__init__(
            f"stream {stream!r}: its checkpoint moved from {show(expected)} to {show(found)} "
            "while dead letters were being replayed (a worker is processing it); nothing of this "
            "replay batch was stored: stop the worker of this stream and replay again"
        )
        self.stream = stream


def checkpoint_mark(session: Session, stream: str) -> tuple[int, int] | None:
    """``(version, event_index)`` of the stream's stored checkpoint, or ``None``."""
    with _read(session):
        row = session.execute(
            select(CheckpointRow.version, CheckpointRow.event_index).where(
                CheckpointRow.stream == stream
            )
        ).one_or_none()
        return None if row is None else (row.version, row.event_index)


def persist_replay(
    session: Session,
    *,
    alarms: Sequence[Alarm] = (),
    trace_points: Sequence[TracePoint] = (),
    ood_windows: Sequence[OODWindow] = (),
    performance_windows: Sequence[PerformanceWindow] = (),
    alarm_evidence: Sequence[AlarmEvidence] = (),
    checkpoints: Mapping[str, Checkpoint] = _NO_CHECKPOINTS,
    expected: Mapping[str, tuple[int, int] | None] = MappingProxyType({}),
    replayed: Sequence[int] = (),
    failed: Mapping[int, tuple[str, str | None]] = MappingProxyType({}),
    alerts: Sequence[Mapping[str, Any]] = (),
    route: Callable[[Sequence[Alarm]], Sequence[Mapping[str, Any]]] | None = None,
) -> set[int]:
    """Store one batch of replayed dead letters in one transaction, and commit it.

    The results and checkpoints are written as :func:`persist_batch` writes them (no source
    offset moves); in the same transaction the dead letters whose record was processed
    (``replayed``: row ids) are deleted, and those that failed again (``failed``: row id →
    ``(reason, stream)``) get their new reason and stream. ``expected`` holds, per stream
    whose checkpoint is written, the ``(version, event_index)`` the replay started from
    (``None``: no checkpoint): if the stored one differs (another writer moved it), raises
    :class:`CheckpointMovedError` and writes nothing.

    Returns the ids of the dead-letter rows deleted (a row another replay deleted already is
    not among them).
    """
    if session.in_transaction():
        raise PersistenceError(
            "persist_replay commits its own transaction: call it with a session that has none in "
            "progress (commit or roll back the session first)"
        )
    rows = _BatchRows.build(alarms, trace_points, ood_windows, checkpoints, (), (),
                            performance_windows)
    with session.begin():
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
        for stream in sorted(checkpoints):
            query = select(CheckpointRow.version, CheckpointRow.event_index).where(
                CheckpointRow.stream == stream
            )
            row = session.execute(query.with_for_update()).one_or_none()
            found = None if row is None else (row.version, row.event_index)
            if found != expected.get(stream):
                raise CheckpointMovedError(stream, expected.get(stream), found)
        for model, model_rows in rows.inserts():
            insert_missing(session, model, model_rows)
        _revise_alarms(session, rows.revised)
        completed = _merge_evidence(session, alarm_evidence, utcnow())
        _queue_alerts(session, [*alerts, *(route([*alarms, *completed]) if route else ())])
        _upsert_checkpoints(session, rows.checkpoints)
        deleted: set[int] = set()
        ids = list(replayed)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            locked = select(DeadLetterRow.id).where(DeadLetterRow.id.in_(chunk)).with_for_update()
            present = set(session.scalars(locked))
            if present:
                session.execute(delete(DeadLetterRow).where(DeadLetterRow.id.in_(present)))
            deleted |= present
        for row_id, (reason, stream_name) in failed.items():
            session.execute(
                update(DeadLetterRow)
                .where(DeadLetterRow.id == row_id)
                .values(reason=reason, stream=stream_name)
            )
    return deleted
