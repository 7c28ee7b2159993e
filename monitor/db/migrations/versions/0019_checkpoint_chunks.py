"""Checkpoints keep their large arrays as content-addressed pieces: ``checkpoint_chunks``.

Every checkpoint rewrote all of a stream's arrays, though most never change after start-up (the
reference banks, the sorted calibration, the density ratio's source rows) and others only grow
at their end. From this revision the store cuts every array of at least 4 KiB into pieces of
8 KiB kept in ``checkpoint_chunks`` under the stream and the SHA-256 of their bytes, written once
(``monitor.streams.state``, ``CHUNKED_MAGIC``); ``checkpoints.chunks`` lists the pieces a
checkpoint refers to. Checkpoints stored before keep their whole blob (``chunks`` NULL) and
load as they are; each is rewritten in the new layout by its stream's next checkpoint.
``checkpoints.state`` (the JSON text, ~130 KB after 10 000 events of the example stream, sent
with every checkpoint) is stored uncompressed too: pglz cost 1.5–2 ms of each upsert.

The downgrade puts each checkpoint's pieces back into its blob (the previous layout, which the
older release reads) and drops the table and the column. Like 0002, the pieces are stored
uncompressed on PostgreSQL (``STORAGE EXTERNAL``): float data gains little from pglz.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04 19:00:00+00:00
"""

import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECKPOINTS = sa.table(
    "checkpoints",
    sa.column("stream", sa.String(128)),
    sa.column("arrays", sa.LargeBinary),
    sa.column("chunks", sa.Text),
)
CHUNKS = sa.table("checkpoint_chunks", sa.column("stream", sa.String(128)),
                  sa.column("key", sa.String(64)), sa.column("data", sa.LargeBinary))
WHOLE, PIECES = b"MONARR1\n", b"MONARR2\n"  # monitor.streams.state's magic bytes
LENGTH = struct.Struct("<I")


def upgrade() -> None:
    op.create_table(
        "checkpoint_chunks",
        sa.Column("stream", sa.String(128), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("stream", "key", name=op.f("pk_checkpoint_chunks")),
    )
    _set_storage("EXTERNAL")
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("chunks", sa.Text(), nullable=True))


def downgrade() -> None:
    if not op.get_context().as_sql:  # offline SQL cannot read the stored checkpoints
        bind = op.get_bind()
        rows = bind.execute(sa.select(CHECKPOINTS.c.stream, CHECKPOINTS.c.arrays)
                            .where(CHECKPOINTS.c.chunks.is_not(None))).all()
        for stream, blob in rows:
            if not bytes(blob).startswith(PIECES):
                continue
            bind.execute(CHECKPOINTS.update().where(CHECKPOINTS.c.stream == stream)
                         .values(arrays=_whole(bytes(blob), _pieces(bind, stream, bytes(blob)))))
    _set_storage("EXTENDED")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("chunks")
    op.drop_table("checkpoint_chunks")


def _set_storage(storage: str) -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE checkpoints ALTER COLUMN state SET STORAGE {storage}")
    if storage == "EXTERNAL":  # the table is dropped on the way down
        op.execute("ALTER TABLE checkpoint_chunks ALTER COLUMN data SET STORAGE EXTERNAL")


def _header(blob: bytes) -> tuple[list[list[Any]], int]:
    """The array entries of a blob's header, and where the inline bytes begin."""
    (size,) = LENGTH.unpack_from(blob, len(PIECES))
    start = len(PIECES) + LENGTH.size
    return json.loads(blob[start : start + size]), start + size


def _pieces(bind: sa.Connection, stream: str, blob: bytes) -> dict[str, bytes]:
    header, _ = _header(blob)
    keys = {key for entry in header if len(entry) == 5 for key in entry[4]}
    rows = bind.execute(sa.select(CHUNKS.c.key, CHUNKS.c.data)
                        .where(CHUNKS.c.stream == stream, CHUNKS.c.key.in_(keys)))
    return {key: bytes(data) for key, data in rows}


def _whole(blob: bytes, pieces: Mapping[str, bytes]) -> bytes:
    """The blob in the layout before this revision: every array's bytes inline, in order."""
    header, offset = _header(blob)
    parts = []
    for entry in header:
        if len(entry) == 5:
            parts.append(b"".join(pieces[key] for key in entry.pop()))
        else:
            size = math.prod(entry[2]) * np.dtype(entry[1]).itemsize
            parts.append(blob[offset : offset + size])
            offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([WHOLE, LENGTH.pack(len(head)), head, *parts])
