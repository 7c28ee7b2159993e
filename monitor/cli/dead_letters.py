"""Listing stored dead letters and replaying them: ``monitor dead-letters list|replay``.

A record that fails validation (or names a stream that is not registered) is stored as a dead
letter with its payload (the first :attr:`~monitor.streams.records.DeadLetter.MAX_PAYLOAD` bytes).
:func:`replay_dead_letters` runs the stored payloads again through the same pipeline as live
events — the registered streams' validation and detectors, restored from their checkpoints —
in their original order (source, partition, offset, then row id):

- a record that is processed now leaves the dead-letter table in the same transaction that stores
  its results and the stream's new checkpoint, so replaying twice does nothing the second time
  and each record is counted once;
- a record that fails again stays, with its new reason (and stream) if they changed;
- a record the stream has already processed is skipped: it stays as it is, and the report says
  why (:class:`ReplaySkip`). Two rules, in this order: (1) a dead letter stored by a writer
  refused for its stream (reason ``stream 'S' is bound to …``, written by versions before
  issue 31) is never replayed, since the stream's bound writer reads that record itself; (2)
  an event whose stream, kind and id the stream's label join still knows — a prediction or
  label waiting for its counterpart, or a pair joined within the join's bounds
  (``labels.max_pending``, ``labels.max_delay_seconds``) — is refused by the stream itself
  (:attr:`~monitor.streams.monitor.StreamMonitor.refuse_processed`), in order, so a duplicate within
  the replay is caught too;
- replayed events take new event indexes, in replay order, after whatever the stream has
  processed so far (not the indexes they would have had live);
- no source offset moves; a partial OOD window is not closed (the stream goes on live).

One transaction per replay batch. Replay writes the streams' detector states: it must not run
while a worker processes the same streams. Each batch checks, in its transaction, that the
checkpoints it replaces are the ones it started from, and stops with
:class:`~monitor.db.replay_store.CheckpointMovedError` otherwise (the batches before it stay
stored).
On PostgreSQL the replay holds HTTP ingest's advisory lock throughout, so ``POST /events`` waits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from monitor.cli.runs import registered_monitors
from monitor.db.sink import DatabaseSink
from monitor.engine.batch import Batch
from monitor.engine.pipeline import BatchOutput, BatchStepError, Pipeline, RawRecord
from monitor.streams.monitor import ALREADY_PROCESSED
from monitor.streams.records import DeadLetter
from monitor.streams.setup import RunError

__all__ = [
    "DeadLetterFilter",
    "ReplayFailure",
    "ReplayReport",
    "ReplaySkip",
    "list_dead_letters",
    "replay_dead_letters",
]

log = logging.getLogger(__name__)

#: Dead letters per replay transaction.
REPLAY_BATCH = 500


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters to list or replay.

    ``stream`` matches the stream a dead letter was stored under and, for one stored without a
    stream (its stream was unknown, or it did not decode), the stream its payload names.
    ``source`` is a source's whole name (``file:/data/events.jsonl``, ``kafka:predictions``);
    ``since`` bounds the record time; ``reason_contains`` is case-insensitive.
    """

    stream: str | None = None
    source: str | None = None
    since: datetime | None = None
    reason_contains: str | None = None


@dataclass(frozen=True)
class ReplayFailure:
    """A dead letter whose record failed again (it stays in the table)."""

    id: int
    source: str
    partition: int
    offset: int
    stream: str | None
    reason: str
    previous_reason: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: :attr:`ReplaySkip.rule` of a dead letter stored by a writer refused for its stream.
REFUSED_WRITER = "refused_writer"
#: :attr:`ReplaySkip.rule` of an event the stream has already processed.
ALREADY_PROCESSED_RULE = "already_processed"


@dataclass(frozen=True)
class ReplaySkip:
    """A dead letter the replay did not process because the stream has processed its event
    already (it stays in the table, unchanged); ``rule`` is :data:`REFUSED_WRITER` or
    :data:`ALREADY_PROCESSED_RULE`."""

    id: int
    source: str
    partition: int
    offset: int
    stream: str | None
    rule: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ReplayReport:
    """What a replay did (or, with ``dry_run``, would do)."""

    dry_run: bool
    matched: int = 0  # dead letters selected by the filter
    replayed: int = 0  # processed now and removed from the table
    by_stream: dict[str, int] = field(default_factory=dict)  # replayed events per stream
    failures: list[ReplayFailure] = field(default_factory=list)
    skips: list[ReplaySkip] = field(default_factory=list)  # already processed: left as they are
    batches: int = 0  # transactions committed

    @property
    def skipped(self) -> int:
        return len(self.skips)

    def skipped_by(self) -> dict[tuple[str, str], int]:
        """Skipped dead letters per ``(rule, stream)`` (stream ``""`` when none is known)."""
        counts: dict[tuple[str, str], int] = {}
        for skip in self.skips:
            key = (skip.rule, skip.stream or "")
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "matched": self.matched,
            "replayed": self.replayed,
            "failed": len(self.failures),
            "skipped": self.skipped,
            "by_stream": dict(sorted(self.by_stream.items())),
            "batches": self.batches,
            "failures": [f.to_json() for f in self.failures],
            "skips": [s.to_json() for s in self.skips],
        }


# -- listing -------------------------------------------------------------------------------------


def list_dead_letters(
    sink: DatabaseSink, where: DeadLetterFilter, limit: int = 100
) -> list[dict[str, Any]]:
    """The ``limit`` newest dead letters matching ``where`` (by record time, then id)."""
    from monitor.db.models import DeadLetterRow

    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    query = _candidates(where).order_by(DeadLetterRow.ts.desc(), DeadLetterRow.id.desc())
    found: list[dict[str, Any]] = []
    with sink.sessions() as session:
        for row in session.scalars(query.execution_options(yield_per=500)):
            if _matches(row.stream, row.payload, where.stream):
                found.append(_letter_json(row))
                if len(found) >= limit:
                    break
    return found


def _letter_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "ts": row.ts.isoformat(),
        "ts_source": row.ts_source,
        "source": row.source_name or row.source,
        "partition": row.partition,
        "offset": row.offset,
        "stream": row.stream,
        "payload_stream": payload_stream(row.payload),
        "reason": row.reason,
        "payload": bytes(row.payload).decode("utf-8", errors="replace"),
        "created_at": row.created_at.isoformat(),
    }


def payload_stream(payload: bytes) -> str | None:
    """The ``stream`` a dead letter's payload names, if it is a JSON object that names one."""
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    stream = value.get("stream") if isinstance(value, dict) else None
    return stream if isinstance(stream, str) else None


def _candidates(where: DeadLetterFilter) -> Any:
    from monitor.db.queries import dead_letter_candidates_query

    return dead_letter_candidates_query(
        source=where.source,
        stream=where.stream,
        since=where.since,
        reason_contains=where.reason_contains,
    )


def _matches(stored: str | None, payload: bytes, stream: str | None) -> bool:
    if stream is None or stored == stream:
        return True
    return stored is None and payload_stream(bytes(payload)) == stream


# -- replay --------------------------------------------------------------------------------------


def replay_dead_letters(
    sink: DatabaseSink,
    where: DeadLetterFilter,
    *,
    dry_run: bool = False,
    max_event_bytes: int = 256 * 1024,
    batch_size: int = REPLAY_BATCH,
) -> ReplayReport:
    """Replay the dead letters matching ``where`` (see the module docstring).

    Raises
    ------
    RunError
        Nothing is registered, or ``where.stream`` is not registered (nothing is done).
    monitor.db.replay_store.CheckpointMovedError
        A stream's checkpoint changed under the replay (a worker processes it); the batches
        committed before stay stored, the failing one is not.
    """
    registered, stopped = sink.registered()
    if not registered and not stopped:
        raise RunError(
            "no stream is registered: nothing can be replayed (register the stream first with "
            "`monitor streams create CONFIG`)"
        )
    names = {config.name for config, _ in registered} | set(stopped)
    if where.stream is not None and where.stream not in names:
        raise RunError(
            f"stream {where.stream!r} is not registered: its dead letters would fail again "
            "(register it first with `monitor streams create CONFIG`)"
        )
    monitors = registered_monitors(sink, registered)
    # a stopped stream's letters stay, saying why
    pipeline = Pipeline(monitors, source="", max_event_bytes=max_event_bytes, stopped=stopped)
    report = ReplayReport(dry_run=dry_run)
    with _http_ingest_paused(sink, not dry_run):
        marks = _restore(sink, pipeline, set(names))
        ids = _ordered_ids(sink, where)
        report.matched = len(ids)
        for start in range(0, len(ids), batch_size):
            rows = _without_refused_writers(_rows(sink, ids[start:start + batch_size]), report)
            if not rows:
                continue
            records = [_record(row) for row in rows]
            out = _process(sink, pipeline, records)
            _settle(sink, pipeline, rows, out, marks, report)
    return report


@contextmanager
def _http_ingest_paused(sink: DatabaseSink, active: bool) -> Iterator[None]:
    """On PostgreSQL, hold the lock that serialises HTTP ingest (``POST /events`` restores and
    writes stream states too) from the replay's first read to its last commit."""
    if not active:
        yield
        return
    from monitor.api.ingest import ingest_lock  # one lock for every writer of HTTP ingest

    with ingest_lock(sink.engine):
        yield


def _ordered_ids(sink: DatabaseSink, where: DeadLetterFilter) -> list[int]:
    """Ids of the matching dead letters in replay order: source, partition, offset, id."""
    from monitor.db.models import DeadLetterRow

    query = _candidates(where).with_only_columns(
        DeadLetterRow.id, DeadLetterRow.stream, DeadLetterRow.payload
    ).order_by(
        DeadLetterRow.source, DeadLetterRow.partition, DeadLetterRow.offset, DeadLetterRow.id
    )
    with sink.sessions() as session:
        return [
            row.id
            for row in session.execute(query.execution_options(yield_per=1000))
            if _matches(row.stream, row.payload, where.stream)
        ]


def _rows(sink: DatabaseSink, ids: Sequence[int]) -> list[Any]:
    from sqlalchemy import select

    from monitor.db.models import DeadLetterRow

    with sink.sessions() as session:
        found = {r.id: r for r in session.scalars(select(DeadLetterRow).where(
            DeadLetterRow.id.in_(ids)
        ))}
        session.expunge_all()
    return [found[i] for i in ids if i in found]  # another replay may have removed some


def _refused_writer_stream(row: Any) -> str | None:
    """The stream of a dead letter stored by a writer refused for it (its reason says so), else
    None. Versions before issue 31 stored one for each record such a writer read; the stream's
    bound writer reads the same records itself."""
    stream = row.stream
    if stream is not None and row.reason.startswith(f"stream {stream!r} is bound to "):
        return str(stream)
    return None


def _without_refused_writers(rows: Sequence[Any], report: ReplayReport) -> list[Any]:
    """``rows`` less the dead letters of refused writers, which are skipped (rule 1)."""
    kept = []
    for row in rows:
        stream = _refused_writer_stream(row)
        if stream is None:
            kept.append(row)
            continue
        report.skips.append(ReplaySkip(
            row.id, row.source_name or row.source, row.partition, row.offset, stream,
            REFUSED_WRITER,
            f"stored by a writer refused for stream {stream!r}: the stream's own writer reads "
            "this record",
        ))
    return kept


def _record(row: Any) -> RawRecord:
    """The dead letter as a source record; its topic is the source's name (the pipeline keeps it
    as the dead letter's source, by which a record that fails again is found)."""
    return RawRecord(
        topic=row.source_name or row.source,
        partition=row.partition,
        offset=row.offset,
        value=bytes(row.payload),
        timestamp_ms=int(row.ts.timestamp() * 1000),
    )


def _restore(
    sink: DatabaseSink, pipeline: Pipeline, names: set[str]
) -> dict[str, tuple[int, int] | None]:
    """Load the streams' stored states (one without starts afresh), refusing what each has
    processed already (rule 2, module docstring); returns each one's ``(version,
    event_index)`` mark."""
    from monitor.db.store import load_state

    with sink.sessions() as session:
        stored = {name: load_state(session, name)
                  for name in pipeline.names() if name in names}
    pipeline.restore({name: None if c is None else c.state for name, c in stored.items()},
                     afresh=stored)
    pipeline.refuse_processed()
    return {name: None if c is None else (c.version, c.event_index) for name, c in stored.items()}


def _process(sink: DatabaseSink, pipeline: Pipeline, records: Sequence[RawRecord]) -> BatchOutput:
    """The batch through the pipeline; a stream whose batch step fails on a bug is reloaded and
    the batch is processed one record at a time (the failing record stays a dead letter with an
    ``internal error`` reason), as the worker does."""
    try:
        return pipeline.process(records)
    except BatchStepError as exc:
        log.exception("a stream's batch step failed during replay (%s)", exc)
    _restore(sink, pipeline, set(pipeline.names()))
    out = BatchOutput()
    for record in records:
        one = pipeline.process([record])
        out.add_records(one.alarms, one.trace_points, one.ood_windows,
                        one.performance_windows, one.alarm_evidence)
        out.dead_letters += one.dead_letters
        out.touched |= one.touched
        out.events += one.events
    return out


def _settle(
    sink: DatabaseSink,
    pipeline: Pipeline,
    rows: Sequence[Any],
    out: BatchOutput,
    marks: dict[str, tuple[int, int] | None],
    report: ReplayReport,
) -> None:
    """Sort the batch into replayed and failed dead letters; store it (unless a dry run)."""
    failed_again = {(d.source, d.partition, d.offset): d for d in out.dead_letters}
    replayed: list[int] = []
    failed: dict[int, tuple[str, str | None]] = {}
    streams: dict[int, str | None] = {}
    for row in rows:
        letter = failed_again.get((row.source_name or row.source, row.partition, row.offset))
        if letter is None:
            replayed.append(row.id)
            streams[row.id] = payload_stream(bytes(row.payload))
            continue
        stream = letter.stream if letter.stream is not None else row.stream
        if letter.reason.startswith(ALREADY_PROCESSED):  # rule 2: left as it is
            report.skips.append(ReplaySkip(
                row.id, row.source_name or row.source, row.partition, row.offset, stream,
                ALREADY_PROCESSED_RULE, letter.reason,
            ))
            continue
        reason = _reason(letter)
        if (reason, stream) != (row.reason, row.stream):
            failed[row.id] = (reason, stream)
        report.failures.append(ReplayFailure(
            row.id, row.source_name or row.source, row.partition, row.offset, stream, reason,
            row.reason,
        ))
    states = pipeline.states(sorted(out.touched))
    if report.dry_run:
        deleted = set(replayed)
    else:
        deleted = _persist(sink, out, states, marks, replayed, failed)
        report.batches += 1
        for name, state in states.items():
            marks[name] = (state["version"], state["event_index"])
    report.replayed += len(deleted)
    for row_id in replayed:
        named = streams[row_id]
        if row_id in deleted and named is not None:
            report.by_stream[named] = report.by_stream.get(named, 0) + 1


def _reason(letter: DeadLetter) -> str:
    if len(letter.payload) >= DeadLetter.MAX_PAYLOAD:
        return (f"{letter.reason} (the payload was stored cut to its first "
                f"{DeadLetter.MAX_PAYLOAD} bytes)")
    return letter.reason


def _persist(
    sink: DatabaseSink,
    out: BatchOutput,
    states: dict[str, dict[str, Any]],
    marks: dict[str, tuple[int, int] | None],
    replayed: list[int],
    failed: dict[int, tuple[str, str | None]],
) -> set[int]:
    """One transaction: results, checkpoints (checked against ``marks``), replayed dead letters
    deleted, failed ones updated; the ids actually deleted."""
    from monitor.db.replay_store import persist_replay

    # The records that failed again are updated in place (``failed``), not stored anew.
    batch = replace(Batch.of(out, states), dead_letters=())
    with sink.sessions() as session:
        return persist_replay(
            session,
            batch,
            expected={name: marks.get(name) for name in batch.checkpoints},
            replayed=replayed,
            failed=failed,
            route=sink.route,
        )
