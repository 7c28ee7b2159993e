"""The fleet runner on a real database: members' stored traces in, fleet alarms out."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.db.fleet_runner import FleetNotFoundError, create_fleet, evaluate_fleet
from monitor.db.models import AlarmRow, FleetRow, TracePointRow
from monitor.db.queries import alarms_query

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MEMBERS = ["a/conditional", "b/conditional", "c/conditional", "c/covariate"]


def _trace(session: Session, stream: str, detector: str, index: int, log_stat: float) -> None:
    session.add(
        TracePointRow(
            stream=stream, detector=detector, event_index=index, ts=T0 + timedelta(minutes=index),
            log_martingale=0.0, p_value=0.5, log_statistic=log_stat, log_threshold=math.log(1e4),
        )
    )


def test_e_d_bh_fleet_alarms_are_stored_with_rule_and_level(db_session: Session) -> None:
    create_fleet(db_session, "payments", MEMBERS, rule="e_d_bh", alpha=0.01)
    # K = 4, alpha = 0.01: one rejection needs R >= 400, two need R >= 200 each
    for i in range(3):
        _trace(db_session, "a", "conditional", i, math.log(10.0))
        _trace(db_session, "b", "conditional", i, math.log(10.0))
        _trace(db_session, "c", "covariate", i, math.log(1.0))
    _trace(db_session, "a", "conditional", 3, math.log(250.0))  # alone: under 400
    _trace(db_session, "b", "conditional", 4, math.log(250.0))  # with a: two over 200
    _trace(db_session, "a", "conditional", 5, math.log(300.0))  # still rejected: no new alarm
    db_session.commit()

    alarms = evaluate_fleet(db_session, "payments", through=T0 + timedelta(minutes=10))
    db_session.commit()
    assert [(a.stream, a.event_index) for a in alarms] == [("a", 3), ("b", 4)]
    stored = db_session.scalars(alarms_query(fleet="payments", order="asc")).all()
    assert [(r.stream, r.fleet_rule, r.fleet_level, r.kind) for r in stored] == [
        ("a", "e_d_bh", 0.01, "undiagnosed"),
        ("b", "e_d_bh", 0.01, "undiagnosed"),
    ]
    assert stored[0].threshold == pytest.approx(200.0)
    assert stored[0].evidence["fleet_size"] == 4
    # evaluated through the last trace: a second call over the same time adds nothing
    assert evaluate_fleet(db_session, "payments", through=T0 + timedelta(minutes=10)) == []
    row = db_session.get(FleetRow, "payments")
    assert row is not None and row.evaluated_through == T0 + timedelta(minutes=5)


def test_a_member_that_leaves_the_rejection_set_alarms_again(db_session: Session) -> None:
    create_fleet(db_session, "f", ["a/conditional", "b/conditional"], "e_d_bonferroni", 0.1)
    for i, value in enumerate([30.0, 1.0, 30.0]):  # bar K/alpha = 20
        _trace(db_session, "a", "conditional", i, math.log(value))
    db_session.commit()
    first = evaluate_fleet(db_session, "f", through=T0 + timedelta(minutes=1))
    second = evaluate_fleet(db_session, "f", through=T0 + timedelta(minutes=2))
    db_session.commit()
    assert [a.event_index for a in first + second] == [0, 2]
    assert db_session.scalars(select(AlarmRow.fleet)).all() == ["f", "f"]


def test_bad_fleets_are_refused(db_session: Session) -> None:
    with pytest.raises(ValueError, match="'stream/detector'"):
        create_fleet(db_session, "f", ["nodetector"], "e_d_bh", 0.1)
    with pytest.raises(FleetNotFoundError, match="no fleet named 'ghost'"):
        evaluate_fleet(db_session, "ghost", through=T0)
    create_fleet(db_session, "f", ["a/conditional"], "e_d_bh", 0.1)
    db_session.commit()
    with pytest.raises(ValueError, match="exists already"):
        create_fleet(db_session, "f", ["a/conditional"], "e_d_bh", 0.1)


def test_fleet_alarms_are_queued_for_the_routed_receivers(db_session: Session) -> None:
    from monitor.alerts import AlertRouting
    from monitor.db.models import AlertOutboxRow

    routing = AlertRouting.model_validate({
        "receivers": [{"name": "oncall", "type": "webhook", "url": "http://127.0.0.1:9/hook"}],
        "routes": [{"receivers": ["oncall"], "streams": ["a"]}],
    })
    create_fleet(db_session, "f", ["a/conditional", "b/conditional"], "per_stream", 0.01)
    _trace(db_session, "a", "conditional", 0, math.log(500.0))
    _trace(db_session, "b", "conditional", 1, math.log(500.0))
    db_session.commit()
    alarms = evaluate_fleet(db_session, "f", T0 + timedelta(minutes=5), routing)
    db_session.commit()
    queued = db_session.scalars(select(AlertOutboxRow)).all()
    assert len(alarms) == 2
    assert [(q.alarm_id, q.receiver) for q in queued] == [(alarms[0].id, "oncall")]  # route: a


def test_a_member_admitted_on_an_earlier_runs_value(db_session: Session) -> None:
    # e-BH, K = 2, alpha = 0.1: one rejection needs 20, two need 10 each
    create_fleet(db_session, "f", ["a/conditional", "b/conditional"], "e_d_bh", 0.1)
    _trace(db_session, "a", "conditional", 0, math.log(15.0))
    db_session.commit()
    assert evaluate_fleet(db_session, "f", T0 + timedelta(minutes=0.5)) == []
    _trace(db_session, "b", "conditional", 1, math.log(15.0))
    db_session.commit()
    alarms = evaluate_fleet(db_session, "f", T0 + timedelta(minutes=5))
    assert [(a.stream, a.event_index) for a in alarms] == [("a", 0), ("b", 1)]


def test_reading_in_chunks_decides_the_same(db_session: Session) -> None:
    values = {"a": [5.0, 25.0, 3.0, 30.0], "b": [12.0, 12.0, 50.0, 1.0]}
    for name in ("big", "small"):
        create_fleet(db_session, name, ["a/conditional", "b/conditional"], "e_d_bh", 0.1)
    for stream, series in values.items():
        for i, v in enumerate(series):
            _trace(db_session, stream, "conditional", i, math.log(v))
    db_session.commit()
    through = T0 + timedelta(minutes=10)
    big = evaluate_fleet(db_session, "big", through)
    keys = [(a.stream, a.event_index, a.threshold) for a in big]
    db_session.rollback()  # the same alarm ids: decide "small" on a clean slate
    small = evaluate_fleet(db_session, "small", through, chunk=1)
    assert [(a.stream, a.event_index, a.threshold) for a in small] == keys and keys
