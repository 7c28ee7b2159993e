"""Retention: delete stored results older than each stream's policy, in small transactions.

A stream's ``retention`` (:class:`monitor.streams.config.RetentionConfig`) says how long its trace
points,
OOD windows (with their flags), performance windows, dead letters and acknowledged alarms are kept.
:func:`prune` applies every registered stream's policy; ``monitor db prune`` runs it once and
``monitor run`` runs it in the background between batches (``MONITOR_RETENTION_INTERVAL``).

- **Clocks.** Trace points, OOD windows and performance windows age on the stream's own event-time
  clock: a row goes when its ``ts`` is more than the policy's age before the newest ``ts`` of its
  kind for that stream. Replaying last year's data therefore keeps it, and a stream that stops
  sending keeps its last window of history. Dead letters age from when they were stored
  (``created_at``, wall clock: their ``ts`` mixes event, broker and ingest times, see
  ``ts_source``), acknowledged alarms from ``acknowledged_at`` (an operator's act). Unacknowledged
  alarms are never pruned. Dead letters without a stream (unparsable records) follow
  :data:`UNROUTED` policy.
- **Alarms keep their context.** Trace points whose event index lies within ``alarm_context``
  events of a kept alarm — from ``alarm_context`` before its changepoint (or its event, when it
  has none) to ``alarm_context`` after its event — are never pruned, nor are the performance
  windows overlapping that range, so the alarm's report can still draw the traces and the
  performance around it. Each delete transaction reads the alarms itself, under a lock that no
  alarm writer can pass until it commits (:func:`_kept_ranges`): an alarm stored by any other
  writer while a prune runs keeps every row of its context that was there when it was stored.
  Rows deleted before it was stored do not come back.
- **Bounded work, short locks.** Each transaction deletes about ``batch`` rows of one table for
  one stream (a contiguous range of event indexes, window indexes or ids, found by an indexed
  query; for trace points, the other detector's row at the range's last event index may come
  too, so at most ``batch + 1``), then commits; ``max_seconds`` bounds a whole call. A worker
  pruning in the background holds the database for one such transaction at a time.
- **Checkpoint pieces.** A checkpoint deletes the pieces its predecessor named and it does
  not; the pieces of a checkpoint row deleted by hand go here, in one transaction
  (:func:`monitor.db.checkpoint_store.prune_chunks`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import ColumnElement, CursorResult, Result, and_, delete, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from monitor.db.checkpoint_store import prune_chunks
from monitor.db.engine import SQLITE_BEGIN
from monitor.db.models import (
    AlarmRow,
    DeadLetterRow,
    OODWindowRow,
    PerformanceWindowRow,
    StreamRow,
    TracePointRow,
    utcnow,
)
from monitor.streams.config import RetentionConfig

__all__ = ["DEFAULT_BATCH", "UNROUTED", "PruneReport", "protected_ranges", "prune"]

#: Rows per delete transaction.
DEFAULT_BATCH = 5000
#: Policy of dead letters that belong to no stream (their record named none that could be read).
UNROUTED = RetentionConfig()


@dataclass
class PruneReport:
    """Rows deleted per table, and whether the call stopped early (time budget spent)."""

    deleted: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("trace_points", "ood_windows", "performance_windows", "dead_letters", "alarms",
             "checkpoint_chunks"), 0
        )
    )
    transactions: int = 0
    largest: int = 0  # most rows deleted by one transaction
    complete: bool = True

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def protected_ranges(
    alarms: Sequence[tuple[int, int | None]], context: int
) -> list[tuple[int, int]]:
    """Merged, sorted event-index ranges (inclusive) around alarms given as (event_index,
    changepoint).

    >>> protected_ranges([(500, 420), (900, None), (30, 0)], context=100)
    [(0, 130), (320, 600), (800, 1000)]
    """
    spans = sorted(
        (max(0, min(index, index if cp is None else cp) - context), index + context)
        for index, cp in alarms
    )
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _policies(session: Session) -> dict[str, RetentionConfig]:
    policies = {}
    for name, config in session.execute(select(StreamRow.name, StreamRow.config)):
        try:
            policies[name] = RetentionConfig.model_validate((config or {}).get("retention", {}))
        except ValidationError:  # registered before a stricter check: keep everything
            policies[name] = RetentionConfig(
                trace_points=None, ood_windows=None, dead_letters=None, acknowledged_alarms=None
            )
    return policies


def prune(
    sessions: sessionmaker[Session],
    *,
    batch: int = DEFAULT_BATCH,
    max_seconds: float | None = None,
    now: datetime | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PruneReport:
    """Apply every registered stream's retention policy; see the module docstring."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    now = now or utcnow()
    deadline = None if max_seconds is None else clock() + max_seconds
    report = PruneReport()
    with sessions() as session:
        policies = _policies(session)
    jobs: list[tuple[str, Iterator[Callable[[Session], int]]]] = []
    for stream, policy in sorted(policies.items()):
        if policy.acknowledged_alarms is not None:
            cut = now - timedelta(seconds=policy.acknowledged_alarms)
            jobs.append(("alarms", _alarm_batches(stream, cut, batch)))
        if policy.trace_points is not None:
            jobs.append(("trace_points", _trace_batches(sessions, stream, policy, batch)))
        if policy.ood_windows is not None:
            jobs.append(("ood_windows", _range_batches(
                sessions, OODWindowRow, OODWindowRow.window_index, stream, policy.ood_windows,
                batch)))
        if policy.performance_windows is not None:
            jobs.append(("performance_windows",
                         _performance_batches(sessions, stream, policy, batch)))
        if policy.dead_letters is not None:
            jobs.append(("dead_letters", _range_batches(
                sessions, DeadLetterRow, DeadLetterRow.id, stream, policy.dead_letters, batch,
                stored_before=now)))
    if UNROUTED.dead_letters is not None:
        jobs.append(("dead_letters", _range_batches(
            sessions, DeadLetterRow, DeadLetterRow.id, None, UNROUTED.dead_letters, batch,
            stored_before=now)))
    jobs.append(("checkpoint_chunks", iter([prune_chunks])))
    for table, steps in jobs:
        for step in steps:
            if deadline is not None and clock() >= deadline:
                report.complete = False
                return report
            with sessions() as session, session.begin():
                n = step(session)
            report.deleted[table] += n
            report.largest = max(report.largest, n)
            report.transactions += 1
    return report


def _alarm_batches(stream: str, cut: datetime, batch: int) -> Iterator[Callable[[Session], int]]:
    def step(session: Session) -> int:
        ids = session.scalars(
            select(AlarmRow.id)
            .where(AlarmRow.stream == stream, AlarmRow.acknowledged_at < cut)
            .order_by(AlarmRow.id)
            .limit(batch)
        ).all()
        if ids:
            session.execute(delete(AlarmRow).where(AlarmRow.id.in_(ids)))
        found[0] = len(ids)
        return len(ids)

    found = [batch]
    while found[0] >= batch:
        yield step


def _newest(session: Session, ts: InstrumentedAttribute[Any], where: ColumnElement[bool]) -> Any:
    return session.scalar(select(func.max(ts)).where(where))


def _kept_ranges(session: Session, stream: str, context: int) -> list[tuple[int, int]]:
    """The event-index ranges around the stream's stored alarms (:func:`protected_ranges`), read
    under a lock that keeps any other alarm from being stored until this transaction ends.

    Call it first in the transaction that deletes, so that no alarm can commit between this
    read and the delete. PostgreSQL: ``LOCK TABLE alarms IN SHARE MODE`` waits for every
    transaction that has written an alarm to end and makes every later alarm write (by any
    writer: worker, HTTP ingest, replay, fleet; they take ROW EXCLUSIVE) wait for ours; READ
    COMMITTED takes a snapshot per statement, so the ranges, read after the lock is granted,
    include every alarm committed before it. (A ``NOT EXISTS`` against alarms inside the DELETE
    alone would not do: its snapshot misses an alarm committed while the DELETE runs.) SQLite:
    ``BEGIN IMMEDIATE`` takes the database's single write lock, which every writer needs.
    """
    connection = session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"LOCK TABLE {AlarmRow.__tablename__} IN SHARE MODE")
    return protected_ranges(
        [tuple(r) for r in session.execute(  # type: ignore[misc]
            select(AlarmRow.event_index, AlarmRow.changepoint).where(AlarmRow.stream == stream)
        )],
        context,
    )


def _trace_batches(
    sessions: sessionmaker[Session], stream: str, policy: RetentionConfig, batch: int
) -> Iterator[Callable[[Session], int]]:
    """Ranges of event indexes of old trace points, skipping the kept alarms' context."""
    assert policy.trace_points is not None
    with sessions() as session:
        newest = _newest(session, TracePointRow.ts, TracePointRow.stream == stream)
        if newest is None:
            return
        cut = newest - timedelta(seconds=policy.trace_points)
    old = and_(TracePointRow.stream == stream, TracePointRow.ts < cut)
    start = -1
    while True:
        with sessions() as session:
            indexes = session.scalars(
                select(TracePointRow.event_index)
                .where(old, TracePointRow.event_index > start)
                .order_by(TracePointRow.event_index)
                .limit(batch)
            ).all()
        if not indexes:
            return
        lo, hi = indexes[0], indexes[-1]
        start = hi

        def step(session: Session, lo: int = lo, hi: int = hi) -> int:
            spans = _subtract((lo, hi), _kept_ranges(session, stream, policy.alarm_context))
            if not spans:
                return 0
            ranges = or_(*(TracePointRow.event_index.between(a, b) for a, b in spans))
            return _count(session.execute(delete(TracePointRow).where(old, ranges)))

        yield step
        if len(indexes) < batch:
            return


def _performance_batches(
    sessions: sessionmaker[Session], stream: str, policy: RetentionConfig, batch: int
) -> Iterator[Callable[[Session], int]]:
    """Batches of old performance windows, keeping every window that overlaps a kept alarm's
    context (its report shows the performance before and after it)."""
    assert policy.performance_windows is not None
    model = PerformanceWindowRow
    with sessions() as session:
        newest = _newest(session, model.ts, model.stream == stream)
        if newest is None:
            return
    old = and_(model.stream == stream,
               model.ts < newest - timedelta(seconds=policy.performance_windows))
    start = -1
    while True:
        with sessions() as session:
            rows = session.execute(
                select(model.window_index, model.start_index, model.end_index)
                .where(old, model.window_index > start)
                .order_by(model.window_index)
                .limit(batch)
            ).all()
        if not rows:
            return
        start = rows[-1][0]

        def step(session: Session, rows: Sequence[Any] = rows) -> int:
            kept = _kept_ranges(session, stream, policy.alarm_context)
            gone = [w for w, lo, hi in rows if not any(a <= hi and lo <= b for a, b in kept)]
            if not gone:
                return 0
            return _count(session.execute(
                delete(model).where(model.stream == stream, model.window_index.in_(gone))
            ))

        yield step
        if len(rows) < batch:
            return


def _subtract(span: tuple[int, int], kept: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of the inclusive ``span`` outside the sorted, merged ``kept`` ranges.

    >>> _subtract((0, 100), [(10, 20), (50, 200)])
    [(0, 9), (21, 49)]
    """
    out, lo = [], span[0]
    for a, b in kept:
        if b < lo or a > span[1]:
            continue
        if a > lo:
            out.append((lo, a - 1))
        lo = b + 1
    if lo <= span[1]:
        out.append((lo, span[1]))
    return out


def _range_batches(
    sessions: sessionmaker[Session],
    model: type[OODWindowRow] | type[DeadLetterRow],
    key: InstrumentedAttribute[int],
    stream: str | None,
    age: float,
    batch: int,
    stored_before: datetime | None = None,
) -> Iterator[Callable[[Session], int]]:
    """Batches of old rows of one stream (or of no stream), by ranges of an indexed key: older
    than ``age`` on the newest row's ``ts`` or, given ``stored_before`` (now), stored
    (``created_at``) more than ``age`` before it."""
    mine = model.stream.is_(None) if stream is None else model.stream == stream
    if stored_before is not None:
        old = and_(mine, model.created_at < stored_before - timedelta(seconds=age))
    else:
        with sessions() as session:
            newest = _newest(session, model.ts, mine)
        if newest is None:
            return
        old = and_(mine, model.ts < newest - timedelta(seconds=age))
    while True:
        with sessions() as session:
            keys = session.scalars(select(key).where(old).order_by(key).limit(batch)).all()
        if not keys:
            return
        lo, hi = keys[0], keys[-1]

        def step(session: Session, lo: int = lo, hi: int = hi) -> int:
            # ood_flags go with their window (ON DELETE CASCADE)
            return _count(session.execute(delete(model).where(old, key.between(lo, hi))))

        yield step
        if len(keys) < batch:
            return


def _count(result: Result[Any]) -> int:
    return int(cast(CursorResult[Any], result).rowcount or 0)
