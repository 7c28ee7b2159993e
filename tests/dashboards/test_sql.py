"""Every dashboard query runs on real PostgreSQL holding a pipeline run's output.

A fresh database is migrated (``monitor.db.migrate.upgrade``), the example stream of
``monitor.ops.datasets.build_example`` (river's Shuttle data with scripted shifts, plus a few bad
lines for the dead letters) is registered as ``monitor streams create`` does and processed by
``monitor.cli.runs.run_source`` as the worker does. Then every SQL query of every panel, annotation
and template variable, with Grafana's macros and variables expanded
(:mod:`tests.support.grafana_sql`), runs as the read-only reader role of the compose stack
(docs/dashboards.md), in a read-only transaction, and must return the
columns its panel expects; aggregates are cross-checked against the tables. Hand-built alarms of
the tabular kinds (``data_quality``, ``schema_change``, a categorical attribution:
:mod:`tests.support.tabular_alarms`) are stored beside the run's for the panels that show them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from monitor.db.migrate import upgrade
from monitor.engine.batch import Batch
from monitor.ops.datasets import build_example
from monitor.settings import Settings
from tests.support.dashboards import load_dashboards, queries
from tests.support.databases import READER_PASSWORD, grafana_reader, postgres_database
from tests.support.grafana_sql import QueryContext, Variable, expand
from tests.support.tabular_alarms import tabular_alarms

pytestmark = pytest.mark.postgres

PHASES = [
    ("stable", 300),
    ("benign_covariate", 300),
    ("benign_covariate+concept", 300),
    ("extreme_covariate", 300),
]
N_CALIBRATION = 500
BAD_LINES = ["this is not json", '{"kind": "prediction", "stream": "nobody", "id": "x"}']

SERIES = ["time", "metric", "value"]
ANNOTATION = ["time", "text", "tags"]
FLEET = "example-fleet"
#: The columns each query must return, by query id (dashboard uid / panel or annotation / refId).
EXPECTED: dict[str, list[str]] = {
    "monitor-fleet/panel-1/A": ["alarms"],
    "monitor-fleet/panel-2/A": [
        "rule", "eop_level", "members", "error", "allowed_so_far", "in_plain_words"
    ],
    "monitor-fleet/panel-3/A": SERIES,
    "monitor-fleet/panel-3/B": SERIES,
    "monitor-fleet/panel-4/A": [
        "time",
        "stream",
        "detector",
        "statistic",
        "threshold",
        "fleet_rule",
        "fleet_level",
        "event_index",
        "acknowledged",
    ],
    "monitor-fleet/annotation/Fleet alarms": ANNOTATION,
    "monitor-fleet/variable/fleet": ["name"],
    "monitor-overview/panel-1/A": ["alarms"],
    "monitor-overview/panel-2/A": ["harmful_alarms"],
    "monitor-overview/panel-4/A": ["dead_letters"],
    "monitor-overview/panel-5/A": ["ood_flag_rate"],
    "monitor-overview/panel-6/A": ["streams"],
    "monitor-overview/panel-7/A": [
        "time",
        "stream",
        "detector",
        "kind",
        "statistic",
        "threshold",
        "rule",
        "changepoint",
        "event_index",
        "event_id",
        "acknowledged",
    ],
    "monitor-overview/panel-8/A": SERIES,
    "monitor-overview/panel-10/A": SERIES,
    "monitor-overview/panel-12/A": SERIES,
    "monitor-overview/panel-13/A": ["time", "stream", "reason", "source", "partition", "offset"],
    "monitor-overview/panel-14/A": [
        "stream",
        "task",
        "events_processed",
        "last_checkpoint",
        "alarms_total",
        "last_alarm",
    ],
    "monitor-overview/annotation/Alarms": ANNOTATION,
    "monitor-overview/variable/stream": ["name"],
    "monitor-stream/panel-1/A": ["alarms"],
    "monitor-stream/panel-2/A": ["kind"],
    "monitor-stream/panel-3/A": ["changepoint"],
    "monitor-stream/panel-4/A": ["events_processed"],
    "monitor-stream/panel-5/A": ["detector", "log_martingale"],
    "monitor-stream/panel-6/A": SERIES,
    "monitor-stream/panel-6/B": SERIES,
    "monitor-stream/panel-7/A": SERIES,
    "monitor-stream/panel-7/B": SERIES,
    "monitor-stream/panel-8/A": SERIES,
    "monitor-stream/panel-9/A": SERIES,
    "monitor-stream/panel-10/A": ["time", "flagged", "flagged_fraction"],
    "monitor-stream/panel-11/A": ["time", "window_index", "event_id", "rule", "alpha"],
    "monitor-stream/panel-12/A": [
        "time",
        "detector",
        "kind",
        "rule",
        "statistic",
        "threshold",
        "changepoint",
        "event_index",
        "event_id",
        "penalised_fraction",
        "weights_ess",
        "covariate_statistic",
        "acknowledged_at",
        "acknowledged_by",
        "id",
    ],
    "monitor-stream/panel-13/A": SERIES,
    "monitor-stream/panel-14/A": [
        "time",
        "detector",
        "kind",
        "feature",
        "feature_type",
        "test",
        "statistic",
        "p_value",
        "p_adjusted",
        "window_start",
        "window_n",
    ],
    "monitor-stream/panel-15/A": [
        "time",
        "kind",
        "feature",
        "indicator",
        "calibration_rate",
        "rate_after",
        "log_e_value",
        "changepoint",
        "event_index",
        "event_id",
    ],
    "monitor-stream/panel-16/A": [
        "time", "detector", "kind", "feature", "category", "calibration_share", "window_share"
    ],
    "monitor-stream/annotation/Alarms": ANNOTATION,
    "monitor-stream/annotation/Changepoints": ANNOTATION,
    "monitor-stream/variable/stream": ["name"],
}

DASHBOARDS = {d["uid"]: d for d in load_dashboards()}
SQL_QUERIES = [
    (uid, qid, q) for uid, d in DASHBOARDS.items() for qid, q in queries(d) if "rawSql" in q
]
QIDS = [qid for _, qid, _ in SQL_QUERIES]


#: Labels arrive this long after their predictions: both detectors' rows must still share the
#: predictions' clock (docs/persistence.md, "One time base").
LABELS_LATE = timedelta(hours=6)


def _labels_late(events: Path, late: timedelta) -> None:
    lines = []
    for line in events.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("kind") == "label":
            ts = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
            event["ts"] = (ts + late).isoformat()
        lines.append(json.dumps(event))
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class PipelineRun:
    url: str  # as Grafana connects: the compose stack's read-only role (it reads the views)
    owner_url: str  # as the service connects
    stream: str
    first: datetime
    last: datetime

    def context(
        self,
        interval: str = "10s",
        streams: tuple[str, ...] | None = None,
        multi: bool = False,
        shift: timedelta = timedelta(0),
    ) -> QueryContext:
        values = streams or (self.stream,)
        return QueryContext(
            self.first - timedelta(minutes=1) + shift,
            self.last + timedelta(hours=1) + shift,
            interval,
            {"stream": Variable(values, multi=multi), "fleet": Variable((FLEET,))},
        )


@pytest.fixture(scope="module")
def run(postgres_admin: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineRun]:
    from monitor.cli.runs import register_stream, run_source

    with postgres_database(postgres_admin) as url, grafana_reader(postgres_admin, url) as role:
        upgrade(url)
        reader_url = make_url(url).set(username=role, password=READER_PASSWORD)
        paths = build_example(
            tmp_path_factory.mktemp("example"),
            seed=0,
            phases=PHASES,
            n_calibration=N_CALIBRATION,
            label_delay=5,
        )
        _labels_late(paths["events"], LABELS_LATE)
        with paths["events"].open("a", encoding="utf-8") as fh:
            fh.write("\n".join(BAD_LINES) + "\n")
        settings = Settings(database_url=url)
        stream = register_stream(str(paths["config"]), settings)  # as `monitor streams create`
        run_source(f"file:{paths['events']}", [], "dashboards", settings)  # as the worker
        _fleet_run(url, stream)
        _tabular_alarms(url, stream)
        reader = reader_url.render_as_string(hide_password=False)
        first, last = _stored_time_range(reader)
        yield PipelineRun(reader, url, stream, first, last)


def _fleet_run(url: str, stream: str) -> None:
    """A fleet of the stream's two detectors under e-d-Bonferroni (bar K/alpha = 200), decided
    over the whole run as ``monitor fleets run`` does."""
    from monitor.db.engine import make_engine, session_factory
    from monitor.db.fleet_runner import create_fleet, evaluate_fleet

    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            members = [f"{stream}/covariate", f"{stream}/conditional"]
            create_fleet(session, FLEET, members, rule="e_d_bonferroni", alpha=0.01)
            evaluate_fleet(session, FLEET, through=datetime(2100, 1, 1, tzinfo=UTC))
            session.commit()
    finally:
        engine.dispose()


def _tabular_alarms(url: str, stream: str) -> None:
    """One alarm of each tabular kind on the stream, each at the time of its event index (the
    time of the latest trace point at or before it), where the run raised none."""
    from sqlalchemy import func, select

    from monitor.db.engine import make_engine, session_factory
    from monitor.db.models import AlarmRow, TracePointRow
    from monitor.db.store import persist_batch

    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            alarms = [replace(a, ts=session.scalar(
                select(func.max(TracePointRow.ts)).where(
                    TracePointRow.stream == stream, TracePointRow.event_index <= a.event_index)))
                for a in tabular_alarms(stream)]
            before = session.scalar(select(func.count()).select_from(AlarmRow))
            session.rollback()
            persist_batch(session, Batch(alarms=alarms))
            after = session.scalar(select(func.count()).select_from(AlarmRow))
            assert after == before + len(alarms)
    finally:
        engine.dispose()


def _stored_time_range(url: str) -> tuple[datetime, datetime]:
    """Earliest and latest ``ts`` of the stored results (events carry their own times; dead
    letters of unparsable lines are stamped when they are read)."""
    tables = ("alarms", "trace_points", "ood_windows", "dead_letters")
    union = " UNION ALL ".join(f"SELECT min(ts) AS lo, max(ts) AS hi FROM {t}" for t in tables)
    lo, hi = _execute(url, f"SELECT min(lo), max(hi) FROM ({union}) r")[1][0]
    return lo, hi


def _execute(url: str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one query like Grafana's datasource: its own connection, read-only."""
    u = make_url(url)
    with psycopg.connect(
        host=u.host,
        port=u.port or 5432,
        dbname=u.database,
        user=u.username,
        password=u.password,
        autocommit=False,
    ) as conn:
        conn.execute("SET TRANSACTION READ ONLY")
        cur = conn.execute(sql.encode())  # bytes: never parsed for placeholders, like pgx
        columns = [c.name for c in cur.description or []]
        return columns, cur.fetchall()


def _scalar(url: str, sql: str) -> Any:
    return _execute(url, sql)[1][0][0]


def _multi(uid: str) -> bool:
    variables = [v for v in DASHBOARDS[uid]["templating"]["list"] if v["name"] == "stream"]
    return any(bool(v["multi"] or v["includeAll"]) for v in variables)


def test_every_sql_query_has_expected_columns() -> None:
    assert sorted(EXPECTED) == sorted(QIDS)


def test_pipeline_produced_every_kind_of_row(run: PipelineRun) -> None:
    counts = {
        t: _scalar(run.url, f"SELECT count(*) FROM {t}")
        for t in ("streams", "alarms", "trace_points", "ood_windows", "checkpoints", "dead_letters")
    }
    assert all(n > 0 for n in counts.values()), counts
    assert _scalar(run.url, "SELECT count(*) FROM alarms WHERE changepoint IS NOT NULL") > 0
    assert _scalar(run.url, "SELECT count(*) FROM trace_points WHERE weights_ess IS NOT NULL") > 0


def test_pipeline_stored_performance_windows_and_attributions(run: PipelineRun) -> None:
    """The performance panel and the attribution table have rows to show."""
    assert _scalar(run.url, "SELECT count(*) FROM performance_windows") >= 2
    attributed = _scalar(
        run.url, "SELECT count(*) FROM alarms WHERE evidence ? 'attribution'"
    )
    assert attributed >= 1


@pytest.mark.parametrize("interval", ["1s", "1m"])
@pytest.mark.parametrize(("uid", "qid", "query"), SQL_QUERIES, ids=QIDS)
def test_query_returns_expected_columns(
    run: PipelineRun, uid: str, qid: str, query: dict[str, Any], interval: str
) -> None:
    sql = expand(query["rawSql"], run.context(interval, multi=_multi(uid)))
    columns, rows = _execute(run.url, sql)
    assert columns == EXPECTED[qid]
    if columns[:1] == ["time"] and query["format"] == "time_series":
        times = [_epoch(r[0]) for r in rows]
        assert times == sorted(times), "Grafana needs time series sorted by time"
        assert all(_number(v) for r in rows for v in r[1:] if not isinstance(v, str))
    if columns == ANNOTATION:
        assert all(isinstance(r[1], str) and isinstance(r[2], str) for r in rows)


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    assert _number(value), f"time column holds {value!r}"
    return float(value)


def _number(value: Any) -> bool:
    return value is None or (
        isinstance(value, int | float | Decimal) and not isinstance(value, bool)
    )


#: Queries that must show rows for the run (the others may legitimately be empty or are
#: aggregates that always return one row).
NON_EMPTY = [
    *(f"monitor-fleet/panel-{i}/A" for i in (2, 3, 4)),
    "monitor-fleet/panel-3/B",
    "monitor-fleet/annotation/Fleet alarms",
    "monitor-fleet/variable/fleet",
    *(f"monitor-overview/panel-{i}/A" for i in (7, 8, 10, 12, 13, 14)),
    "monitor-overview/annotation/Alarms",
    "monitor-overview/variable/stream",
    *(f"monitor-stream/panel-{i}/A" for i in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16)),
    "monitor-stream/panel-6/B",
    "monitor-stream/panel-7/B",
    "monitor-stream/annotation/Alarms",
    "monitor-stream/annotation/Changepoints",
    "monitor-stream/variable/stream",
]


@pytest.mark.parametrize(
    ("uid", "qid", "query"),
    [q for q in SQL_QUERIES if q[1] in NON_EMPTY],
    ids=[q for q in QIDS if q in NON_EMPTY],
)
def test_query_shows_the_run(run: PipelineRun, uid: str, qid: str, query: dict[str, Any]) -> None:
    _, rows = _execute(run.url, expand(query["rawSql"], run.context(multi=_multi(uid))))
    assert rows, f"{qid} shows nothing for a run that has data for it"


@pytest.mark.parametrize(("uid", "qid", "query"), SQL_QUERIES, ids=QIDS)
def test_time_range_without_data(
    run: PipelineRun, uid: str, qid: str, query: dict[str, Any]
) -> None:
    ctx = run.context(multi=_multi(uid), shift=-timedelta(days=3650))
    columns, rows = _execute(run.url, expand(query["rawSql"], ctx))
    assert columns == EXPECTED[qid]
    if qid == "monitor-fleet/panel-2/A":  # the fleet's configuration stays; nothing allowed yet
        assert [r[4] for r in rows] == [0.0]
    elif "$__timeFilter" in query["rawSql"]:  # nothing in range: no rows, or one row of 0 / NULL
        assert rows == [] or (len(rows) == 1 and all(v in (None, 0) for v in rows[0])), qid


def _panel_sql(uid: str, panel_id: int, ref: str = "A") -> str:
    return next(q["rawSql"] for _, qid, q in SQL_QUERIES if qid == f"{uid}/panel-{panel_id}/{ref}")


def test_overview_aggregates_match_the_tables(run: PipelineRun) -> None:
    ctx = run.context(interval="1m", multi=True)
    alarms = _scalar(run.url, "SELECT count(*) FROM alarms")
    assert _execute(run.url, expand(_panel_sql("monitor-overview", 1), ctx))[1] == [(alarms,)]
    assert len(_execute(run.url, expand(_panel_sql("monitor-overview", 7), ctx))[1]) == alarms
    series = _execute(run.url, expand(_panel_sql("monitor-overview", 8), ctx))[1]
    assert sum(r[2] for r in series) == alarms
    kinds = {r[0] for r in _execute(run.url, "SELECT DISTINCT kind FROM alarms")[1]}
    assert {r[1] for r in series} == kinds
    letters = _scalar(run.url, "SELECT count(*) FROM dead_letters")
    assert letters >= len(BAD_LINES)
    assert _execute(run.url, expand(_panel_sql("monitor-overview", 4), ctx))[1] == [(letters,)]
    rate = _scalar(run.url, "SELECT sum(n_flagged)::float8 / sum(n) FROM ood_windows")
    (got,) = _execute(run.url, expand(_panel_sql("monitor-overview", 5), ctx))[1][0]
    assert math.isclose(got, rate)


def test_overview_stream_filter(run: PipelineRun) -> None:
    other = run.context(streams=("no-such-stream",), multi=True)
    assert _execute(run.url, expand(_panel_sql("monitor-overview", 7), other))[1] == []
    both = run.context(streams=(run.stream, "no-such-stream"), multi=True)
    assert _execute(run.url, expand(_panel_sql("monitor-overview", 7), both))[1]


def test_stream_detail_matches_the_tables(run: PipelineRun) -> None:
    ctx = run.context(interval="1s")
    events = _scalar(run.url, f"SELECT event_index FROM checkpoints WHERE stream = '{run.stream}'")
    assert _execute(run.url, expand(_panel_sql("monitor-stream", 4), ctx))[1] == [(events,)]
    latest = _execute(run.url, expand(_panel_sql("monitor-stream", 2), ctx))[1]
    newest = _scalar(run.url, "SELECT kind FROM alarms ORDER BY ts DESC, id LIMIT 1")
    assert latest == [(newest,)]
    detectors = {r[1] for r in _execute(run.url, expand(_panel_sql("monitor-stream", 7), ctx))[1]}
    assert {"covariate", "conditional"} <= detectors
    thresholds = {
        r[1] for r in _execute(run.url, expand(_panel_sql("monitor-stream", 7, "B"), ctx))[1]
    }
    assert {f"{d} threshold" for d in ("covariate", "conditional")} <= thresholds
    p_values = [r[2] for r in _execute(run.url, expand(_panel_sql("monitor-stream", 8), ctx))[1]]
    assert p_values and all(0.0 <= p <= 1.0 for p in p_values)


def test_tabular_panels_show_the_features_rates_keys_and_frequencies(run: PipelineRun) -> None:
    ctx = run.context(interval="1s")
    rows = _execute(run.url, expand(_panel_sql("monitor-stream", 15), ctx))[1]
    shown = [(r[1], r[2], r[3], r[4], r[5]) for r in rows]
    assert shown == [
        ("data_quality", "area", "missing", 0.05, 0.251),
        ("data_quality", "merchant", "unseen", 0.004, 0.031),
        ("schema_change", "amount", "absent_feature", None, None),
        ("schema_change", "model_version", "new_key", None, None),
    ]
    assert [r[7] for r in rows] == [1200, 1200, 411, 301]  # the changepoints
    frequencies = _execute(run.url, expand(_panel_sql("monitor-stream", 16), ctx))[1]
    country = [(r[4], r[5], r[6]) for r in frequencies if r[3] == "country"]
    assert country == [("DE", 0.48, 0.22), ("FR", 0.31, 0.30), ("IT", 0.15, 0.14),
                       ("other", 0.04, 0.05), ("missing", 0.02, 0.02), ("unseen", 0.0, 0.27)]
    attribution = _execute(run.url, expand(_panel_sql("monitor-stream", 14), ctx))[1]
    typed = {r[3]: (r[4], r[5], r[8]) for r in attribution if r[4] is not None}
    assert typed == {"country": ("categorical", "g_test", 1.2e-11),
                     "amount": ("numeric", "ks", 0.42), "area": ("missing", "fisher_exact", 0.6)}


def test_late_labels_leave_both_detectors_on_one_clock(run: PipelineRun) -> None:
    """Labels came six hours late; the conditional trace and alarms still sit at the
    predictions' times, inside the covariate trace's span (and the panels' time range)."""
    spans = dict(
        (r[0], (r[1], r[2])) for r in _execute(
            run.url, "SELECT detector, min(ts), max(ts) FROM trace_points GROUP BY detector"
        )[1]
    )
    (cov_lo, cov_hi), (cond_lo, cond_hi) = spans["covariate"], spans["conditional"]
    assert cov_lo <= cond_lo and cond_hi <= cov_hi + timedelta(seconds=10)
    late = _scalar(run.url, "SELECT count(*) FROM alarms WHERE ts > "
                   f"'{(cov_hi + timedelta(seconds=10)).isoformat()}'")
    assert late == 0


def test_changepoint_annotations_precede_their_alarms(run: PipelineRun) -> None:
    detail = DASHBOARDS["monitor-stream"]
    (anno,) = [a for a in detail["annotations"]["list"] if a["name"] == "Changepoints"]
    rows = _execute(run.url, expand(anno["target"]["rawSql"], run.context()))[1]
    alarms = _scalar(run.url, "SELECT count(*) FROM alarms WHERE changepoint IS NOT NULL")
    assert len(rows) == alarms
    # (fleet alarms carry no changepoint of their own: docs/algorithms.md, Fleets)
    first_alarm = _scalar(run.url, "SELECT min(ts) FROM alarms WHERE changepoint IS NOT NULL")
    assert min(r[0] for r in rows) <= first_alarm


def test_prometheus_panels_read_served_metrics(run: PipelineRun) -> None:
    """The metric names of the Prometheus-fed panels are served by the API's collector."""
    from prometheus_client import CollectorRegistry, generate_latest

    from monitor.db.engine import make_engine, session_factory
    from monitor.ops.metrics import DatabaseCollector
    from tests.support.dashboards import METRICS

    engine = make_engine(run.owner_url)
    try:
        registry = CollectorRegistry()
        registry.register(DatabaseCollector(session_factory(engine)))
        text = generate_latest(registry).decode()
    finally:
        engine.dispose()
    from prometheus_client.parser import text_string_to_metric_families

    served = {(sample.name, sample.labels.get("stream"))
              for family in text_string_to_metric_families(text) for sample in family.samples}
    for name in METRICS:
        assert (name, run.stream) in served, name


def test_fleet_dashboard_matches_the_tables(run: PipelineRun) -> None:
    ctx = run.context(interval="1s")
    stored = _scalar(run.url, f"SELECT count(*) FROM alarms WHERE fleet = '{FLEET}'")
    assert stored > 0
    assert _execute(run.url, expand(_panel_sql("monitor-fleet", 1), ctx))[1] == [(stored,)]
    rows = _execute(run.url, expand(_panel_sql("monitor-fleet", 4), ctx))[1]
    assert len(rows) == stored
    assert all(r[4] == pytest.approx(200.0) and r[3] >= r[4] for r in rows)  # R cleared K/alpha
    assert {(r[5], r[6]) for r in rows} == {("e_d_bonferroni", 0.01)}
    members = {r[1] for r in _execute(run.url, expand(_panel_sql("monitor-fleet", 3), ctx))[1]}
    assert members == {f"{run.stream}/covariate", f"{run.stream}/conditional"}
    lines = _execute(run.url, expand(_panel_sql("monitor-fleet", 3, "B"), ctx))[1]
    bars = {r[1]: r[2] for r in lines}
    assert bars["rejection line (one rejection)"] == pytest.approx(math.log10(200.0))
    ((rule, level, n, _, allowed, words),) = _execute(
        run.url, expand(_panel_sql("monitor-fleet", 2), ctx)
    )[1]
    assert (rule, level, n) == ("e_d_bonferroni", 0.01, 2) and allowed > 0
    assert "1 after 100 events" in words
