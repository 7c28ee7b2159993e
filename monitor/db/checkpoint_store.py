"""Checkpoints with their large arrays stored once: the ``checkpoint_chunks`` pieces.

A checkpoint's large arrays are cut into content-addressed pieces
(:func:`monitor.streams.state.encode_state` with ``chunks``); ``checkpoints.chunks`` names the
pieces a checkpoint refers to, and each stream's pieces are rows ``(stream, key, data)``.
Writing a stream's checkpoint, in the batch's transaction:

1. reads (and on PostgreSQL locks, ``SELECT … FOR UPDATE``) the ``chunks`` of the stored row
   — in the one-writer check's statement when the batch has a writer — : every piece it names
   is stored, so none of them is sent again;
2. inserts the pieces the new checkpoint names and the stored row did not;
3. replaces the row, and deletes the pieces the stored row named and the new one does not.

A stream's pieces are written only under its checkpoint row's lock, so two writers of one
stream (a zombie) cannot leave a row naming a piece the other deleted; on SQLite the write
transaction holds the database. Nothing is left behind for retention but the pieces of a
checkpoint row deleted by hand (:func:`prune_chunks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, select, tuple_
from sqlalchemy.orm import Session

from monitor.db.dialect import insert, insert_missing
from monitor.db.models import CheckpointChunkRow, CheckpointRow
from monitor.db.queries import checkpoint_query

__all__ = ["load_checkpoint_row", "prune_chunks", "write_checkpoints"]

Row = dict[str, Any]
_COLUMNS = ("version", "event_index", "state", "arrays", "chunks", "updated_at")


def write_checkpoints(
    session: Session,
    rows: Sequence[Row],
    pieces: Mapping[str, Mapping[str, bytes]],
    held: Mapping[str, str | None] | None = None,
) -> None:
    """Store the checkpoint ``rows`` (the pieces their ``chunks`` name in ``pieces``, by
    stream) in the session's transaction, sending only the pieces not stored yet. ``held``:
    the stored rows' ``chunks`` by stream, read under their lock already (the one-writer
    check's statement: :func:`monitor.db.fencing.check_writer`); else they are read here."""
    if not rows:
        return
    streams = [r["stream"] for r in rows]
    if held is None or not set(streams) <= set(held):
        stored = _stored_names(session, streams)
    else:
        stored = {s: _names(held[s]) for s in streams}
    insert_missing(session, CheckpointChunkRow, [
        {"stream": s, "key": k, "data": v}
        for s in sorted(pieces) for k, v in pieces[s].items() if k not in stored[s]])
    _upsert(session, rows)
    _delete_pieces(session, [(s, k) for s in sorted(stored)
                             for k in sorted(stored[s] - set(pieces[s]))])


def load_checkpoint_row(
    session: Session, stream: str
) -> tuple[CheckpointRow, dict[str, bytes]] | None:
    """The stream's checkpoint row and the pieces it names (read in the session's
    transaction), or ``None``."""
    row = session.scalars(checkpoint_query(stream)).one_or_none()
    if row is None:
        return None
    names = _names(row.chunks)
    pieces: dict[str, bytes] = {}
    if names:
        found = session.execute(
            select(CheckpointChunkRow.key, CheckpointChunkRow.data)
            .where(CheckpointChunkRow.stream == stream, CheckpointChunkRow.key.in_(names)))
        pieces = {key: bytes(data) for key, data in found}
    return row, pieces


def prune_chunks(session: Session) -> int:
    """Delete the pieces no checkpoint row names (a row deleted by hand leaves its pieces);
    how many. A first look reads without locks (usually nothing is stale, and a role that may
    only read checkpoints then prunes nothing without an error); when pieces look stale, the
    rows are locked, as a checkpoint's write locks its own, and the stale set is read again."""
    if not _stale_pieces(session, lock=False):
        return 0
    stale = _stale_pieces(session, lock=True)
    _delete_pieces(session, stale)
    return len(stale)


def _stale_pieces(session: Session, lock: bool) -> list[tuple[str, str]]:
    """The ``(stream, key)`` pieces no stored checkpoint names (its rows locked with ``lock``)."""
    query = select(CheckpointRow.stream, CheckpointRow.chunks)
    named = {s: _names(c) for s, c in session.execute(
        query.with_for_update() if lock else query)}
    return [(s, k) for s, k in session.execute(
        select(CheckpointChunkRow.stream, CheckpointChunkRow.key)) if k not in named.get(s, ())]


def _delete_pieces(session: Session, pieces: Sequence[tuple[str, str]]) -> None:
    """Delete the ``(stream, key)`` pieces, 500 to a statement."""
    for start in range(0, len(pieces), 500):
        session.execute(delete(CheckpointChunkRow).where(
            tuple_(CheckpointChunkRow.stream, CheckpointChunkRow.key)
            .in_(pieces[start : start + 500])))


def _names(chunks: str | None) -> set[str]:
    return set(chunks.split()) if chunks else set()


def _stored_names(session: Session, streams: Sequence[str]) -> dict[str, set[str]]:
    """The pieces each stream's stored checkpoint names (none without one), its row locked."""
    query = (select(CheckpointRow.stream, CheckpointRow.chunks)
             .where(CheckpointRow.stream.in_(sorted(streams)))
             .order_by(CheckpointRow.stream).with_for_update())
    stored = {stream: _names(chunks) for stream, chunks in session.execute(query)}
    return {stream: stored.get(stream, set()) for stream in streams}


def _upsert(session: Session, rows: Sequence[Row]) -> None:
    stmt = insert(session, CheckpointRow)
    stmt = stmt.on_conflict_do_update(
        index_elements=["stream"], set_={c: stmt.excluded[c] for c in _COLUMNS}
    )
    session.execute(stmt, list(rows))
