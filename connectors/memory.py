"""In-memory source: a real, finite source for tests (ours and users')."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from connectors.base import FixedAssignmentSource, Record, TopicPartition
from connectors.errors import SourceConfigError

__all__ = ["MemorySource"]


class MemorySource(FixedAssignmentSource):
    """Serve a fixed list of records, with offsets, commits, seeks and simulated rebalances.

    Parameters
    ----------
    records_or_values
        Either :class:`~connectors.base.Record` objects (served as given, in this order), or raw
        values (``bytes``, or ``str`` encoded as UTF-8) that become records of ``topic``: value
        ``i`` goes to partition ``i % partitions`` at the next offset of that partition.
    partitions
        Number of partitions the values are spread over (ignored for ``Record`` input).
    topic
        Topic of the records built from values; the source's ``name`` is ``memory:<topic>``.

    Notes
    -----
    Records are served in input order, skipping partitions that are not assigned.
    :meth:`rebalance` changes the assignment at the next ``poll``, firing the revoke and assign
    callbacks there, as a Kafka consumer does.

    Examples
    --------
    >>> source = MemorySource([b'{"a": 1}', b'{"a": 2}', b'{"a": 3}'], partitions=2)
    >>> [(r.partition, r.offset) for r in source.poll(max_records=10, timeout_s=0)]
    [(0, 0), (1, 0), (0, 1)]
    >>> source.exhausted
    True
    """

    def __init__(
        self,
        records_or_values: Iterable[Record | bytes | str],
        partitions: int = 1,
        topic: str = "memory",
    ) -> None:
        if partitions < 1:
            raise SourceConfigError(f"partitions must be >= 1, got {partitions}")
        self.partitions = partitions
        self.topic = topic
        items = list(records_or_values)
        self._records = _as_records(items, topic, partitions)
        self._cursor = 0  # index into _records of the next candidate
        self._position: dict[TopicPartition, int] = {}  # next offset to serve, per partition
        self._pending: set[TopicPartition] | None = None
        tps = {(r.topic, r.partition) for r in self._records}
        if not items or not isinstance(items[0], Record):
            tps |= {(topic, p) for p in range(partitions)}
        super().__init__(tps)

    @property
    def name(self) -> str:
        return f"memory:{self.topic}"

    @property
    def exhausted(self) -> bool:
        return self._cursor >= len(self._records)

    def poll(self, max_records: int, timeout_s: float = 0.0) -> list[Record]:
        """Up to ``max_records`` records; ``timeout_s`` is ignored (the list never grows)."""
        self._start_poll()
        self._apply_rebalance()
        out: list[Record] = []
        while self._cursor < len(self._records) and len(out) < max_records:
            record = self._records[self._cursor]
            self._cursor += 1
            tp = (record.topic, record.partition)
            if tp in self._partitions and record.offset >= self._position.get(tp, 0):
                out.append(record)
                self._position[tp] = record.offset + 1
        return out

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._check_owned(offsets, "seek")
        for tp, offset in offsets.items():
            if offset < 0:
                raise SourceConfigError(f"cannot seek {tp} to {offset}: offsets start at 0")
            self._position[tp] = offset
        # Rescan from the start: records before each position are skipped by the offset check.
        self._cursor = 0
        self._ledger.rewind(offsets)

    def rebalance(self, partitions: Iterable[TopicPartition]) -> None:
        """Own exactly ``partitions`` from the next ``poll`` on (revoke, then assign, there)."""
        self._pending = set(partitions)

    def _apply_rebalance(self) -> None:
        if self._pending is None:
            return
        new, self._pending = self._pending, None
        self._callbacks.revoked(self._partitions)
        self._partitions = new
        self._cursor = 0
        self._callbacks.assigned(new)


def _as_records(items: list[Record | bytes | str], topic: str, partitions: int) -> list[Record]:
    if all(isinstance(item, Record) for item in items):
        return [item for item in items if isinstance(item, Record)]
    if any(isinstance(item, Record) for item in items):
        raise SourceConfigError("give either Record objects or raw values, not a mix")
    next_offset = [0] * partitions
    records = []
    for i, item in enumerate(items):
        value = item.encode() if isinstance(item, str) else item
        if not isinstance(value, bytes):
            raise SourceConfigError(f"values must be bytes or str, got {type(item).__name__}")
        partition = i % partitions
        records.append(Record(topic, partition, next_offset[partition], None, value, None))
        next_offset[partition] += 1
    return records
