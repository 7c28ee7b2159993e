"""Restore from the database: a run stopped halfway and resumed by a fresh process (new objects,
state read back from the database) ends with exactly the results of an uninterrupted run.

Runs on SQLite and on the local PostgreSQL (``empty_database_url`` is parametrized over both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from connectors import FileSource
from monitor.db.engine import make_engine
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import Worker
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from tests.support.databases import postgres_database

PHASES = [("stable", 250), ("concept", 350)]
TABLES = {
    "alarms": "select id, stream, detector, kind, event_id, event_index, ts, changepoint, "
    "statistic, threshold, rule, evidence from alarms order by id",
    # every column but created_at (the ingest time differs between two runs)
    "trace_points": "select stream, detector, event_index, ts, log_martingale, p_value, "
    "log_statistic, log_threshold, weights_ess, config_version from trace_points "
    "order by stream, detector, event_index",
    "ood_windows": "select stream, window_index, start_index, end_index, ts, n, n_flagged, "
    "threshold, rule, alpha from ood_windows order by stream, window_index",
    "ood_flags": "select * from ood_flags order by stream, window_index, event_id",
    "checkpoints": "select stream, version, event_index, state, arrays from checkpoints",
    "source_offsets": 'select source, partition, "offset" from source_offsets',
}


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("example")
    alarm = {"rule": "shiryaev_roberts", "threshold": 300}
    return build_example(
        folder, seed=3, phases=PHASES, n_calibration=400, label_delay=15, alarm=alarm
    )


def run(example: dict[str, Path], url: str, max_batches: int | None = None) -> None:
    """One 'process': fresh monitors, fresh source, state restored from the database."""
    sink = DatabaseSink(url)
    monitors = build_monitors(read_configs([str(example["config"])]))
    with FileSource(example["events"]) as source:
        pipeline = Pipeline(monitors, source=source.name)
        worker = Worker(source, pipeline, sink, source_kind="file", batch_size=40)
        worker.run(max_batches=max_batches)
    sink.close()


def snapshot(url: str) -> dict[str, list[Any]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        out = {
            name: [tuple(row) for row in conn.execute(text(sql))] for name, sql in TABLES.items()
        }
    engine.dispose()
    return out


@pytest.fixture
def reference_url(empty_database_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A second empty database of the same dialect, for the uninterrupted run."""
    if empty_database_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'reference.db'}"
        return
    with postgres_database(request.getfixturevalue("postgres_admin")) as url:
        yield url


def test_resume_from_database_equals_uninterrupted_run(
    example: dict[str, Path], empty_database_url: str, reference_url: str
) -> None:
    uninterrupted = reference_url
    run(example, uninterrupted)
    run(example, empty_database_url, max_batches=9)  # stop partway (mid-phase, labels pending)
    halfway = snapshot(empty_database_url)
    assert 0 < halfway["checkpoints"][0][2] < sum(n for _, n in PHASES)
    run(example, empty_database_url, max_batches=5)  # another restart
    run(example, empty_database_url)  # to the end
    expected, got = snapshot(uninterrupted), snapshot(empty_database_url)
    assert expected["alarms"], "the example must raise alarms for the comparison to mean anything"
    for table in TABLES:
        assert _normalise(got[table]) == _normalise(expected[table]), table


def _normalise(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Order-insensitive rows with JSON text canonicalised and binary as bytes."""
    import json
    from datetime import UTC, datetime

    def norm(value: Any) -> Any:
        if isinstance(value, memoryview):
            return bytes(value)
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if isinstance(value, str) and value[:1] in "{[":
            try:
                return json.dumps(json.loads(value), sort_keys=True)
            except ValueError:
                return value
        if isinstance(value, dict | list):
            return json.dumps(value, sort_keys=True)
        return value

    return sorted((tuple(norm(v) for v in row) for row in rows), key=repr)
