"""MemorySource: the finite in-memory source for tests, with commits, seeks and rebalances."""

from __future__ import annotations

import pytest

from connectors import (
    MemorySource,
    OffsetRegressionError,
    PartitionNotAssignedError,
    Record,
    Source,
    SourceConfigError,
)


def offsets(records: list[Record]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def test_values_spread_round_robin_with_per_partition_offsets() -> None:
    source = MemorySource(["a", b"b", "c", "d", "e"], partitions=2, topic="t")
    records = source.poll(10, 0)
    assert offsets(records) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    assert [r.value for r in records] == [b"a", b"b", b"c", b"d", b"e"]
    assert {r.topic for r in records} == {"t"}
    assert source.name == "memory:t"
    assert source.assignment() == {("t", 0), ("t", 1)}
    assert source.exhausted
    assert isinstance(source, Source)


def test_records_are_served_as_given() -> None:
    given = [Record("x", 3, 10, b"k", b"v1", 5), Record("y", 0, 7, None, b"v2", None)]
    source = MemorySource(given)
    assert source.poll(10, 0) == given
    assert source.assignment() == {("x", 3), ("y", 0)}


def test_batches_and_exhaustion() -> None:
    source = MemorySource([b"%d" % i for i in range(5)])
    assert len(source.poll(2, 0)) == 2
    assert not source.exhausted
    assert len(source.poll(10, 0)) == 3
    assert source.poll(10, 0) == []
    assert source.exhausted


def test_seek_replays_one_partition_only() -> None:
    source = MemorySource([b"%d" % i for i in range(6)], partitions=2)
    source.poll(10, 0)
    source.seek({("memory", 1): 1})
    assert offsets(source.poll(10, 0)) == [(1, 1), (1, 2)]


def test_commit_only_increases_and_seek_lowers_the_floor() -> None:
    source = MemorySource([b"a", b"b", b"c"])
    tp = ("memory", 0)
    source.poll(10, 0)
    source.commit({tp: 3})
    with pytest.raises(OffsetRegressionError):
        source.commit({tp: 2})
    with pytest.raises(PartitionNotAssignedError):
        source.commit({("memory", 5): 1})
    source.seek({tp: 1})
    source.commit({tp: 2})
    assert source.committed == {tp: 2}


def test_rebalance_fires_at_the_next_poll_and_filters_partitions() -> None:
    source = MemorySource([b"%d" % i for i in range(8)], partitions=4)
    events: list[tuple[str, set[tuple[str, int]]]] = []
    source.on_assign(lambda p: events.append(("assign", p)))
    source.on_revoke(lambda p: events.append(("revoke", p)))
    assert len(source.poll(2, 0)) == 2
    everything = {("memory", p) for p in range(4)}
    assert events == [("assign", everything)]
    source.rebalance({("memory", 2), ("memory", 3)})
    assert events == [("assign", everything)]  # nothing happens until the next poll
    rest = source.poll(10, 0)
    assert offsets(rest) == [(2, 0), (3, 0), (2, 1), (3, 1)]
    assert events[1:] == [("revoke", everything), ("assign", {("memory", 2), ("memory", 3)})]
    source.close()
    assert events[-1] == ("revoke", {("memory", 2), ("memory", 3)})


def test_rejects_bad_input() -> None:
    with pytest.raises(SourceConfigError, match="partitions"):
        MemorySource([b"a"], partitions=0)
    with pytest.raises(SourceConfigError, match="not a mix"):
        MemorySource([b"a", Record("t", 0, 0, None, b"b", None)])
    with pytest.raises(SourceConfigError, match="bytes or str"):
        MemorySource([1, 2])  # type: ignore[list-item]
