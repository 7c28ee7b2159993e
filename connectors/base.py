"""The source contract: records with their position, offsets committed after persistence.

A source hands out :class:`Record` batches with ``poll``. The caller processes a batch, stores the
results together with the offsets (next offset to read = last processed + 1, per partition) in
one database transaction, and only then calls ``commit``: the database is the source of truth,
the source's own committed offsets are a hint for consumers that have no database state yet.

Partition ownership can change while a source runs (Kafka consumer groups). ``on_revoke``
callbacks run before partitions are taken away, ``on_assign`` callbacks after new ones arrive
(restore state, ``seek`` to the stored offsets). Callbacks run inside ``poll``; they receive a
set of ``(topic, partition)`` pairs and are never called with an empty set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from connectors.errors import OffsetRegressionError, PartitionNotAssignedError, SourceError

__all__ = [
    "FixedAssignmentSource",
    "OffsetLedger",
    "PartitionsCallback",
    "RebalanceCallbacks",
    "Record",
    "Source",
    "TopicPartition",
]

#: A partition of a topic: ``(topic, partition)``.
TopicPartition = tuple[str, int]

#: An ``on_assign`` / ``on_revoke`` callback: receives the partitions concerned.
PartitionsCallback = Callable[[set[TopicPartition]], None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a source, with where it came from.

    ``value`` is the raw payload (a Kafka message value, a JSONL line without its newline): it is
    never decoded here, so that undecodable input reaches the pipeline's dead letters.
    ``timestamp_ms`` is the producer's or broker's time in milliseconds since the epoch, or None.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int | None


@runtime_checkable
class Source(Protocol):
    """What the worker needs of a source (Kafka topic, JSONL file, in-memory list)."""

    @property
    def name(self) -> str:
        """Stable identifier, e.g. ``file:/abs/events.jsonl`` or ``kafka:predictions``."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once a finite source has delivered its last record (never for Kafka)."""
        ...

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one."""
        ...

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record that everything before ``offsets[tp]`` is durably processed."""
        ...

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Continue reading each partition at the given offset."""
        ...

    def assignment(self) -> set[TopicPartition]:
        """The partitions this source currently reads."""
        ...

    def on_assign(self, callback: PartitionsCallback) -> None:
        """Call ``callback`` with the partitions gained at each assignment."""
        ...

    def on_revoke(self, callback: PartitionsCallback) -> None:
        """Call ``callback`` with the partitions about to be lost (also at ``close``)."""
        ...

    def close(self) -> None:
        """Fire the revoke callbacks for the current assignment and release resources."""
        ...


class RebalanceCallbacks:
    """The ``on_assign`` / ``on_revoke`` callbacks of one source, run in registration order."""

    def __init__(self) -> None:
        self._assign: list[PartitionsCallback] = []
        self._revoke: list[PartitionsCallback] = []

    def on_assign(self, callback: PartitionsCallback) -> None:
        self._assign.append(callback)

    def on_revoke(self, callback: PartitionsCallback) -> None:
        self._revoke.append(callback)

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        _call_each(self._assign, set(partitions))

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        _call_each(self._revoke, set(partitions))


def _call_each(callbacks: list[PartitionsCallback], partitions: set[TopicPartition]) -> None:
    if not partitions:
        return
    for callback in callbacks:
        # Each callback gets its own copy: one callback mutating the set must not affect the next.
        callback(set(partitions))


class OffsetLedger:
    """Committed offsets per partition, enforcing that they only ever increase.

    A commit equal to the current one is allowed (idempotent); a lower one raises
    :class:`OffsetRegressionError`. ``rewind`` (called by ``seek``) moves a partition's floor to
    the new position, so that an explicit replay can commit again from there.
    """

    def __init__(self) -> None:
        self._committed: dict[TopicPartition, int] = {}

    @property
    def committed(self) -> dict[TopicPartition, int]:
        """A copy of the last committed offset per partition."""
        return dict(self._committed)

    def check(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            floor = self._committed.get(tp, 0)
            if offset < floor:
                raise OffsetRegressionError(
                    f"commit of {tp[0]}[{tp[1]}] at offset {offset} is below {floor}: committed "
                    "offsets only ever increase (commit last processed offset + 1, after the "
                    "results are persisted)"
                )

    def record(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._committed.update(offsets)

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._committed.update(offsets)


class ClosesOnExit:
    """``with source:`` closes the source on the way out (every source is a context manager)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class FixedAssignmentSource(ClosesOnExit):
    """Shared behaviour of finite sources whose partitions never move (file, memory).

    The whole assignment is announced to ``on_assign`` callbacks at the first ``poll`` (as a
    Kafka consumer announces its first assignment), and to ``on_revoke`` callbacks at ``close``.
    Subclasses call :meth:`_start_poll` at the top of ``poll`` and implement ``_close``.
    """

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self._partitions = set(partitions)
        self._callbacks = RebalanceCallbacks()
        self._ledger = OffsetLedger()
        self._announced = False
        self._closed = False

    @property
    def committed(self) -> dict[TopicPartition, int]:
        """The offsets committed so far (next offset to read, per partition)."""
        return self._ledger.committed

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def on_assign(self, callback: PartitionsCallback) -> None:
        self._callbacks.on_assign(callback)

    def on_revoke(self, callback: PartitionsCallback) -> None:
        self._callbacks.on_revoke(callback)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._check_owned(offsets, "commit")
        self._ledger.check(offsets)
        self._ledger.record(offsets)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._announced:
                self._callbacks.revoked(self._partitions)
        finally:
            self._close()

    def _start_poll(self) -> None:
        if self._closed:
            raise SourceError(f"{type(self).__name__} is closed")
        if not self._announced:
            self._announced = True
            self._callbacks.assigned(self._partitions)

    def _check_owned(self, offsets: Mapping[TopicPartition, int], action: str) -> None:
        unknown = sorted(set(offsets) - self._partitions)
        if unknown:
            raise PartitionNotAssignedError(
                f"cannot {action} {unknown}: this source reads only {sorted(self._partitions)}"
            )

    def _close(self) -> None:
        """Release the subclass's resources."""
