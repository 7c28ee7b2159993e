"""Performance windows and late alarm evidence in the database, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.db.errors import InvalidRecordError
from monitor.db.models import AlarmRow
from monitor.db.queries import PERFORMANCE_FIELDS, performance_windows
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import Alarm, AlarmEvidence, PerformanceWindow

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def window(i: int, stream: str = "bikes") -> PerformanceWindow:
    return PerformanceWindow(stream, i, 500 * i, 500 * i + 510, T0 + timedelta(minutes=i), 500,
                             {"mae": 1.0 + i, "rmse": 2.0 + i})


def test_performance_windows_round_trip_and_filter(db_session: Session) -> None:
    persist_batch(db_session, Batch(performance_windows=[window(i) for i in range(5)]
                  + [window(0, "other")]))
    # a replay stores nothing twice
    persist_batch(db_session, Batch(performance_windows=[window(4)]))
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
        persist_batch(db_session, Batch(performance_windows=[bad]))


def test_late_evidence_is_a_revision_of_the_stored_alarm_and_is_routed(
    db_session: Session,
) -> None:
    """The attribution completes its alarm as a new revision: stored with its history, and
    routed to the receivers under the key ``<id>:2`` in the same transaction; a replayed batch
    changes nothing."""
    from monitor.alerts import load_alert_routing, outbox_rows
    from monitor.db.models import AlarmRevisionRow, AlertOutboxRow

    routing = load_alert_routing(None, ["http://127.0.0.1:9/hook"])
    assert routing is not None

    def route(alarms: Any) -> Any:
        return outbox_rows(alarms, routing)

    alarm = Alarm("bikes", "covariate", "benign_covariate_shift", "e-1", 1, T0, None, 1e4, 1e4,
                  "shiryaev_roberts", {"weights_ess": 800.0})
    persist_batch(db_session, Batch(alarms=[alarm]), route=route)
    attribution = {"method": "ks_holm_post_alarm", "features": [{"feature": "f3"}]}
    evidence = [
        AlarmEvidence("bikes", alarm.id, {"attribution": attribution}),
        AlarmEvidence("bikes", "no-such-alarm", {"attribution": attribution}),  # skipped
    ]
    for _ in range(2):  # the second time is a replay of the same batch
        persist_batch(db_session, Batch(alarm_evidence=evidence), route=route)
    with db_session.begin():
        row = db_session.get(AlarmRow, alarm.id)
        assert row is not None
        assert row.evidence == {"weights_ess": 800.0, "attribution": attribution}
        assert row.revision == 2 and row.revised_at is not None
        versions = db_session.scalars(
            select(AlarmRevisionRow).where(AlarmRevisionRow.alarm_id == alarm.id)
            .order_by(AlarmRevisionRow.revision)
        ).all()
        assert [(v.revision, "attribution" in v.evidence) for v in versions] == [
            (1, False), (2, True)
        ]
        queued = db_session.scalars(select(AlertOutboxRow).order_by(AlertOutboxRow.id)).all()
        assert [q.idempotency_key for q in queued] == [f"{alarm.id}:1", f"{alarm.id}:2"]
        assert json.loads(queued[1].body)["evidence"]["attribution"] == attribution


def test_the_alarm_report_reads_the_stored_performance_windows(db_session: Session) -> None:
    from monitor.ops.report import report_context

    alarm = Alarm("bikes", "conditional", "concept_shift", "e-900", 900, T0, 700, 1e4, 1e4,
                  "shiryaev_roberts", {})
    persist_batch(db_session, Batch(alarms=[alarm],
                                    performance_windows=[window(i) for i in range(3)]))
    context = report_context(db_session, alarm.id)
    db_session.rollback()
    assert context.performance == performance_windows(db_session, "bikes")
    assert [w["window_index"] for w in context.performance or ()] == [0, 1, 2]
