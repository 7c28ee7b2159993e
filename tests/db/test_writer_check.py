"""The one-writer check of a batch (bindings and fencing tokens) in one statement on PostgreSQL,
two on SQLite, whatever the number of streams and partitions; the same refusals as before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitor.db.errors import FencedError, StreamBoundError
from monitor.db.fencing import Writer, claim_partitions, get_binding
from monitor.db.models import StreamWriterRow, TracePointRow
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch, Fencing
from monitor.streams.records import SourceOffset, TracePoint
from tests.support.databases import executed
from tests.support.records import T0

SOURCE, GROUP = "kafka:events", "workers"


def traces(streams: list[str]) -> list[TracePoint]:
    return [TracePoint(s, "conditional", 0, T0, 0.5, 0.2, 0.7, 9.2) for s in streams]


@contextmanager
def writer_statements(session: Session) -> Iterator[list[str]]:
    """The statements that read or write ``stream_writers`` or ``writer_fences``."""
    found: list[str] = []
    with executed(session.get_bind()) as statements:
        yield found
    found += [s for s, _, _ in statements if "stream_writers" in s or "writer_fences" in s]


def batch(streams: list[str], fences: dict[tuple[str, int], int], group: str = GROUP) -> Batch:
    return Batch(trace_points=traces(streams),
                 offsets=[SourceOffset(SOURCE, p, 10) for _, p in sorted(fences)],
                 fencing=Fencing(SOURCE, group, fences=fences, streams=streams))


@pytest.mark.parametrize("n", [1, 6])
def test_one_round_trip_per_batch_whatever_the_streams_and_partitions(
    db_session: Session, n: int
) -> None:
    key, epochs = claim_partitions(db_session, SOURCE, GROUP, range(n))
    streams = [f"s{i}" for i in range(n)]
    fences = {(key, p): e for p, e in epochs.items()}
    expected = 1 if db_session.get_bind().dialect.name == "postgresql" else 2
    for _ in range(2):  # binding the streams, then finding them bound
        with writer_statements(db_session) as seen:
            persist_batch(db_session, batch(streams, fences))
        assert len(seen) == expected, seen  # was 2 per stream + 1 per partition
    with db_session.begin():
        assert {get_binding(db_session, s) for s in streams} == {Writer(SOURCE, GROUP)}
        assert db_session.scalar(select(func.count()).select_from(TracePointRow)) == n


def test_a_stream_bound_elsewhere_is_refused_before_a_fence(db_session: Session) -> None:
    key, epochs = claim_partitions(db_session, SOURCE, "other", [0])
    persist_batch(db_session, batch(["b"], {(key, 0): epochs[0]}, group="other"))
    claim_partitions(db_session, SOURCE, GROUP, [0])  # "other" is fenced off partition 0 now
    with pytest.raises(StreamBoundError) as refused:
        persist_batch(db_session, batch(["a", "b"], {(key, 0): epochs[0]}))
    assert str(refused.value) == (
        "stream 'b' is bound to kafka:events (consumer group 'other'), not to this writer "
        "(kafka:events (consumer group 'workers')): nothing is written for it here; to move it, "
        "run `monitor streams rebind b --source kafka:events --group workers`")
    with db_session.begin():  # nothing of the batch, not even a's binding
        assert db_session.scalar(select(func.count()).select_from(StreamWriterRow)) == 1
        assert db_session.scalar(select(func.count()).select_from(TracePointRow)) == 1


def test_a_superseded_or_missing_fence_is_refused(db_session: Session) -> None:
    key, epochs = claim_partitions(db_session, SOURCE, GROUP, [0, 1])
    claim_partitions(db_session, SOURCE, GROUP, [1])  # partition 1 reassigned: epoch 2
    with pytest.raises(FencedError, match="partition 1: this writer's fencing epoch 1 was "
                       "superseded by epoch 2 of group 'workers'"):
        persist_batch(db_session, batch(["a"], {(key, p): e for p, e in epochs.items()}))
    with pytest.raises(FencedError, match=r"partition 7: .* superseded by nothing"):
        persist_batch(db_session, batch(["a"], {(key, 0): epochs[0], (key, 7): 1}))
    with db_session.begin():
        assert db_session.scalar(select(func.count()).select_from(StreamWriterRow)) == 0
    persist_batch(db_session, batch(["a"], {(key, 0): epochs[0]}))  # the current epoch passes
