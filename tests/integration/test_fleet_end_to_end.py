"""A fleet over streams on a 4-partition Kafka topic processed by two workers, end to end.

Both workers join one consumer group before anything is produced, so each owns two partitions
and the fleet's streams live on different workers. The fleet (e-d-BH at level 0.1 over the three
example streams' two detectors, K = 6: bars from K/α = 60 down to 1/α = 10, under the streams'
own threshold of 100) is created before the run, as an operator would; `monitor fleets run
--once` then decides it at the database on the e-detector values the two workers stored. The
fleet alarms are checked in PostgreSQL, through `GET /alarms?fleet=` and through the fleet
dashboard's SQL.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from bench.api_rows import READ, make_settings
from connectors.mock_kafka import produce_kafka_python
from monitor.api import create_app
from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.fleet_runner import create_fleet
from monitor.db.migrate import upgrade
from monitor.db.models import AlarmRow
from tests.support.dashboards import load_dashboards, queries
from tests.support.grafana_sql import QueryContext, Variable, expand
from tests.support.processes import OffsetWatch, WorkerProcess, owned, wait_until
from tests.support.streams import STREAMS, Example, end_offsets

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

MEMBERS = [f"{s.name}/{d}" for s in STREAMS for d in ("covariate", "conditional")]


def _create_fleet(url: str) -> None:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            create_fleet(session, "example", MEMBERS, rule="e_d_bh", alpha=0.1)
            session.commit()
    finally:
        engine.dispose()


def _fleet_alarms(url: str) -> list[AlarmRow]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            query = select(AlarmRow).where(AlarmRow.fleet == "example").order_by(AlarmRow.ts)
            return list(session.scalars(query).all())
    finally:
        engine.dispose()


def test_fleet_alarms_from_two_workers(
    kafka_broker_module: str, pg_url: str, example: Example, tmp_path: Path
) -> None:
    topic, group = "fleet", "g-fleet"
    upgrade(pg_url)
    _create_fleet(pg_url)
    source = f"kafka://{kafka_broker_module}/{topic}"
    a, b = (WorkerProcess.patient(tmp_path, name, pg_url, source, group, example.config_args,
                                  batch_size=20) for name in ("a", "b"))
    stored = OffsetWatch(pg_url, f"kafka:{topic}")
    try:
        wait_until(lambda: len(owned(a)) == 2 and len(owned(b)) == 2, "a 2 + 2 split", [a, b])
        end = end_offsets(produce_kafka_python(kafka_broker_module, topic, example.values,
                                               example.keys))
        wait_until(lambda: stored() == end, "stored offsets at the end", [a, b])
        a_parts, b_parts = owned(a), owned(b)
        assert a.terminate() == 0, a.tail()
        assert b.terminate() == 0, b.tail()
    finally:
        for worker in (a, b):
            worker.ensure_dead()
        stored.close()
    # the fleet's streams were processed by both workers
    parts = {s.partition for s in STREAMS}
    assert parts & a_parts and parts & b_parts

    assert main(["fleets", "run", "example", "--once", "--db", pg_url]) == 0
    alarms = _fleet_alarms(pg_url)
    assert {a.stream for a in alarms} == {s.name for s in STREAMS}  # every shifted stream found
    for alarm in alarms:
        assert (alarm.fleet_rule, alarm.fleet_level, alarm.kind) == ("e_d_bh", 0.1, "undiagnosed")
        assert 10.0 - 1e-9 <= alarm.threshold <= 60.0 + 1e-9  # between 1/α and K/α
        assert math.log(alarm.statistic) >= math.log(alarm.threshold) - 1e-9
    # a second run over the same events adds nothing
    assert main(["fleets", "run", "example", "--once", "--db", pg_url]) == 0
    assert len(_fleet_alarms(pg_url)) == len(alarms)

    with TestClient(create_app(make_settings(pg_url))) as client:
        body = client.get("/alarms", params={"fleet": "example", "limit": 1000},
                          headers=READ).json()
    assert sorted(i["id"] for i in body["data"]) == sorted(a.id for a in alarms)
    assert {i["fleet_rule"] for i in body["data"]} == {"e_d_bh"}

    fleet_dashboard = next(d for d in load_dashboards() if d["uid"] == "monitor-fleet")
    first, last = alarms[0].ts, alarms[-1].ts
    ctx = QueryContext(first - timedelta(days=1), last + timedelta(days=1), "1m",
                       {"fleet": Variable(("example",))})
    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            for qid, query in queries(fleet_dashboard):
                rows = conn.exec_driver_sql(expand(query["rawSql"], ctx)).all()
                assert rows, f"{qid} shows nothing for a fleet with alarms"
                if qid == "monitor-fleet/panel-1/A":
                    assert rows == [(len(alarms),)]
    finally:
        engine.dispose()
