"""The dead-letter replay's transaction: a replay batch's results and checkpoints stored, its
dead letters settled, in one transaction (``monitor dead-letters replay``,
:mod:`monitor.cli.dead_letters`).

The results and checkpoints are written as :func:`monitor.db.store.persist_batch` writes them
(:func:`~monitor.db.store.write_results`); no source offset moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from monitor.db.errors import PersistenceError
from monitor.db.models import CheckpointRow, DeadLetterRow
from monitor.db.rows import BatchRows
from monitor.db.store import Route, idle, write_results, writing
from monitor.engine.batch import Batch

__all__ = ["CheckpointMovedError", "persist_replay"]

#: Dead-letter rows deleted per statement.
_CHUNK = 500


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


def persist_replay(
    session: Session,
    batch: Batch,
    *,
    expected: Mapping[str, tuple[int, int] | None] = MappingProxyType({}),
    replayed: Sequence[int] = (),
    failed: Mapping[int, tuple[str, str | None]] = MappingProxyType({}),
    alerts: Sequence[Mapping[str, Any]] = (),
    route: Route | None = None,
) -> set[int]:
    """Store one batch of replayed dead letters in one transaction, and commit it.

    The ``batch``'s results and checkpoints are written as :func:`persist_batch` writes them
    (it carries no offsets, dead letters, fencing or ingest keys: a replay moves no offset, and
    its records that fail again are ``failed``); in the same transaction the dead letters whose
    record was processed (``replayed``: row ids) are deleted, and those that failed again
    (``failed``: row id → ``(reason, stream)``) get their new reason and stream. ``expected``
    holds, per stream whose checkpoint is written, the ``(version, event_index)`` the replay
    started from (``None``: no checkpoint): if the stored one differs (another writer moved
    it), raises :class:`CheckpointMovedError` and writes nothing.

    Returns the ids of the dead-letter rows deleted (a row another replay deleted already is
    not among them).
    """
    idle(session, "persist_replay")
    _check_replay(batch)
    rows = BatchRows.of(batch)
    with writing(session):
        for stream in sorted(batch.checkpoints):
            _check_mark(session, stream, expected.get(stream))
        write_results(session, batch, rows, alerts, route)
        deleted = _delete_letters(session, replayed)
        for row_id, (reason, stream_name) in failed.items():
            session.execute(
                update(DeadLetterRow)
                .where(DeadLetterRow.id == row_id)
                .values(reason=reason, stream=stream_name)
            )
    return deleted


def _check_replay(batch: Batch) -> None:
    carried = [name for name, value in (
        ("offsets", batch.offsets), ("dead letters", batch.dead_letters),
        ("fencing", batch.fencing), ("ingest keys", batch.ingested or batch.ingest_request),
    ) if value]
    if carried:
        raise ValueError(f"a replay batch carries no {', '.join(carried)} (a replay moves no "
                         "offset; its records that fail again are passed as failed)")


def _check_mark(session: Session, stream: str, expected: tuple[int, int] | None) -> None:
    """Raise :class:`CheckpointMovedError` unless the stream's stored checkpoint is still at
    ``expected`` (locking its row until the transaction ends)."""
    query = select(CheckpointRow.version, CheckpointRow.event_index).where(
        CheckpointRow.stream == stream
    )
    row = session.execute(query.with_for_update()).one_or_none()
    found = None if row is None else (row.version, row.event_index)
    if found != expected:
        raise CheckpointMovedError(stream, expected, found)


def _delete_letters(session: Session, ids: Sequence[int]) -> set[int]:
    """Delete the dead-letter rows ``ids`` still present; the ids deleted."""
    deleted: set[int] = set()
    ids = list(ids)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        locked = select(DeadLetterRow.id).where(DeadLetterRow.id.in_(chunk)).with_for_update()
        present = set(session.scalars(locked))
        if present:
            session.execute(delete(DeadLetterRow).where(DeadLetterRow.id.in_(present)))
        deleted |= present
    return deleted
