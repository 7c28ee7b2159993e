"""Checkpoints whose large arrays are stored once, as content-addressed pieces
(``checkpoint_chunks``): what a second checkpoint sends, what it loads, what retention keeps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from monitor.db.checkpoint_store import CHUNK_GRACE, KnownChunks, prune_chunks
from monitor.db.models import CheckpointChunkRow, CheckpointRow, utcnow
from monitor.db.store import load_state, persist_batch
from monitor.engine.batch import Batch
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


def assert_loads(session: Session, expected: Checkpoint, known: KnownChunks | None = None
                 ) -> None:
    """The stored checkpoint of ``expected``'s stream is ``expected``, bit for bit."""
    loaded = load_state(session, expected.stream, known)
    assert loaded is not None
    assert (loaded.version, loaded.event_index) == (expected.version, expected.event_index)
    assert_identical(loaded.state, expected.state)


def chunk_rows(session: Session) -> int:
    with session.begin():
        return int(session.scalar(select(func.count()).select_from(CheckpointChunkRow)) or 0)


def test_a_second_checkpoint_writes_only_the_changed_pieces(db_session: Session) -> None:
    known = KnownChunks()
    first, second = checkpoint(10_000), checkpoint(10_500)
    with sent(db_session) as one:
        persist_batch(db_session, Batch(checkpoints={"s": first}), known=known)
    pieces = chunk_rows(db_session)
    # The bank (16 pieces) and the history (80 000 bytes: 10 pieces) are pieces; the small
    # array stays in the blob.
    assert pieces == BANK_PIECES + 10
    assert one["bytes"] >= BANK_ROWS * 32 + 80_000
    with sent(db_session) as two:
        persist_batch(db_session, Batch(checkpoints={"s": second}), known=known)
    # The history grew from 80 000 to 84 000 bytes: its last piece (6 272 bytes) changed, and
    # one piece was added; the bank is not sent again.
    new_history = 84_000 - 9 * PIECE_BYTES
    assert chunk_rows(db_session) == pieces + 2
    blob = len(second.encode({})[1] or b"")
    assert two["bytes"] == new_history + blob
    assert_loads(db_session, second)


def test_without_known_pieces_everything_is_sent_and_stored_once(db_session: Session) -> None:
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_000)}))
    with sent(db_session) as two:
        persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_500)}))
    assert two["bytes"] >= BANK_ROWS * 32 + 84_000
    # One row per distinct piece: the bank's 16 and the first history's 10 once, and the two of
    # the second history's pieces that differ.
    assert chunk_rows(db_session) == BANK_PIECES + 10 + 2
    assert_loads(db_session, checkpoint(10_500))


def test_a_row_replaced_by_another_writer_gets_every_piece(db_session: Session) -> None:
    """A process that knows the pieces of a row another writer has since replaced assumes
    nothing: its checkpoint sends every piece, and the pieces it did not know of were deleted
    meanwhile, yet it loads whole."""
    ours, theirs = KnownChunks(), KnownChunks()
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_000)}), known=ours)
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(2_000, seed=7)}), known=theirs)
    with db_session.begin():  # old pieces are gone once their grace has passed
        db_session.execute(update(CheckpointChunkRow).values(used_at=utcnow() - 2 * CHUNK_GRACE))
    with db_session.begin():
        deleted = prune_chunks(db_session, utcnow())
    # Ours but for the history's first piece, which theirs shares.
    assert deleted == BANK_PIECES + 10 - 1
    with sent(db_session) as again:
        persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_500)}), known=ours)
    assert again["bytes"] >= BANK_ROWS * 32 + 84_000
    assert_loads(db_session, checkpoint(10_500))


def test_an_old_monolithic_checkpoint_loads_and_the_next_is_lean(db_session: Session) -> None:
    old = checkpoint(10_000)
    text, blob = old.encode()
    with db_session.begin():
        db_session.add(CheckpointRow(stream="s", version=1, event_index=10_000, state=text,
                                     arrays=blob, chunks=None))
    known = KnownChunks()
    assert_loads(db_session, old, known)
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_500)}), known=known)
    with db_session.begin():
        row = db_session.get(CheckpointRow, "s")
        assert row is not None and row.chunks is not None
        assert len(row.chunks.split()) == BANK_PIECES + 11
    assert_loads(db_session, checkpoint(10_500))


def test_retention_keeps_named_and_recent_pieces(db_session: Session) -> None:
    now = utcnow()
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(10_000)}))
    persist_batch(db_session, Batch(checkpoints={"s": checkpoint(9_000, seed=1)}))
    # Replaced: the first bank's 16 pieces and the longer history's last two (the shorter one
    # shares its first 8 pieces and ends within the 9th).
    with db_session.begin():
        assert prune_chunks(db_session, now) == 0  # within their grace
    with db_session.begin():
        assert prune_chunks(db_session, now + CHUNK_GRACE + timedelta(seconds=1)) == BANK_PIECES + 2
    assert_loads(db_session, checkpoint(9_000, seed=1))
