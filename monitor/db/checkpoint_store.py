"""Checkpoints with their large arrays stored once: the ``checkpoint_chunks`` pieces.

A checkpoint's large arrays are cut into content-addressed pieces
(:func:`monitor.streams.state.encode_state` with ``chunks``); ``checkpoints.chunks`` names the
pieces a checkpoint refers to. Writing one inserts only the pieces the store does not hold yet:

- with a :class:`KnownChunks` (the worker's sink keeps one), the pieces named by the stream's
  stored checkpoint as this process last committed or read it are not sent at all; the row is
  then replaced with ``UPDATE … WHERE chunks = <that list>``, so that if another writer replaced
  the row in between (the list differs), nothing is assumed: every piece is sent and the row
  upserted. A row that names a piece therefore always comes with the piece stored;
- the pieces sent are inserted with ``ON CONFLICT (key) DO UPDATE SET used_at``, which also
  touches (and locks) a piece stored already, so retention's grace rule cannot delete it under a
  checkpoint that is about to refer to it.

Retention (:func:`prune_chunks`) deletes the pieces that no checkpoint names and that no
checkpoint wrote for :data:`CHUNK_GRACE`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from monitor.db.dialect import insert, table_of
from monitor.db.models import CheckpointChunkRow, CheckpointRow
from monitor.db.queries import checkpoint_query

__all__ = ["CHUNK_GRACE", "KnownChunks", "load_checkpoint_row", "prune_chunks",
           "write_checkpoints"]

#: How long a piece no checkpoint names is kept after a checkpoint last wrote it: longer than
#: any transaction that may still be about to refer to it.
CHUNK_GRACE = timedelta(hours=1)

Row = dict[str, Any]
_COLUMNS = ("version", "event_index", "state", "arrays", "chunks", "updated_at")


class KnownChunks:
    """The ``chunks`` list of each stream's stored checkpoint as this process last committed or
    read it: pieces a checkpoint can refer to without sending them again."""

    def __init__(self) -> None:
        self._lists: dict[str, str | None] = {}

    def get(self, stream: str) -> str | None:
        return self._lists.get(stream)

    def stored(self, lists: Mapping[str, str | None]) -> None:
        """``lists`` (stream → its checkpoint's ``chunks``) are committed, or were read."""
        self._lists.update(lists)


def write_checkpoints(
    session: Session,
    rows: Sequence[Row],
    pieces: Mapping[str, Mapping[str, bytes]],
    known: KnownChunks | None,
    now: datetime,
) -> dict[str, str | None]:
    """Store the checkpoint ``rows`` (their ``chunks`` named by ``pieces``, by stream) in the
    session's transaction; the ``chunks`` list of each, to give ``known`` after the commit."""
    if not rows:
        return {}
    priors = {r["stream"]: _names(known.get(r["stream"])) if known else set() for r in rows}
    _put_pieces(session, [(k, v) for r in rows for k, v in pieces[r["stream"]].items()
                          if k not in priors[r["stream"]]], now)
    lean = [r for r in rows if priors[r["stream"]] & set(pieces[r["stream"]])]
    if known is not None and lean and not _replace(session, lean, known):
        # Some stored row is not the one this process knows: assume nothing about its pieces.
        _put_pieces(session, [(k, v) for r in lean for k, v in pieces[r["stream"]].items()
                              if k in priors[r["stream"]]], now)
        _upsert(session, lean)
    skipped = {r["stream"] for r in lean}
    _upsert(session, [r for r in rows if r["stream"] not in skipped])
    return {r["stream"]: r["chunks"] for r in rows}


def load_checkpoint_row(
    session: Session, stream: str, known: KnownChunks | None = None
) -> tuple[CheckpointRow, dict[str, bytes]] | None:
    """The stream's checkpoint row and the pieces it names (read in the session's
    transaction), or ``None``; ``known`` learns its ``chunks`` list."""
    row = session.scalars(checkpoint_query(stream)).one_or_none()
    if row is None:
        return None
    names = _names(row.chunks)
    pieces: dict[str, bytes] = {}
    if names:
        found = session.execute(select(CheckpointChunkRow.key, CheckpointChunkRow.data)
                                .where(CheckpointChunkRow.key.in_(names)))
        pieces = {key: bytes(data) for key, data in found}
    if known is not None:
        known.stored({stream: row.chunks})
    return row, pieces


def prune_chunks(session: Session, now: datetime, grace: timedelta = CHUNK_GRACE) -> int:
    """Delete the pieces no checkpoint names and none wrote since ``now - grace``; how many."""
    named: set[str] = set()
    for (chunks,) in session.execute(select(CheckpointRow.chunks)
                                     .where(CheckpointRow.chunks.is_not(None))):
        named |= _names(chunks)
    stale = [key for (key,) in session.execute(
        select(CheckpointChunkRow.key).where(CheckpointChunkRow.used_at < now - grace))
        if key not in named]
    for start in range(0, len(stale), 500):
        session.execute(delete(CheckpointChunkRow)
                        .where(CheckpointChunkRow.key.in_(stale[start : start + 500]),
                               CheckpointChunkRow.used_at < now - grace))
    return len(stale)


def _names(chunks: str | None) -> set[str]:
    return set(chunks.split()) if chunks else set()


def _put_pieces(session: Session, pieces: Sequence[tuple[str, bytes]], now: datetime) -> None:
    if not pieces:
        return
    stmt = insert(session, CheckpointChunkRow)
    stmt = stmt.on_conflict_do_update(index_elements=["key"],
                                      set_={"used_at": stmt.excluded.used_at})
    session.execute(stmt, [{"key": k, "data": v, "used_at": now} for k, v in dict(pieces).items()])


def _replace(session: Session, rows: Sequence[Row], known: KnownChunks) -> bool:
    """Update each stream's row where it still names the chunks ``known`` has for it; whether
    every row was."""
    table = table_of(CheckpointRow)
    stmt = table.update().where(table.c.stream == bindparam("b_stream"),
                                table.c.chunks == bindparam("b_prior"))
    params = [{"b_stream": r["stream"], "b_prior": known.get(r["stream"]),
               **{c: r[c] for c in _COLUMNS}} for r in rows]
    result = session.connection().execute(stmt, params)
    return bool(result.rowcount == len(rows))


def _upsert(session: Session, rows: Sequence[Row]) -> None:
    if not rows:
        return
    stmt = insert(session, CheckpointRow)
    stmt = stmt.on_conflict_do_update(
        index_elements=["stream"], set_={c: stmt.excluded[c] for c in _COLUMNS}
    )
    session.execute(stmt, list(rows))
