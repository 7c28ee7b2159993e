"""Checkpoints whose large arrays are stored once, as content-addressed pieces
(``checkpoint_chunks``): what a second checkpoint sends and deletes, what it loads, what
retention deletes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from monitor.db.checkpoint_store import prune_chunks
from monitor.db.models import CheckpointChunkRow, CheckpointRow
from monitor.db.store import load_state, persist_batch
from monitor.engine.batch import Batch, Fencing
from monitor.streams.state import PIECE_BYTES, Checkpoint
from tests.support.databases import executed
from tests.support.states import assert_identical

BANK_ROWS = 4000  # a 4000 x 4 float64 bank: 128 000 bytes, 16 pieces
BANK_PIECES = -(-BANK_ROWS * 32 // PIECE_BYTES)


def state(events: int, seed: int = 0) -> dict[str, Any]:
    """A detector state: a bank fixed at start-up, a history that grows at its end, a small
    array and scalars that change with every batch."""
    rng = np.random.default_rng(seed)
    return {
        "bank": rng.normal(size=(BANK_ROWS, 4)),
        "history": np.arange(events, dtype=np.float64) * 0.5,
        "recent": np.full(16, events, dtype=np.int64),
        "log_s": -0.25 * events,
    }


def checkpoint(events: int, seed: int = 0) -> Checkpoint:
    return Checkpoint("s", 1, events, state(events, seed))


@contextmanager
def sent(session: Session) -> Iterator[dict[str, int]]:
    """Bytes of binary parameters the session's engine sends while the block runs."""
    seen = {"bytes": 0}
    with executed(session.get_bind()) as statements:
        yield seen
    for _, parameters, executemany in statements:
        for row in parameters if executemany else [parameters]:
            values = row.values() if isinstance(row, dict) else row
            seen["bytes"] += sum(_binary(v) for v in values)


def _binary(value: Any) -> int:
    """Bytes of a binary parameter (bytes, or the driver's wrapper of them); 0 for others."""
    if isinstance(value, str):
        return 0
    try:
        return memoryview(getattr(value, "obj", value)).nbytes
    except TypeError:
        return 0


def assert_loads(session: Session, expected: Checkpoint) -> None:
    """The stored checkpoint of ``expected``'s stream is ``expected``, bit for bit."""
    loaded = load_state(session, expected.stream)
    assert loaded is not None
    assert (loaded.version, loaded.event_index) == (expected.version, expected.event_index)
    assert_identical(loaded.state, expected.state)


def chunk_rows(session: Session, stream: str | None = None) -> int:
    query = select(func.count()).select_from(CheckpointChunkRow)
    if stream is not None:
        query = query.where(CheckpointChunkRow.stream == stream)
    with session.begin():
        return int(session.scalar(query) or 0)


def test_a_second_checkpoint_writes_only_the_changed_pieces(db_session: Session) -> None:
    first, second = checkpoint(10_000), checkpoint(10_500)
    with sent(db_session) as one:
        persist_batch(db_session, Batch(checkpoints={"s": first}))
    # The bank (16 pieces) and the history (80 000 bytes: 10 pieces) are pieces; the small
    # array stays in the blob.
    assert chunk_rows(db_session) == BANK_PIECES + 10
    assert one["bytes"] >= BANK_ROWS * 32 + 80_000
    with sent(db_session) as two:
        persist_batch(db_session, Batch(checkpoints={"s": second}))
    # The history grew from 80 000 to 84 000 bytes: its last piece (6 272 bytes) changed, and
    # one piece was added; the bank is not sent again. The replaced piece is deleted.
    new_history = 84_000 - 9 * PIECE_BYTES
    blob = len(second.encode({})[1] or b"")
    assert two["bytes"] == new_history + blob
    assert chunk_rows(db_session) == BANK_PIECES + 11
    assert_loads(db_session, second)
    with sent(db_session) as again:  # a replay of the same checkpoint sends no piece
        persist_batch(db_session, Batch(checkpoints={"s": second}))
    assert again["bytes"] == blob and chunk_rows(db_session) == BANK_PIECES + 11


def test_streams_keep_their_own_pieces(db_session: Session) -> None:
    """Two streams with the same bank each store it (a stream's pieces are written under its
    own checkpoint's lock); replacing one's leaves the other's."""
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(2_000),
                                                 "t": Checkpoint("t", 1, 5, state(2_000))}))
    assert chunk_rows(db_session, "s") == chunk_rows(db_session, "t") == BANK_PIECES + 2
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(2_000, seed=9)}))
    assert chunk_rows(db_session, "s") == chunk_rows(db_session, "t") == BANK_PIECES + 2
    assert_loads(db_session, Checkpoint("t", 1, 5, state(2_000)))
    assert_loads(db_session, checkpoint(2_000, seed=9))


def test_an_old_monolithic_checkpoint_loads_and_the_next_is_lean(db_session: Session) -> None:
    old = checkpoint(10_000)
    text, blob = old.encode()
    with db_session.begin():
        db_session.add(CheckpointRow(stream="s", version=1, event_index=10_000, state=text,
                                     arrays=blob, chunks=None))
    assert_loads(db_session, old)
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_500)}))
    with db_session.begin():
        row = db_session.get(CheckpointRow, "s")
        assert row is not None and row.chunks is not None
        assert len(row.chunks.split()) == BANK_PIECES + 11
    assert_loads(db_session, checkpoint(10_500))


def test_retention_deletes_the_pieces_of_a_deleted_checkpoint(db_session: Session) -> None:
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_000),
                                                 "t": Checkpoint("t", 1, 5, state(2_000))}))
    with db_session.begin():
        assert prune_chunks(db_session) == 0  # every piece is named
        db_session.execute(delete(CheckpointRow).where(CheckpointRow.stream == "s"))
    with db_session.begin():
        assert prune_chunks(db_session) == BANK_PIECES + 10
    assert chunk_rows(db_session) == chunk_rows(db_session, "t") == BANK_PIECES + 2


def test_a_fenced_checkpoint_reads_its_stored_row_in_the_writer_check(db_session: Session
                                                                        ) -> None:
    """With a writer, the stored row's list is read (and locked) by the one-writer check's
    statement on PostgreSQL: a checkpoint batch is 4 statements there (check, new pieces, row,
    replaced pieces), 5 on SQLite (the check's parts one by one)."""
    fencing = Fencing("file:events", "", streams=["s"])
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_000)}, fencing=fencing))
    with executed(db_session.get_bind()) as statements:
        persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_500)}, fencing=fencing))
    work = [s for s, _, _ in statements if not s.startswith(("BEGIN", "COMMIT"))]
    postgres = db_session.get_bind().dialect.name == "postgresql"
    assert len(work) == (4 if postgres else 5), work
    assert chunk_rows(db_session) == BANK_PIECES + 11
    assert_loads(db_session, checkpoint(10_500))
