"""persist_batch: one transaction per batch, idempotent replays, monotonic offsets, exact state."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from monitor.db.engine import session_factory
from monitor.db.errors import InvalidRecordError, PersistenceError, StaleWriterError
from monitor.db.models import (
    AlarmRow,
    Base,
    CheckpointRow,
    DeadLetterRow,
    OODFlagRow,
    OODWindowRow,
    SourceOffsetRow,
    TracePointRow,
)
from monitor.db.queries import ood_flags_query, traces_query
from monitor.db.replay_store import persist_replay
from monitor.db.store import load_offsets, load_state, persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import DeadLetter, SourceOffset, TracePoint
from monitor.streams.state import Checkpoint
from tests.support.records import T0, alarm, window

SOURCE = "file:events.jsonl"




def trace(i: int, detector: str = "conditional") -> TracePoint:
    log_m, p, log_s, log_t = np.random.default_rng(i).normal(size=4).tolist()
    return TracePoint("bikes", detector, i, T0 + timedelta(seconds=i), log_m, p, log_s, log_t)




def letter(offset: int, payload: bytes = b"{not json") -> DeadLetter:
    return DeadLetter(SOURCE, 0, offset, "not JSON", payload, T0, None)


def checkpoint(event_index: int, seed: int = 0) -> Checkpoint:
    rng = np.random.default_rng(seed)
    state = {"log_s": float(rng.normal()), "nan": math.nan, "jumpers": (0.25, 0.5)}
    return Checkpoint("bikes", 1, event_index, state, {"scores": rng.normal(size=50)})


def full_batch(start: int, stop: int) -> dict[str, Any]:
    return {
        "alarms": [alarm(i) for i in range(start, stop, 7)],
        "trace_points": [trace(i) for i in range(start, stop)],
        "ood_windows": [window(i) for i in range(start // 10, stop // 10)],
        "checkpoints": {"bikes": checkpoint(stop)},
        "offsets": [SourceOffset(SOURCE, 0, stop), SourceOffset(SOURCE, 1, stop // 2)],
        "dead_letters": [letter(start)],
    }


def row_counts(session: Session) -> dict[str, int]:
    counts = {
        t.name: session.execute(select(func.count()).select_from(t)).scalar_one()
        for t in Base.metadata.sorted_tables
    }
    session.rollback()
    return counts


def test_batch_round_trips_every_record(db_session: Session) -> None:
    batch = full_batch(0, 40)
    persist_batch(db_session, Batch(**batch))

    stored = [r.to_record() for r in db_session.scalars(select(AlarmRow).order_by(AlarmRow.ts))]
    assert stored == batch["alarms"]
    traces = [r.to_record() for r in db_session.scalars(traces_query("bikes"))]
    assert traces == batch["trace_points"]  # floats exact, ts aware UTC with microseconds
    windows = list(db_session.scalars(select(OODWindowRow).order_by(OODWindowRow.window_index)))
    flags = [f.event_id for f in db_session.scalars(ood_flags_query("bikes"))]
    assert [w.to_record(tuple(flags[2 * k : 2 * k + 2])) for k, w in enumerate(windows)] == batch[
        "ood_windows"
    ]
    assert load_offsets(db_session, SOURCE) == {0: 40, 1: 20}
    assert db_session.scalars(select(DeadLetterRow)).one().payload == b"{not json"


def test_restored_checkpoint_is_bit_for_bit(db_session: Session) -> None:
    assert load_state(db_session, "bikes") is None
    persist_batch(db_session, Batch(checkpoints={"bikes": checkpoint(10, seed=1)}))
    persist_batch(db_session, Batch(checkpoints={"bikes": checkpoint(20, seed=2)}))  # replaces
    restored = load_state(db_session, "bikes")
    expected = checkpoint(20, seed=2)
    assert restored is not None
    assert (restored.event_index, restored.version) == (20, 1)
    assert restored.state["log_s"].hex() == expected.state["log_s"].hex()
    assert math.isnan(restored.state["nan"]) and restored.state["jumpers"] == (0.25, 0.5)
    assert restored.arrays["scores"].tobytes() == expected.arrays["scores"].tobytes()
    assert db_session.execute(select(func.count()).select_from(CheckpointRow)).scalar_one() == 1


def test_replaying_a_batch_stores_nothing_twice(db_session: Session) -> None:
    batch = full_batch(0, 40)
    persist_batch(db_session, Batch(**batch))
    before = row_counts(db_session)
    persist_batch(db_session, Batch(**batch))
    # A replay that regenerated alarms with fresh objects (same deterministic ids) is a no-op too.
    persist_batch(db_session, Batch(alarms=[alarm(i) for i in range(0, 40, 7)]))
    assert row_counts(db_session) == before
    assert before["alarms"] == 6 and before["trace_points"] == 40


def test_an_error_mid_batch_leaves_nothing(db_session: Session) -> None:
    bad = TracePoint("bikes", "conditional", 2**70, T0, 0.0, 0.5, 0.0, 1.0)  # overflows BIGINT
    batch = full_batch(0, 40)
    batch["trace_points"] = [*batch["trace_points"], bad]
    with pytest.raises((SQLAlchemyError, OverflowError)):
        persist_batch(db_session, Batch(**batch))
    assert not db_session.in_transaction()
    assert set(row_counts(db_session).values()) == {0}
    persist_batch(db_session, Batch(**full_batch(0, 40)))  # the session is usable afterwards
    assert row_counts(db_session)["alarms"] == 6


def test_a_replay_batch_moving_offsets_is_refused_before_writing(db_session: Session) -> None:
    batch = Batch(alarms=[alarm(0)], offsets=[SourceOffset(SOURCE, 0, 5)])
    with pytest.raises(ValueError, match="carries no offsets"):
        persist_replay(db_session, batch)
    assert not db_session.in_transaction()
    assert row_counts(db_session)["alarms"] == 0


def test_offsets_only_increase(db_session: Session) -> None:
    persist_batch(db_session, Batch(offsets=[SourceOffset(SOURCE, 0, 100)]))
    persist_batch(db_session, Batch(offsets=[SourceOffset(SOURCE, 0, 100)]))  # equal: a replay
    with pytest.raises(StaleWriterError, match="from 100 to 99") as info:
        persist_batch(db_session, Batch(alarms=[alarm(1)], offsets=[SourceOffset(SOURCE, 0, 99)]))
    assert (info.value.stored, info.value.attempted) == (100, 99)
    assert row_counts(db_session)["alarms"] == 0  # the regressing batch wrote nothing
    persist_batch(db_session,
                  Batch(offsets=[SourceOffset(SOURCE, 0, 150), SourceOffset(SOURCE, 3, 0)]))
    assert load_offsets(db_session, SOURCE) == {0: 150, 3: 0}
    assert load_offsets(db_session, "kafka://other") == {}


def test_an_offset_regression_inside_one_batch_is_refused(db_session: Session) -> None:
    offsets = [SourceOffset(SOURCE, 0, 10), SourceOffset(SOURCE, 0, 5)]
    with pytest.raises(StaleWriterError):
        persist_batch(db_session, Batch(offsets=offsets))
    assert row_counts(db_session)["source_offsets"] == 0


def test_a_stale_writer_cannot_move_offsets_back(db_engine: Engine, db_session: Session) -> None:
    # Two workers (sessions): the one that read older offsets must not overwrite newer ones.
    other = session_factory(db_engine)()
    try:
        persist_batch(db_session, Batch(offsets=[SourceOffset(SOURCE, 0, 10)]))
        assert load_offsets(other, SOURCE) == {0: 10}
        persist_batch(db_session, Batch(offsets=[SourceOffset(SOURCE, 0, 20)]))
        with pytest.raises(StaleWriterError):
            persist_batch(other, Batch(offsets=[SourceOffset(SOURCE, 0, 15)]))
    finally:
        other.close()
    assert load_offsets(db_session, SOURCE) == {0: 20}


def test_dead_letters_are_truncated_and_unique_per_location(db_session: Session) -> None:
    big = b"x" * (DeadLetter.MAX_PAYLOAD + 10)
    persist_batch(db_session, Batch(dead_letters=[letter(5, big), letter(6)]))
    persist_batch(db_session, Batch(dead_letters=[letter(5, big)]))
    rows = list(db_session.scalars(select(DeadLetterRow).order_by(DeadLetterRow.offset)))
    assert [len(r.payload) for r in rows] == [DeadLetter.MAX_PAYLOAD, 9]
    assert rows[0].ts == T0


def test_nan_trace_values_are_stored_as_null(db_session: Session) -> None:
    point = TracePoint("bikes", "covariate", 3, T0, -math.inf, math.nan, math.inf, 9.2, None)
    persist_batch(db_session, Batch(trace_points=[point]))
    row = db_session.scalars(select(TracePointRow)).one()
    assert (row.log_martingale, row.p_value, row.log_statistic) == (-math.inf, None, math.inf)
    back = row.to_record()
    assert math.isnan(back.p_value) and back.log_martingale == -math.inf


def test_json_columns_accept_non_finite_and_numpy_values(db_session: Session) -> None:
    odd = alarm(1)
    evidence = {"ratio": math.inf, "missing": math.nan, "n": np.int64(3), "w": np.float32(0.5)}
    persist_batch(db_session, Batch(alarms=[replace(odd, evidence=evidence)]))
    row = db_session.scalars(select(AlarmRow)).one()
    # JSONB keeps numbers as exact decimals but prints 1e300 without an exponent, which Python
    # reads back as an int of the same decimal value: float() recovers the float exactly.
    assert float(row.evidence.pop("ratio")) == 1e300
    assert row.evidence == {"missing": None, "n": 3, "w": 0.5}


def test_invalid_records_are_refused_before_writing(db_session: Session) -> None:
    nan_alarm = replace(alarm(1), statistic=math.nan)
    with pytest.raises(InvalidRecordError, match="NaN statistic"):
        persist_batch(db_session, Batch(alarms=[alarm(2), nan_alarm]))
    with pytest.raises(InvalidRecordError, match="under key 'cars'"):
        persist_batch(db_session, Batch(checkpoints={"cars": checkpoint(1)}))
    assert set(row_counts(db_session).values()) == {0}


def test_persist_batch_refuses_a_session_with_an_open_transaction(db_session: Session) -> None:
    db_session.execute(select(1))
    with pytest.raises(PersistenceError, match="own transaction"):
        persist_batch(db_session, Batch(alarms=[alarm(1)]))
    db_session.rollback()
    persist_batch(db_session, Batch(alarms=[alarm(1)]))


def test_flags_belong_to_their_window(db_session: Session) -> None:
    persist_batch(db_session, Batch(ood_windows=[window(0), window(1)]))
    flags = list(db_session.scalars(ood_flags_query("bikes", [1])))
    assert [(f.window_index, f.event_id) for f in flags] == [(1, "e-1a"), (1, "e-1b")]
    assert db_session.execute(select(func.count()).select_from(OODFlagRow)).scalar_one() == 4
    assert db_session.execute(select(func.count()).select_from(SourceOffsetRow)).scalar_one() == 0


def test_concurrent_writers_wait_for_each_other(db_engine: Engine, db_session: Session) -> None:
    # The worker persists batches while the API acknowledges alarms: neither may fail with
    # "database is locked" (SQLite) or lose an update.
    from concurrent.futures import ThreadPoolExecutor

    from monitor.db.queries import acknowledge_alarm

    persist_batch(db_session, Batch(alarms=[alarm(i, stream="ack") for i in range(20)]))
    ids = [alarm(i, stream="ack").id for i in range(20)]
    factory = session_factory(db_engine)

    def worker() -> None:
        with factory() as session:
            for k in range(20):
                persist_batch(session, Batch(
                    trace_points=[trace(1000 * k + j) for j in range(50)],
                    offsets=[SourceOffset(SOURCE, 0, k + 1)],
                ))

    def api() -> None:
        with factory() as session:
            for alarm_id in ids:
                acknowledge_alarm(session, alarm_id, by="alice")

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(worker), pool.submit(api)]:
            future.result()
    counts = row_counts(db_session)
    assert counts["trace_points"] == 1000 and load_offsets(db_session, SOURCE) == {0: 20}
    acked = select(func.count()).where(AlarmRow.acknowledged_by == "alice")
    assert db_session.execute(acked).scalar_one() == 20


def test_a_revision_updates_the_alarm_and_keeps_every_version(db_session: Session) -> None:
    from monitor.db.models import AlarmRevisionRow
    from monitor.db.queries import alarm_revisions_query

    raised = replace(alarm(1), kind="insufficient_evidence", evidence={"evidence_events": 1})
    revised = replace(raised, kind="extreme_covariate_shift", evidence={"evidence_events": 10},
                      revision=2, revised_at=T0 + timedelta(seconds=9))
    persist_batch(db_session, Batch(alarms=[raised]))
    persist_batch(db_session, Batch(alarms=[revised]))
    # A replay of both batches (a crash before the offsets moved) changes nothing, and an older
    # version arriving after a newer one never rolls the alarm back.
    persist_batch(db_session, Batch(alarms=[raised, revised]))
    persist_batch(db_session, Batch(alarms=[raised]))
    row = db_session.get(AlarmRow, raised.id)
    assert row is not None and row.to_record() == revised
    assert (row.kind, row.revision) == ("extreme_covariate_shift", 2)
    versions = [(r.revision, r.kind, r.evidence, r.revised_at)
                for r in db_session.scalars(alarm_revisions_query(raised.id))]
    assert versions == [(1, "insufficient_evidence", {"evidence_events": 1}, None),
                        (2, "extreme_covariate_shift", {"evidence_events": 10}, revised.revised_at)]
    assert db_session.scalar(select(func.count()).select_from(AlarmRevisionRow)) == 2
    db_session.rollback()


def test_an_alarm_and_its_revision_in_one_batch(db_session: Session) -> None:
    raised = replace(alarm(2), kind="insufficient_evidence")
    revised = replace(raised, kind="concept_shift", revision=2, revised_at=T0)
    persist_batch(db_session, Batch(alarms=[raised, revised]))
    row = db_session.get(AlarmRow, raised.id)
    assert row is not None and (row.kind, row.revision) == ("concept_shift", 2)
    db_session.rollback()
