"""What a restart reads back: the stored offsets of a source and a stream's checkpoint."""

from __future__ import annotations

from sqlalchemy import Select, select

from monitor.db.models import CheckpointRow, SourceOffsetRow, source_key

__all__ = ["checkpoint_query", "offsets_query"]


def offsets_query(source: str) -> Select[SourceOffsetRow]:
    """Stored offsets of a source's partitions (``source``: its whole name, of any length)."""
    return (
        select(SourceOffsetRow)
        .where(SourceOffsetRow.source == source_key(source))
        .order_by(SourceOffsetRow.partition)
    )


def checkpoint_query(stream: str) -> Select[CheckpointRow]:
    """A stream's checkpoint row."""
    return select(CheckpointRow).where(CheckpointRow.stream == stream)

