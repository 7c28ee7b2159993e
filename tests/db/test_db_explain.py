"""Performance windows and late alarm evidence in the database, on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session

from monitor.db.errors import InvalidRecordError
from monitor.db.models import AlarmRow
from monitor.db.repositories import PERFORMANCE_FIELDS, performance_windows
from monitor.db.store import persist_batch
from monitor.records import Alarm, AlarmEvidence, PerformanceWindow

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def window(i: int, stream: str = "bikes") -> PerformanceWindow:
    return PerformanceWindow(stream, i, 500 * i, 500 * i + 510, T0 + timedelta(minutes=i), 500,
                             {"mae": 1.0 + i, "rmse": 2.0 + i})


def test_performance_windows_round_trip_and_filter(db_session: Session) -> None:
    persist_batch(db_session, performance_windows=[window(i) for i in range(5)]
                  + [window(0, "other")])
    persist_batch(db_session, performance_windows=[window(4)])  # a replay stores nothing twice
    rows = performance_windows(db_session, "bikes")
    assert [r["window_index"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(tuple(r) == PERFORMANCE_FIELDS for r in rows)
    assert rows[2] == {"stream": "bikes", "window_index": 2, "start_index": 1000,
                       "end_index": 1510, "ts": T0 + timedelta(minutes=2), "n": 500,
                       "metrics": {"mae": 3.0, "rmse": 4.0}}
    since, until = T0 + timedelta(minutes=1), T0 + timedelta(minutes=4)
    assert [r["window_index"] for r in performance_windows(db_session, "bikes", since, until)] \
        == [1, 2, 3]
    assert [r["window_index"] for r in performance_windows(db_session, "bikes", limit=2)] == [3, 4]
    with pytest.raises(ValueError, match="limit"):
        performance_windows(db_session, "bikes", limit=0)


def test_a_non_finite_metric_is_refused(db_session: Session) -> None:
    bad = PerformanceWindow("bikes", 0, 0, 9, T0, 10, {"mae": math.inf})
    with pytest.raises(InvalidRecordError, match="mae"):
        persist_batch(db_session, performance_windows=[bad])


def test_late_evidence_is_merged_into_the_stored_alarm(db_session: Session) -> None:
    alarm = Alarm("bikes", "covariate", "benign_covariate_shift", "e-1", 1, T0, None, 1e4, 1e4,
                  "shiryaev_roberts", {"weights_ess": 800.0})
    persist_batch(db_session, alarms=[alarm])
    attribution = {"method": "ks_holm_post_alarm", "features": [{"feature": "f3"}]}
    persist_batch(db_session, alarm_evidence=[
        AlarmEvidence("bikes", alarm.id, {"attribution": attribution}),
        AlarmEvidence("bikes", "no-such-alarm", {"attribution": attribution}),  # skipped
    ])
    with db_session.begin():
        row = db_session.get(AlarmRow, alarm.id)
        assert row is not None
        assert row.evidence == {"weights_ess": 800.0, "attribution": attribution}


def test_the_alarm_report_reads_the_stored_performance_windows(db_session: Session) -> None:
    from monitor.report import report_context

    alarm = Alarm("bikes", "conditional", "concept_shift", "e-900", 900, T0, 700, 1e4, 1e4,
                  "shiryaev_roberts", {})
    persist_batch(db_session, alarms=[alarm], performance_windows=[window(i) for i in range(3)])
    context = report_context(db_session, alarm.id)
    db_session.rollback()
    assert context.performance == performance_windows(db_session, "bikes")
    assert [w["window_index"] for w in context.performance or ()] == [0, 1, 2]
