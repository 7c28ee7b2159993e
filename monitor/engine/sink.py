"""Where the worker's batches go: the :class:`Sink` protocol, and :class:`NullSink`.

The worker calls only these methods. A sink stores a batch's results, detector states and
offsets atomically, loads them back, claims partitions for one writer (fencing a zombie out),
and says what each of its errors means to the worker (:meth:`Sink.fault`): retry, drop the batch
and resynchronise, set a stream aside, dead-letter a record, or stop. The database's sink
(:class:`monitor.db.sink.DatabaseSink`) translates its errors into these kinds, so the engine
knows no database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from monitor.engine.batch import Batch, Fencing, TopicPartition

if TYPE_CHECKING:
    from monitor.streams.calibration import Calibration
    from monitor.streams.config import StreamConfig

__all__ = ["Batch", "Fault", "FaultKind", "Fencing", "NullSink", "Sink", "TopicPartition"]


class FaultKind(Enum):
    """What a sink's error means to the worker."""

    #: The store is unavailable for now (connection lost, server restarting, deadlock, busy):
    #: retry with backoff until the deadline.
    TRANSIENT = "transient"
    #: The store failed in a way waiting cannot cure (permissions, schema, a full quota): stop.
    PERMANENT = "permanent"
    #: Another writer stored later offsets or took the partition (this worker is a zombie): drop
    #: the batch and resynchronise.
    SUPERSEDED = "superseded"
    #: A stream of the batch is bound to another writer: set the stream aside.
    BOUND = "bound"
    #: The store refuses the batch's content (a deterministic error): find the record and
    #: dead-letter it.
    CONTENT = "content"


@dataclass(frozen=True)
class Fault:
    """A sink's error as the worker acts on it.

    ``message`` is one line: the cause and what to do (never the statement or its parameters).
    A :attr:`FaultKind.BOUND` fault names the ``stream`` and the writer it is ``bound`` to.
    """

    kind: FaultKind
    message: str
    stream: str = ""
    bound: str = ""

    def __str__(self) -> str:
        return self.message


class Sink(Protocol):
    """Where batches go: the database, or nowhere (``NullSink``)."""

    def load_offsets(
        self, keys: set[TopicPartition], source: Callable[[str], str]
    ) -> dict[TopicPartition, int]:
        """Stored next offsets of the partitions ``keys``; ``source`` maps a topic to its key."""
        ...

    def load_state(self, stream: str) -> dict[str, Any] | None:
        """The stream's stored detector state, or None."""
        ...

    def persist(self, batch: Batch) -> None:
        """Store ``batch`` atomically (all or nothing): its results, checkpoints and offsets,
        checked against its fencing (one writer per stream)."""
        ...

    def claim(self, source: str, group: str, partitions: set[int]) -> tuple[str, dict[int, int]]:
        """Take ``partitions`` of ``source`` (``SCHEME:TOPIC``) for ``group``: the offset key to
        store them under and each partition's new fencing epoch."""
        ...

    def fault(self, exc: BaseException) -> Fault | None:
        """What the error ``exc`` of this sink means to the worker; ``None``: not the sink's
        failure (a bug: the worker lets it through)."""
        ...

    def stream_versions(self) -> dict[str, int] | None:
        """The registered streams' configuration versions, or None without a registry."""
        ...

    def registered_stream(self, name: str) -> tuple[StreamConfig, Calibration, int] | None:
        """One registered stream's configuration, calibration and version."""
        ...


class NullSink:
    """Keeps nothing: for ``monitor run --no-store`` and benchmarks of the bare pipeline."""

    def load_offsets(
        self, keys: set[TopicPartition], source: Callable[[str], str]
    ) -> dict[TopicPartition, int]:
        return {}

    def load_state(self, stream: str) -> dict[str, Any] | None:
        return None

    def persist(self, batch: Batch) -> None:
        return None

    def claim(self, source: str, group: str, partitions: set[int]) -> tuple[str, dict[int, int]]:
        """No fencing: the offset key is the source's, and no partition has an epoch."""
        return source, {}

    def fault(self, exc: BaseException) -> Fault | None:
        return None

    def stream_versions(self) -> dict[str, int] | None:
        return None

    def registered_stream(self, name: str) -> tuple[StreamConfig, Calibration, int] | None:
        return None
