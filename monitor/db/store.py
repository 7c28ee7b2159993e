"""Writing a batch atomically, and reading back what a restart needs.

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

The records' rows are built (and validated) in :mod:`monitor.db.rows`; the dead-letter replay's
transaction, which shares :func:`write_results`, is :mod:`monitor.db.replay_store`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from monitor.db.checkpoint_store import load_checkpoint_row, write_checkpoints
from monitor.db.dialect import insert, insert_missing
from monitor.db.engine import SQLITE_BEGIN
from monitor.db.errors import PersistenceError, StaleWriterError
from monitor.db.fencing import Writer, check_writer
from monitor.db.models import (
    AlarmRevisionRow,
    AlarmRow,
    AlertOutboxRow,
    CheckpointRow,
    IngestedEventRow,
    IngestRequestRow,
    SourceOffsetRow,
    StreamRow,
    event_key,
    source_key,
    utcnow,
)
from monitor.db.queries import (
    calibration_event,
    calibration_query,
    create_stream,
    get_stream,
    list_streams,
    offsets_query,
    update_stream,
)
from monitor.db.rows import BatchRows, Row
from monitor.engine.batch import Batch
from monitor.streams.config import StreamConfig
from monitor.streams.records import Alarm, AlarmEvidence, SourceOffset
from monitor.streams.state import Checkpoint

__all__ = [
    "Route",
    "StoredStream",
    "checkpoint_mark",
    "idle",
    "load_offsets",
    "load_state",
    "load_streams",
    "persist_batch",
    "stored_stream",
    "upsert_stream",
    "write_results",
    "writing",
]

#: The ``alert_outbox`` rows of alarms (:func:`monitor.alerts.outbox_rows` under a routing).
Route = Callable[[Sequence[Alarm]], Sequence[Mapping[str, Any]]]


def persist_batch(
    session: Session,
    batch: Batch,
    *,
    alerts: Sequence[Mapping[str, Any]] = (),
    route: Route | None = None,
) -> None:
    """Store one batch in one transaction, and commit it.

    Parameters
    ----------
    session
        A session with no transaction in progress; ``persist_batch`` begins one, commits it on
        success and rolls it back on any error.
    batch
        The results (ones already stored, a replay, are skipped; its ``alarm_evidence`` is
        merged into the stored alarms' ``evidence`` as a new revision of each, after its
        alarms), the checkpoints (each replaces the stored one), the next offsets to read, the
        fencing and, for HTTP ingest, the event keys and the request's answer
        (:class:`~monitor.engine.batch.Batch`). Every stream the batch writes must be bound to
        its fencing's writer (unbound ones are bound to it now), and the fencing tokens are
        checked (and locked) in this transaction (see :mod:`monitor.db.fencing`).
    alerts
        ``alert_outbox`` rows of the alarms (:func:`monitor.alerts.outbox_rows`): queued with
        them, so no alarm is stored without its deliveries; ones already queued are skipped.
    route
        The ``alert_outbox`` rows of alarms: applied to this batch's alarms and to those revised
        here (an attribution completing an alarm's evidence), queued in the same transaction.

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
    >>> from monitor.streams.records import TracePoint
    >>> folder = tempfile.TemporaryDirectory()
    >>> url = f"sqlite:///{folder.name}/monitor.db"
    >>> upgrade(url)
    >>> engine = make_engine(url)
    >>> ts = datetime(2026, 11, 30, 12, tzinfo=UTC)
    >>> with session_factory(engine)() as session:
    ...     persist_batch(session, Batch(
    ...         trace_points=[TracePoint("bikes", "conditional", 9, ts, 0.5, 0.2, 0.7, 9.2)],
    ...         offsets=[SourceOffset("file:events.jsonl", 0, 10)],
    ...     ))
    ...     load_offsets(session, "file:events.jsonl")
    {0: 10}
    >>> engine.dispose(); folder.cleanup()
    """
    idle(session, "persist_batch")
    rows = BatchRows.of(batch)
    with writing(session):
        held = None
        if batch.fencing is not None:
            writer = Writer(source_key(batch.fencing.source), batch.fencing.group)
            held = check_writer(session, writer, batch.streams, batch.fencing.fences,
                                batch.checkpoints)
        _check_offsets(session, batch.offsets)
        write_results(session, batch, rows, alerts, route, held)
        _upsert_offsets(session, rows.offsets)
        _store_ingest(session, batch)


def idle(session: Session, what: str) -> None:
    """Raise :class:`PersistenceError` if ``session`` has a transaction in progress: ``what``
    commits its own."""
    if session.in_transaction():
        raise PersistenceError(
            f"{what} commits its own transaction: call it with a session that has none in "
            "progress (commit or roll back the session first)"
        )


@contextmanager
def writing(session: Session) -> Iterator[None]:
    """A write transaction on ``session`` (see :func:`idle`): committed at the end of the
    block, rolled back on any error."""
    with session.begin():
        # SQLite: take the write lock now rather than fail upgrading a read transaction later.
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
        yield


def write_results(
    session: Session,
    batch: Batch,
    rows: BatchRows,
    alerts: Sequence[Mapping[str, Any]] = (),
    route: Route | None = None,
    held: Mapping[str, str | None] | None = None,
) -> None:
    """Write ``batch``'s results (``rows``), its alarms' outbox rows and its checkpoints (their
    new pieces: :func:`~monitor.db.checkpoint_store.write_checkpoints`; ``held``: the stored
    checkpoints' ``chunks``, their rows locked already) in the session's transaction (no
    offsets: a dead-letter replay moves none)."""
    for model, model_rows in rows.inserts():
        insert_missing(session, model, model_rows)
    _revise_alarms(session, rows.revised)
    completed = _merge_evidence(session, batch.alarm_evidence, utcnow())
    _queue_alerts(session, [*alerts, *(route([*batch.alarms, *completed]) if route else ())])
    write_checkpoints(session, rows.checkpoints, rows.pieces, held)


def _store_ingest(session: Session, batch: Batch) -> None:
    """HTTP ingest's event keys and the request's answer, committed with its results."""
    now = utcnow()
    if batch.ingested:
        keyed = [
            {"stream": s, "kind": k, "event_id": event_key(i), "created_at": now}
            for s, k, i in batch.ingested
        ]
        insert_missing(session, IngestedEventRow, keyed)
    if batch.ingest_request is not None:
        key, digest, answer = batch.ingest_request
        session.execute(insert(session, IngestRequestRow), [
            {"key": key, "body_sha256": digest, "response": dict(answer), "created_at": now}
        ])



def load_state(session: Session, stream: str) -> Checkpoint | None:
    """The stream's stored checkpoint (with its pieces), or ``None`` if it has none."""
    with _read(session):
        found = load_checkpoint_row(session, stream)
        if found is None:
            return None
        row, pieces = found
        return Checkpoint.decode(row.stream, row.version, row.event_index, row.state, row.arrays,
                                 pieces)


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



def checkpoint_mark(session: Session, stream: str) -> tuple[int, int] | None:
    """``(version, event_index)`` of the stream's stored checkpoint, or ``None``."""
    with _read(session):
        row = session.execute(
            select(CheckpointRow.version, CheckpointRow.event_index).where(
                CheckpointRow.stream == stream
            )
        ).one_or_none()
        return None if row is None else (row.version, row.event_index)



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


