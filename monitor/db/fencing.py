"""One writer per stream: bindings of streams to their source of writes, and fencing tokens.

A stream is bound to the first writer that stores results for it (:class:`Writer`: a source key
and, for Kafka, the consumer group; or HTTP ingest). Every transaction that stores a stream's
results or checkpoint checks the binding, in the same transaction (the binding row is locked), and
a writer bound elsewhere is refused with :class:`~monitor.db.errors.StreamBoundError`. Only
``monitor streams rebind`` moves a binding.

Within a group, a worker assigned a partition bumps the partition's epoch (its fencing token);
every transaction of the worker that covers records of the partition checks that the stored epoch
is still its own (the fence row is locked), so a zombie (a worker that lost the partition in a
rebalance but has not noticed yet) is refused with :class:`~monitor.db.errors.FencedError`.

Offsets of a Kafka source are stored under ``kafka:TOPIC`` by the first group that claimed the
source, and under ``kafka:TOPIC#GROUP`` by every other group, so that two groups on one database
never move each other's positions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Text,
    cast,
    literal,
    null,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from monitor.db.dialect import insert, insert_missing, table_of
from monitor.db.errors import FencedError, StreamBoundError, StreamNotFoundError
from monitor.db.models import (
    CheckpointRow,
    SourceOffsetRow,
    StreamRow,
    StreamWriterRow,
    WriterFenceRow,
    source_key,
    utcnow,
)

__all__ = ["HTTP", "Writer", "check_writer", "claim_partitions", "get_binding",
           "offset_key_for", "positions_ahead", "rebind_stream"]

OWNER = -1  # the partition number of a source's owner row


@dataclass(frozen=True)
class Writer:
    """A source of writes: a source key (``kafka:TOPIC``, ``file:PATH``) and the Kafka consumer
    group (``""`` for other sources), or ``http`` (HTTP ingest)."""

    source: str
    group: str = ""

    def describe(self) -> str:
        if self.source == "http":
            return "HTTP ingest"
        return f"{self.source} (consumer group {self.group!r})" if self.group else self.source

    def rebind_args(self) -> str:
        """The ``monitor streams rebind`` options that bind a stream to this writer."""
        if self.source == "http":
            return "--http"
        if self.source.startswith("file:") and not self.group:
            return f"--file {self.source[len('file:'):]}"
        group = f" --group {self.group}" if self.group else ""
        return f"--source {self.source}{group}"


HTTP = Writer("http")


def offset_key_for(session: Session, source: str, group: str) -> str:
    """The key under which ``group`` stores its offsets of ``source`` (read only)."""
    owner = session.scalar(select(WriterFenceRow.group_id).where(
        WriterFenceRow.source == source, WriterFenceRow.partition == OWNER))
    return source if owner is None or owner == group else source_key(f"{source}#{group}")


def claim_partitions(
    session: Session, source: str, group: str, partitions: Iterable[int]
) -> tuple[str, dict[int, int]]:
    """Take ``partitions`` of ``source`` for ``group`` and commit: the offset key to use and the
    new epoch (fencing token) of each partition."""
    with session.begin():
        insert_missing(session, WriterFenceRow, [{"source": source, "partition": OWNER,
                                                  "group_id": group, "epoch": 0,
                                                  "updated_at": utcnow()}])
        key = offset_key_for(session, source, group)
        epochs: dict[int, int] = {}
        for partition in sorted(partitions):
            insert_missing(session, WriterFenceRow, [{"source": key, "partition": partition,
                                                      "group_id": group, "epoch": 0,
                                                      "updated_at": utcnow()}])
            row = session.execute(
                select(WriterFenceRow.epoch).where(WriterFenceRow.source == key,
                                                   WriterFenceRow.partition == partition)
                .with_for_update()
            ).one()
            epochs[partition] = row.epoch + 1
            session.execute(
                update(WriterFenceRow)
                .where(WriterFenceRow.source == key, WriterFenceRow.partition == partition)
                .values(epoch=row.epoch + 1, group_id=group, updated_at=utcnow())
            )
    return key, epochs


def check_writer(
    session: Session, writer: Writer, streams: Iterable[str],
    fences: Mapping[tuple[str, int], int], checkpoints: Iterable[str] = (),
) -> dict[str, str | None]:
    """Bind unbound ``streams`` to ``writer`` and check the bindings and the fencing tokens
    ``fences`` (``(offset key, partition)`` → epoch), locking the binding and fence rows until
    the transaction ends; the stored ``chunks`` of the ``checkpoints`` streams' rows, locked
    too (the batch replaces them: :mod:`monitor.db.checkpoint_store`). One statement on
    PostgreSQL (its round trip is per batch, not per stream), one per kind of row on SQLite
    (no network).

    Raises
    ------
    StreamBoundError
        For the first stream (by name) bound to another writer.
    FencedError
        Else for the first partition whose stored epoch or group is not the one given.
    """
    names, keys, held = sorted(set(streams)), sorted(fences), sorted(set(checkpoints))
    bound, stored, chunks = _locked_rows(session, writer, names, keys, held)
    for stream in names:
        if bound[stream] != writer:
            raise StreamBoundError(stream, bound[stream].describe(), writer.describe(),
                                   writer.rebind_args())
    for key in keys:
        found = stored.get(key)
        if found is None or found != (fences[key], writer.group):
            epoch = 0 if found is None else found[0]
            why = "nothing" if found is None else f"epoch {found[0]} of group {found[1]!r}"
            raise FencedError(key[0], key[1], epoch, fences[key], why)
    return {stream: chunks.get(stream) for stream in held}


def _locked_rows(
    session: Session, writer: Writer, names: list[str], keys: list[tuple[str, int]],
    held: list[str],
) -> tuple[dict[str, Writer], dict[tuple[str, int], tuple[int, str]], dict[str, str | None]]:
    """Each stream's binding (inserted when it had none), each partition's stored (epoch,
    group) and each held checkpoint's ``chunks``, their rows locked; one statement on
    PostgreSQL: a ``UNION ALL`` of the parts, told apart by a tag."""
    parts: list[tuple[str, Any]] = []
    if names:
        parts.append(("bound", _binding_upsert(session, writer, names)))
    if keys:
        parts.append(("fence", _fence_select(keys)))
    if held:
        parts.append(("held", _checkpoint_select(held)))
    if len(parts) > 1 and session.get_bind().dialect.name == "postgresql":
        ctes = [(tag, query.cte(tag)) for tag, query in parts]
        rows: list[tuple[Any, ...]] = [tuple(r) for r in session.execute(union_all(*[
            select(literal(tag).label("tag"), *[cte.c[i] for i in range(5)]) for tag, cte in ctes
        ]))]
    else:
        rows = [(tag, *row) for tag, query in parts for row in session.execute(query)]
    bound = {r[1]: Writer(r[2], r[3]) for r in rows if r[0] == "bound"}
    stored = {(r[1], r[4]): (r[5], r[3]) for r in rows if r[0] == "fence"}
    chunks = {r[1]: r[2] for r in rows if r[0] == "held"}
    return bound, stored, chunks


def _binding_upsert(session: Session, writer: Writer, names: list[str]) -> Any:
    """Insert the unbound streams' bindings; returning every binding as (stream, source,
    group, NULL, NULL)."""
    writers = table_of(StreamWriterRow)
    now = utcnow()
    bind = insert(session, StreamWriterRow).values([
        {"stream": n, "source": writer.source, "group_id": writer.group, "updated_at": now}
        for n in names])
    # A no-op update rather than DO NOTHING: it locks the stored row and RETURNING gives it.
    bind = bind.on_conflict_do_update(index_elements=["stream"],
                                      set_={"source": writers.c.source})
    return bind.returning(writers.c.stream, writers.c.source, writers.c.group_id,
                          _null(Integer, "partition"), _null(BigInteger, "epoch"))


def _fence_select(keys: list[tuple[str, int]]) -> Any:
    """The fences of ``keys`` as (source, NULL, group, partition, epoch), locked."""
    walls = table_of(WriterFenceRow)
    return (select(walls.c.source, _null(Text, "text"), walls.c.group_id, walls.c.partition,
                   walls.c.epoch)
            .where(tuple_(walls.c.source, walls.c.partition).in_(keys))
            .order_by(walls.c.source, walls.c.partition).with_for_update())


def _checkpoint_select(streams: list[str]) -> Any:
    """The stored checkpoints of ``streams`` as (stream, chunks, NULL, NULL, NULL), locked."""
    rows = table_of(CheckpointRow)
    return (select(rows.c.stream, rows.c.chunks, _null(Text, "group_id"),
                   _null(Integer, "partition"), _null(BigInteger, "epoch"))
            .where(rows.c.stream.in_(streams)).order_by(rows.c.stream).with_for_update())


def _null(kind: Any, name: str) -> Any:
    """A typed NULL column: the parts of one ``UNION ALL`` agree on each column's type."""
    return cast(null(), kind).label(name)


def get_binding(session: Session, stream: str) -> Writer | None:
    row = session.get(StreamWriterRow, stream)
    return None if row is None else Writer(row.source, row.group_id)


def rebind_stream(session: Session, stream: str, writer: Writer) -> Writer | None:
    """Bind ``stream`` to ``writer`` and commit; the previous binding (or None).

    Moving a Kafka stream to another group of the same source gives the new group the old
    group's stored offsets when it has none of its own, so that it resumes where the stream's
    checkpoint was taken."""
    with session.begin():
        row = session.get(StreamWriterRow, stream, with_for_update=True)
        if row is None and session.get(StreamRow, stream) is None:
            raise StreamNotFoundError(f"stream {stream!r} is neither registered nor bound")
        old = None if row is None else Writer(row.source, row.group_id)
        if row is None:
            session.add(StreamWriterRow(stream=stream, source=writer.source,
                                        group_id=writer.group, updated_at=utcnow()))
        else:
            row.source, row.group_id, row.updated_at = writer.source, writer.group, utcnow()
        if old is not None and old.source == writer.source and old.group != writer.group:
            _copy_offsets(session, offset_key_for(session, old.source, old.group),
                          offset_key_for(session, writer.source, writer.group))
    return old


def positions_ahead(
    session: Session, source: str, behind: str, ahead: str
) -> dict[int, tuple[int, int]]:
    """Partitions of ``source`` where group ``ahead`` has stored a later offset than group
    ``behind``: partition → (``behind``'s offset, ``ahead``'s). After a rebind from ``behind``
    to ``ahead``, the stream's records at those offsets are processed by neither group (a
    refused group stores nothing of the stream: docs/operations.md)."""
    stored: dict[str, dict[int, int]] = {}
    for group in (behind, ahead):
        rows = session.execute(select(SourceOffsetRow.partition, SourceOffsetRow.offset).where(
            SourceOffsetRow.source == offset_key_for(session, source, group)))
        stored[group] = {row.partition: row.offset for row in rows}
    return {p: (stored[behind].get(p, 0), o) for p, o in sorted(stored[ahead].items())
            if o > stored[behind].get(p, 0)}


def _copy_offsets(session: Session, old_key: str, new_key: str) -> None:
    if old_key == new_key:
        return
    query = select(SourceOffsetRow).where(SourceOffsetRow.source == new_key)
    if session.scalars(query).first() is not None:
        return
    for row in session.scalars(select(SourceOffsetRow).where(SourceOffsetRow.source == old_key)):
        session.add(SourceOffsetRow(source=new_key, source_name=new_key, partition=row.partition,
                                    offset=row.offset, updated_at=utcnow()))
