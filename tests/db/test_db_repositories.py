"""Repositories: filters, keyset pagination, acknowledgement, streams, OOD and dead letters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.db import queries
from monitor.db.errors import (
    AlarmNotFoundError,
    InvalidCursorError,
    StreamExistsError,
    StreamNotFoundError,
)
from monitor.db.models import AlarmRow, CalibrationEventRow
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.config import StreamConfig
from monitor.streams.records import ALARM_KINDS, Alarm, DeadLetter, OODWindow, TracePoint

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
STREAMS = ("bikes", "digits", "cars")
DETECTORS = ("covariate", "conditional", "ood")


def random_alarms(n: int, seed: int) -> list[Alarm]:
    """Alarms over few distinct timestamps (many ties, so the id breaks them)."""
    rng = np.random.default_rng(seed)
    alarms = []
    for i in range(n):
        alarms.append(
            Alarm(
                stream=str(rng.choice(STREAMS)),
                detector=str(rng.choice(DETECTORS)),
                kind=str(rng.choice(ALARM_KINDS)),
                event_id=f"e-{i}",
                event_index=i,
                ts=T0 + timedelta(microseconds=int(rng.integers(0, 12)) * 250_001),
                changepoint=None,
                statistic=float(rng.uniform(1e4, 2e4)),
                threshold=1e4,
                rule="shiryaev_roberts",
            )
        )
    return alarms


def walk(session: Session, limit: int, **filters: Any) -> list[str]:
    """Ids of every page of list_alarms, following the cursors."""
    ids: list[str] = []
    cursor = None
    for _ in range(1000):
        page = queries.list_alarms(session, limit=limit, cursor=cursor, **filters)
        assert len(page.items) <= limit
        ids += [a.id for a in page.items]
        if page.next_cursor is None:
            return ids
        assert len(page.items) == limit
        cursor = page.next_cursor
    raise AssertionError("pagination did not end")


def expected_ids(alarms: list[Alarm], order: str = "desc", **filters: Any) -> list[str]:
    since, until = filters.pop("since", None), filters.pop("until", None)
    kept = [
        a
        for a in alarms
        if all(getattr(a, k) == v for k, v in filters.items())
        and (since is None or a.ts >= since)
        and (until is None or a.ts < until)
    ]
    kept.sort(key=lambda a: (a.ts, a.id), reverse=order == "desc")
    return [a.id for a in kept]


@pytest.mark.parametrize("limit", [1, 7, 50, 500])
def test_pagination_returns_every_alarm_once_in_order(db_session: Session, limit: int) -> None:
    alarms = random_alarms(120, seed=limit)
    persist_batch(db_session, Batch(alarms=alarms))
    since, until = T0 + timedelta(seconds=0.5), T0 + timedelta(seconds=2.2)
    cases: list[dict[str, Any]] = [
        {},
        {"order": "asc"},
        {"stream": "bikes"},
        {"kind": "concept_shift", "order": "asc"},
        {"stream": "digits", "detector": "ood"},
        {"since": since, "until": until},
        {"stream": "cars", "kind": "benign_covariate_shift", "since": since, "order": "asc"},
    ]
    for filters in cases:
        got = walk(db_session, limit, **filters)
        order = filters.get("order", "desc")
        want = expected_ids(alarms, order, **{k: v for k, v in filters.items() if k != "order"})
        assert got == want, filters
        assert len(set(got)) == len(got)


def test_pagination_is_stable_when_alarms_arrive_between_pages(db_session: Session) -> None:
    alarms = random_alarms(30, seed=3)
    persist_batch(db_session, Batch(alarms=alarms[:20]))
    first = queries.list_alarms(db_session, limit=10, order="asc")
    db_session.rollback()
    persist_batch(db_session, Batch(alarms=alarms[20:]))
    rest = queries.list_alarms(db_session, limit=100, order="asc", cursor=first.next_cursor)
    seen = [a.id for a in first.items + rest.items]
    assert len(set(seen)) == len(seen)
    last = (first.items[-1].ts, first.items[-1].id)
    assert all((a.ts, a.id) > last for a in rest.items)


def test_bad_cursors_are_refused(db_session: Session) -> None:
    persist_batch(db_session, Batch(alarms=random_alarms(5, seed=1)))
    page = queries.list_alarms(db_session, limit=2)
    assert page.next_cursor is not None
    with pytest.raises(InvalidCursorError, match=r"asc order"):
        queries.list_alarms(db_session, cursor=page.next_cursor, order="asc")
    for bad in ("!!!", "e30", page.next_cursor[:-3]):
        with pytest.raises(InvalidCursorError):
            queries.list_alarms(db_session, cursor=bad)
    with pytest.raises(ValueError, match="limit"):
        queries.list_alarms(db_session, limit=0)


def test_alarm_queries_can_be_extended(db_session: Session) -> None:
    alarms = random_alarms(40, seed=5)
    persist_batch(db_session, Batch(alarms=alarms))
    query = queries.alarms_query(stream="bikes").where(AlarmRow.statistic > 15_000)
    want = [a for a in alarms if a.stream == "bikes" and a.statistic > 15_000]
    assert queries.count(db_session, query) == len(want)
    assert {a.id for a in db_session.scalars(query)} == {a.id for a in want}


def test_get_and_acknowledge_alarm(db_session: Session) -> None:
    alarm = random_alarms(1, seed=0)[0]
    persist_batch(db_session, Batch(alarms=[alarm]))
    row = queries.get_alarm(db_session, alarm.id)
    assert row is not None and row.to_record() == alarm and row.ts.tzinfo is not None
    assert row.acknowledged_at is None
    when = T0 + timedelta(hours=1)
    acked = queries.acknowledge_alarm(db_session, alarm.id, by="alice", at=when)
    assert (acked.acknowledged_at, acked.acknowledged_by) == (when, "alice")
    again = queries.acknowledge_alarm(db_session, alarm.id, by="bob")  # the first one is kept
    assert again.acknowledged_by == "alice"
    db_session.expire_all()
    assert [a.id for a in queries.list_alarms(db_session, acknowledged=True).items] == [alarm.id]
    assert queries.list_alarms(db_session, acknowledged=False).items == []
    with pytest.raises(AlarmNotFoundError):
        queries.acknowledge_alarm(db_session, "nope", by="alice")
    assert queries.get_alarm(db_session, "nope") is None


def test_traces_filter_and_paginate(db_session: Session) -> None:
    points = [
        TracePoint("bikes", d, i, T0 + timedelta(seconds=i), 0.1 * i, 0.5, 0.0, 9.2)
        for i in range(0, 100, 10)
        for d in ("covariate", "conditional")
    ]
    other = TracePoint("cars", "covariate", 0, T0, 0.0, 0.5, 0.0, 9.2)
    persist_batch(db_session, Batch(trace_points=[*points, other]))

    rows = list(db_session.scalars(queries.traces_query("bikes", detector="conditional")))
    assert [r.event_index for r in rows] == list(range(0, 100, 10))
    by_index = queries.traces_query("bikes", since_index=20, until_index=50)
    assert [(r.event_index, r.detector) for r in db_session.scalars(by_index)] == [
        (i, d) for i in (20, 30, 40) for d in ("conditional", "covariate")
    ]
    by_time = queries.traces_query("bikes", since=T0 + timedelta(seconds=85))
    assert {r.event_index for r in db_session.scalars(by_time)} == {90}

    seen, cursor = [], None
    while True:
        page = queries.list_traces(db_session, "bikes", limit=3, cursor=cursor)
        seen += [(r.event_index, r.detector) for r in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == sorted((p.event_index, p.detector) for p in points)


def test_ood_windows_with_their_flags(db_session: Session) -> None:
    windows = [
        OODWindow("bikes", k, 4 * k, 4 * k + 4, T0, 4, k % 2, 0.01, "bh", 0.1, ("x",) * (k % 2))
        for k in range(5)
    ]
    windows[3] = OODWindow("bikes", 3, 12, 16, T0, 4, 2, 0.01, "bh", 0.1, ("e-13", "e-12"))
    persist_batch(db_session, Batch(ood_windows=windows))
    listed = queries.list_ood_windows(db_session, "bikes", limit=2, after_window=1)
    assert [(w.window_index, flags) for w, flags in listed] == [(2, ()), (3, ("e-12", "e-13"))]
    assert [w.window_index for w in db_session.scalars(queries.ood_windows_query("bikes"))] == [
        0,
        1,
        2,
        3,
        4,
    ]
    overlapping = queries.ood_windows_query("bikes", since_index=5, until_index=9)
    assert [w.window_index for w in db_session.scalars(overlapping)] == [1, 2]


def stream_config(**changes: Any) -> StreamConfig:
    calibration = [
        {"id": f"c-{i}", "features": [float(i), 1.0], "prediction": 0.5 * i, "label": i}
        for i in range(3)
    ]
    return StreamConfig.model_validate(
        {"name": "bikes", "task": "regression", "calibration": calibration} | changes
    )


def test_stream_crud_with_calibration(db_session: Session) -> None:
    config = stream_config()
    created = queries.create_stream(db_session, config)
    assert created.config == config.model_dump(mode="json")
    assert created.created_at.tzinfo is not None
    with pytest.raises(StreamExistsError):
        queries.create_stream(db_session, config)
    calibration = list(db_session.scalars(queries.calibration_query("bikes")))
    assert [(c.event_id, c.features, c.label, c.logits) for c in calibration] == [
        (f"c-{i}", [float(i), 1.0], i, None) for i in range(3)
    ]
    db_session.rollback()

    changed = stream_config(trace_every=50)
    queries.update_stream(
        db_session, changed, calibration=[{"features": {"f0": 1.0}, "prediction": 2}]
    )
    row = queries.get_stream(db_session, "bikes")
    assert row is not None and row.config["trace_every"] == 50
    assert [c.features for c in db_session.scalars(queries.calibration_query("bikes"))] == [
        {"f0": 1.0}
    ]
    assert [s.name for s in queries.list_streams(db_session)] == ["bikes"]

    queries.delete_stream(db_session, "bikes")
    assert queries.get_stream(db_session, "bikes") is None
    assert db_session.scalars(select(CalibrationEventRow)).all() == []  # cascaded
    with pytest.raises(StreamNotFoundError):
        queries.delete_stream(db_session, "bikes")
    with pytest.raises(StreamNotFoundError):
        queries.update_stream(db_session, changed)


def test_dead_letters_list_and_count(db_session: Session) -> None:
    letters = [
        DeadLetter(
            "kafka://k/t", p, o, "bad", b"{", T0 + timedelta(seconds=o), "bikes" if p else None
        )
        for p in (0, 1)
        for o in range(4)
    ]
    persist_batch(db_session, Batch(dead_letters=letters))
    assert queries.count(db_session, queries.dead_letters_query()) == 8
    assert queries.count(db_session, queries.dead_letters_query(stream="bikes")) == 4
    since = queries.dead_letters_query(since=T0 + timedelta(seconds=2))
    assert queries.count(db_session, since) == 4
    newest = queries.list_dead_letters(db_session, limit=3)
    assert [d.offset for d in newest] == [3, 3, 2]


def test_registered_streams_restore_their_calibration_exactly(db_session: Session) -> None:
    from monitor.db.store import load_streams, upsert_stream
    from monitor.streams.calibration import Calibration

    rng = np.random.default_rng(7)
    n = 25
    calibration = Calibration(
        features=rng.normal(size=(n, 3)) * np.array([1.0, 1e-300, 1e90]),
        predictions=rng.dirichlet(np.ones(3), size=n),
        labels=rng.integers(0, 3, size=n),
        logits=rng.normal(size=(n, 3)),
    )
    config = StreamConfig.model_validate(
        {"name": "digits", "task": "classification", "calibration": "cal.jsonl"}
    )
    upsert_stream(db_session, config, calibration.to_rows())
    upsert_stream(db_session, config.model_copy(update={"trace_every": 5}), calibration.to_rows())
    [stored] = load_streams(db_session)
    assert StreamConfig.model_validate(stored.config).trace_every == 5
    assert (stored.version, stored.feature_names) == (2, None)
    restored = Calibration.from_rows(stored.calibration, stored.feature_names)
    for name in ("features", "predictions", "labels", "logits"):
        assert getattr(restored, name).tobytes() == getattr(calibration, name).tobytes(), name
    assert restored.embedding is None


#: Configuration keys this release added with defaults (docs/tabular.md): a stream registered
#: by the previous release has none of them in its stored configuration.
NEW_KEYS = ("features", "vocabulary", "max_categories", "data_quality")


def test_a_configuration_stored_before_new_defaults_is_the_same_configuration(
    db_session: Session,
) -> None:
    """Registering (a worker's ``monitor run --config``) or updating a stream with the
    configuration it was registered with is a no-op, also when the stored configuration was
    written before keys with defaults existed: the stored one is compared as it validates
    today, not as raw JSON (else an upgrade refuses a worker's start, or stores a spurious
    version)."""
    config = stream_config()
    queries.create_stream(db_session, config)
    row = queries.get_stream(db_session, "bikes")
    assert row is not None
    row.config = {k: v for k, v in row.config.items() if k not in NEW_KEYS}
    db_session.commit()
    registered, created = queries.register_stream(db_session, config, None)
    assert not created and registered.version == 1
    updated, changed = queries.new_stream_version(db_session, config, None)
    assert not changed and updated.version == 1
    changed_row, changed = queries.new_stream_version(db_session, stream_config(trace_every=7),
                                                      None)
    assert changed and changed_row.version == 2
