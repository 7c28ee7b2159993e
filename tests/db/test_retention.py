"""Retention (monitor.db.retention, ``monitor db prune``) on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, and_, event, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import (
    AlarmRow,
    DeadLetterRow,
    OODFlagRow,
    OODWindowRow,
    PerformanceWindowRow,
    StreamRow,
    TracePointRow,
)
from monitor.db.retention import protected_ranges, prune
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import Alarm

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _stream(session: Session, name: str, retention: dict[str, Any] | None) -> None:
    config: dict[str, Any] = {"name": name, "task": "regression"}
    if retention is not None:
        config["retention"] = retention
    session.add(StreamRow(name=name, task="regression", config=config))


def _traces(session: Session, stream: str, n: int) -> None:
    """Two detectors' trace points, one per event index and hour: event i at T0 + i hours."""
    session.add_all(
        TracePointRow(stream=stream, detector=d, event_index=i, ts=T0 + i * HOUR)
        for i in range(n)
        for d in ("covariate", "conditional")
    )


def _alarm(
    session: Session, stream: str, index: int, cp: int | None, acked: datetime | None
) -> None:
    session.add(AlarmRow(
        id=f"{stream}-{index}", stream=stream, detector="conditional", kind="concept_shift",
        event_id=f"e{index}", event_index=index, ts=T0 + index * HOUR, changepoint=cp,
        statistic=1e5, threshold=1e4, rule="shiryaev_roberts", evidence={},
        acknowledged_at=acked, acknowledged_by=None if acked is None else "ops",
    ))


def _count(session: Session, model: Any, **where: Any) -> int:
    query = select(func.count()).select_from(model)
    for key, value in where.items():
        query = query.where(getattr(model, key) == value)
    return int(session.scalar(query) or 0)


def _indexes(session: Session, stream: str) -> set[int]:
    return set(session.scalars(
        select(TracePointRow.event_index).where(TracePointRow.stream == stream)
    ))


def test_trace_points_age_on_the_streams_clock_and_keep_alarm_context(db_session: Session) -> None:
    # 200 hours of traces; keep 100 h: events 0..98 are old (newest ts is event 199's).
    _stream(db_session, "s", {"trace_points": "100h", "alarm_context": 5})
    _traces(db_session, "s", 200)
    _alarm(db_session, "s", 40, 30, None)  # keeps 25..45
    _alarm(db_session, "s", 90, None, None)  # keeps 85..95
    db_session.commit()
    report = prune(session_factory(db_session.get_bind()), batch=7)  # type: ignore[arg-type]
    kept = _indexes(db_session, "s")
    assert kept == set(range(25, 46)) | set(range(85, 96)) | set(range(99, 200))
    assert report.deleted["trace_points"] == 2 * (99 - 21 - 11)
    assert report.complete
    # one batch of rows per transaction (+1: the other detector's row at its last index)
    assert 0 < report.largest <= 7 + 1 and report.transactions >= report.total // 8
    again = prune(session_factory(db_session.get_bind()))  # type: ignore[arg-type]
    assert again.total == 0 and _indexes(db_session, "s") == kept


def test_replayed_old_data_is_kept(db_session: Session) -> None:
    """Event time a year ago: the stream's own clock says it is recent."""
    _stream(db_session, "old", {"trace_points": "10h"})
    db_session.add_all(
        TracePointRow(stream="old", detector="covariate", event_index=i,
                      ts=T0 - timedelta(days=365) + i * timedelta(minutes=1))
        for i in range(100)
    )
    db_session.commit()
    assert prune(session_factory(db_session.get_bind())).total == 0  # type: ignore[arg-type]
    assert _count(db_session, TracePointRow) == 100


def test_ood_windows_go_with_their_flags_and_dead_letters_by_stream(db_session: Session) -> None:
    _stream(db_session, "s", {"ood_windows": "10h", "dead_letters": "5h", "trace_points": None})
    _stream(db_session, "keep", {"ood_windows": None, "dead_letters": None})
    for stream, w in itertools.product(("s", "keep"), range(30)):
        db_session.add(OODWindowRow(
            stream=stream, window_index=w, start_index=10 * w, end_index=10 * w + 9,
            ts=T0 + w * HOUR, n=10, n_flagged=1, threshold=0.1, rule="eg_bh", alpha=0.1,
        ))
        db_session.flush()
        db_session.add(OODFlagRow(stream=stream, window_index=w, event_id=f"{stream}{w}"))
    offsets = itertools.count()
    for owner, h in itertools.product(("s", "keep", None), range(20)):
        db_session.add(DeadLetterRow(
            source="file:x", source_name="x", partition=0, offset=next(offsets), reason="bad",
            payload=b"{}", stream=owner, ts=T0 + h * HOUR, created_at=T0 + h * HOUR,
        ))
    db_session.commit()
    # dead letters age from when they were stored: "now" is 19 h after the first
    report = prune(session_factory(db_session.get_bind()), batch=4,  # type: ignore[arg-type]
                   now=T0 + 19 * HOUR)
    windows = set(db_session.scalars(
        select(OODWindowRow.window_index).where(OODWindowRow.stream == "s")
    ))
    assert windows == set(range(19, 30))  # newest at 29 h; older than 10 h before it go
    assert _count(db_session, OODFlagRow, stream="s") == 11  # the flags went with them
    assert _count(db_session, OODWindowRow, stream="keep") == 30
    assert _count(db_session, DeadLetterRow, stream="s") == 6  # stored 14..19 h
    assert _count(db_session, DeadLetterRow, stream="keep") == 20
    assert _count(db_session, DeadLetterRow, stream=None) == 20  # unrouted: 30 days by default
    assert report.deleted == {"trace_points": 0, "ood_windows": 19, "performance_windows": 0,
                              "dead_letters": 14, "alarms": 0, "checkpoint_chunks": 0}


def test_only_old_acknowledged_alarms_are_pruned(db_session: Session) -> None:
    now = T0 + timedelta(days=400)
    _stream(db_session, "s", {"acknowledged_alarms": "30d", "trace_points": None})
    _alarm(db_session, "s", 1, None, None)  # never acknowledged: kept forever
    _alarm(db_session, "s", 2, None, now - timedelta(days=31))  # acknowledged long ago: goes
    _alarm(db_session, "s", 3, None, now - timedelta(days=29))  # recently acknowledged: kept
    db_session.commit()
    report = prune(session_factory(db_session.get_bind()), now=now)  # type: ignore[arg-type]
    assert report.deleted["alarms"] == 1
    assert set(db_session.scalars(select(AlarmRow.event_index))) == {1, 3}


def test_performance_windows_age_on_the_streams_clock_and_keep_alarm_context(
    db_session: Session,
) -> None:
    # Windows of 10 events, one per hour: window w covers events 10w..10w+9 and ends at T0 + w h.
    _stream(db_session, "s", {"performance_windows": "20h", "alarm_context": 5})
    db_session.add_all(
        PerformanceWindowRow(stream="s", window_index=w, start_index=10 * w, end_index=10 * w + 9,
                             ts=T0 + w * HOUR, n=10, metrics={"mae": 1.0})
        for w in range(50)
    )
    _alarm(db_session, "s", 104, 97, None)  # keeps events 92..109: windows 9 and 10
    _alarm(db_session, "other", 104, None, None)  # another stream's alarm protects nothing here
    db_session.commit()
    report = prune(session_factory(db_session.get_bind()), batch=4)  # type: ignore[arg-type]
    kept = set(db_session.scalars(select(PerformanceWindowRow.window_index)))
    assert kept == {9, 10} | set(range(29, 50))  # newest ts is window 49's: 20 h keeps 29..49
    assert report.deleted["performance_windows"] == 29 - 2
    assert report.largest <= 4


def test_time_budget_stops_between_transactions_and_the_next_call_goes_on(
    db_session: Session,
) -> None:
    policy = {"trace_points": "10h", "alarm_context": 0, "acknowledged_alarms": None}
    _stream(db_session, "s", policy)
    _traces(db_session, "s", 60)
    db_session.commit()
    ticks = itertools.count()
    sessions = session_factory(db_session.get_bind())  # type: ignore[arg-type]
    first = prune(sessions, batch=10, max_seconds=3, clock=lambda: float(next(ticks)))
    assert not first.complete and first.transactions == 2
    assert first.deleted["trace_points"] == 20  # two transactions of at most 10 rows
    rest = prune(sessions, batch=10)
    assert rest.complete and first.total + rest.total == 2 * 49
    assert min(_indexes(db_session, "s")) == 49


def test_cli_prune(migrated_database_url: str, db_session: Session, capsys: Any) -> None:
    _stream(db_session, "s", {"trace_points": "1h", "alarm_context": 0})
    _traces(db_session, "s", 10)
    db_session.commit()
    assert main(["db", "prune", "--db", migrated_database_url, "--json"]) == 0
    assert '"trace_points": 16' in capsys.readouterr().out
    assert main(["db", "prune", "--db", migrated_database_url, "--batch", "x"]) == 2
    assert main(["db", "prune", "--db", migrated_database_url, "--batch", "0"]) == 2


def _run(tmp_path: Any, name: str, retention_interval: float) -> tuple[dict[Any, Any], list[Any]]:
    """The example stream run by `monitor run` into its own SQLite file: its trace points
    {(detector, event_index): ts} and alarms [(event_index, changepoint)]."""
    from monitor.cli.runs import register_stream, run_source
    from monitor.db.engine import make_engine
    from monitor.ops.datasets import build_example
    from monitor.settings import Settings

    paths = build_example(tmp_path / name, seed=1, n_calibration=200,
                          phases=[("stable", 400), ("concept", 400)])  # one event a second
    config = paths["config"]
    config.write_text(
        config.read_text() + "retention:\n  trace_points: 5m\n  alarm_context: 30\n",
        encoding="utf-8",
    )
    url = f"sqlite:///{tmp_path}/{name}.db"
    settings = Settings(database_url=url, retention_interval=retention_interval, batch_size=100)
    register_stream(str(config), settings)
    run_source(f"file:{paths['events']}", [], name, settings)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            traces = {(d, i): ts for d, i, ts in session.execute(
                select(TracePointRow.detector, TracePointRow.event_index, TracePointRow.ts)
            )}
            alarms = [tuple(r) for r in session.execute(
                select(AlarmRow.event_index, AlarmRow.changepoint)
            )]
    finally:
        engine.dispose()
    return traces, alarms


def test_the_worker_prunes_in_the_background(tmp_path: Any) -> None:
    """`monitor run` with a short retention keeps exactly what the policy says: the last five
    minutes of event time and the trace around every alarm, computed from a run without
    retention. (Around an alarm raised more than the retention after its changepoint, the points
    already pruned cannot come back: docs/persistence.md.)"""
    full, alarms = _run(tmp_path, "keep", retention_interval=0)
    pruned, pruned_alarms = _run(tmp_path, "prune", retention_interval=1e-9)
    assert alarms and pruned_alarms == alarms, "the example's concept shift raises alarms"
    newest = max(full.values())
    kept_ranges = protected_ranges(alarms, 30)
    # Each pass prunes against the newest trace point stored so far: what the final pass keeps
    # is what was recent at the end, plus every alarm's context.
    expected = {
        key for key, ts in full.items()
        if ts >= newest - timedelta(minutes=5) or any(a <= key[1] <= b for a, b in kept_ranges)
    }
    assert set(pruned) == expected
    assert len(expected) < 0.6 * len(full)  # the first 350 s are gone


# -- a writer storing alarms while a prune runs ------------------------------------------------

RACE_POLICY = {"trace_points": "100h", "performance_windows": "100h", "alarm_context": 50,
               "acknowledged_alarms": None}  # the first transaction deletes trace points
#: The alarm a second writer stores during the prune: it protects events 200..350.
RACING = Alarm(stream="s", detector="conditional", kind="concept_shift", event_id="e300",
               event_index=300, ts=T0 + 300 * HOUR, changepoint=250, statistic=1e5,
               threshold=1e4, rule="shiryaev_roberts")


def _race_data(session: Session) -> None:
    """600 events (1 200 trace points, one window per 10 events); 0..498 are older than 100 h."""
    _stream(session, "s", RACE_POLICY)
    _traces(session, "s", 600)
    session.add_all(
        PerformanceWindowRow(stream="s", window_index=w, start_index=10 * w,
                             end_index=10 * w + 9, ts=T0 + (10 * w + 9) * HOUR, n=10,
                             metrics={"mae": 1.0})
        for w in range(60)
    )
    session.commit()


def _store_alarm(url: str, wait: bool = True) -> None:
    """Store :data:`RACING` through the worker's write path on a connection of its own; with
    ``wait=False`` it fails at once (OperationalError) rather than wait for another's lock."""
    postgres = url.startswith("postgresql")
    options = {"connect_args": {"options": "-c lock_timeout=100"}} if postgres and not wait else {}
    engine = make_engine(url, **options)
    if not postgres and not wait:  # after make_engine's own busy_timeout
        event.listen(engine, "connect", lambda dbapi, _: dbapi.execute("PRAGMA busy_timeout=0"))
    try:
        with session_factory(engine)() as session:
            persist_batch(session, Batch(alarms=[RACING]))
    finally:
        engine.dispose()


def _protected(session: Session) -> tuple[int, int]:
    """(trace points, performance windows) within the racing alarm's context, 200..350."""
    traces = _count_where(session, TracePointRow, TracePointRow.event_index.between(200, 350))
    windows = _count_where(session, PerformanceWindowRow, and_(
        PerformanceWindowRow.start_index <= 350, PerformanceWindowRow.end_index >= 200))
    return traces, windows


def _count_where(session: Session, model: Any, where: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(model).where(where)) or 0)


@pytest.mark.parametrize("table", ["trace_points", "performance_windows"])
def test_an_alarm_stored_between_prune_transactions_keeps_its_context(
    db_session: Session, db_engine: Engine, migrated_database_url: str, table: str
) -> None:
    """A second connection, in a thread, stores an alarm right after the prune's first delete
    transaction of ``table`` commits (engine and session hooks, not a sleep): every trace point
    and performance window of its context that was there when it was stored is still there
    after the prune."""
    _race_data(db_session)
    sessions = session_factory(db_engine)
    deleting: list[str] = []  # the table of the last DELETE executed
    at_alarm: list[tuple[int, int]] = []

    def track(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        words = statement.split()
        if words[:2] == ["DELETE", "FROM"]:
            deleting[:] = [words[2]]

    def alarm_now(_session: Session) -> None:
        if at_alarm or deleting != [table]:
            return
        writer = threading.Thread(target=_store_alarm, args=(migrated_database_url,))
        writer.start()
        writer.join(timeout=60)
        with sessions() as reader:
            at_alarm.append(_protected(reader))

    event.listen(db_engine, "before_cursor_execute", track)
    event.listen(sessions, "after_commit", alarm_now)
    try:
        report = prune(sessions, batch=20)
    finally:
        event.remove(db_engine, "before_cursor_execute", track)
    db_session.expire_all()
    assert at_alarm, f"the prune deleted no {table}"
    assert at_alarm[0][table == "performance_windows"] > 0, "old rows remained at the alarm"
    assert _protected(db_session) == at_alarm[0]
    assert report.deleted[table] > 0 and report.complete


def test_no_alarm_commits_inside_a_prune_transaction(
    db_session: Session, db_engine: Engine, migrated_database_url: str
) -> None:
    """Between a delete transaction's read of the protected ranges and its DELETE, a second
    connection cannot store an alarm: it waits for the prune (here: gives up at once)."""
    _race_data(db_session)
    _alarm(db_session, "s", 100, None, None)  # something to read: ranges 50..150
    db_session.commit()
    refused: list[BaseException | None] = []

    def store_during_delete(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if refused or not statement.lstrip().upper().startswith("DELETE FROM TRACE_POINTS"):
            return
        try:
            _store_alarm(migrated_database_url, wait=False)
            refused.append(None)
        except OperationalError as exc:
            refused.append(exc)

    event.listen(db_engine, "before_cursor_execute", store_during_delete)
    try:
        prune(session_factory(db_engine), batch=20)
    finally:
        event.remove(db_engine, "before_cursor_execute", store_during_delete)
    assert refused, "the prune deleted trace points"
    assert isinstance(refused[0], OperationalError), "an alarm was stored inside the prune"
    db_session.expire_all()
    assert _count(db_session, AlarmRow, id=RACING.id) == 0

