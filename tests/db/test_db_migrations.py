"""Alembic migrations: upgrade from empty, downgrade to base, and agreement with the models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Integer, MetaData, Table, insert, inspect, select

from monitor.db.engine import make_engine
from monitor.db.migrate import alembic_config, current_revision, downgrade, upgrade
from monitor.db.models import Base

ROOT = Path(__file__).resolve().parents[2]

#: The newest migration (one head: the history is linear).
HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()

TABLES = {
    "alarm_revisions",
    "alarms",
    "alert_outbox",
    "calibration_events",
    "checkpoint_chunks",
    "checkpoints",
    "dead_letters",
    "fleets",
    "ingest_requests",
    "ingested_events",
    "ood_flags",
    "ood_windows",
    "performance_windows",
    "source_offsets",
    "stream_writers",
    "streams",
    "trace_points",
    "webhook_deliveries",
    "writer_fences",
}


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def schema_differences(url: str, metadata: MetaData) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def test_upgrade_from_empty_then_downgrade_to_base(empty_database_url: str) -> None:
    assert table_names(empty_database_url) == set()
    upgrade(empty_database_url)
    assert table_names(empty_database_url) == TABLES
    assert current_revision(empty_database_url) == HEAD
    downgrade(empty_database_url, "base")
    assert table_names(empty_database_url) == set()
    assert current_revision(empty_database_url) is None
    upgrade(empty_database_url)  # and back up again: the downgrade left nothing behind
    assert table_names(empty_database_url) == TABLES


def test_models_and_migrations_agree(migrated_database_url: str) -> None:
    assert schema_differences(migrated_database_url, Base.metadata) == []


def test_comparison_detects_a_model_change(migrated_database_url: str) -> None:
    # The agreement test is only worth something if a divergence would be reported.
    changed = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["alarms"].append_column(Column("severity", Integer, nullable=True))
    diffs = schema_differences(migrated_database_url, changed)
    assert [d[0] for d in diffs if isinstance(d, tuple)] == ["add_column"]


def test_offline_sql_renders_for_postgresql(capsys: pytest.CaptureFixture[str]) -> None:
    from alembic import command

    from monitor.db.migrate import alembic_config

    config = alembic_config()
    config.cmd_opts = None
    config.set_main_option("sqlalchemy.url", "postgresql+psycopg://u@h/db")
    command.upgrade(config, "head", sql=True)
    sql = capsys.readouterr().out
    assert "CREATE TABLE alarms" in sql
    assert "JSONB" in sql and "TIMESTAMP WITH TIME ZONE" in sql


def test_concurrent_upgrades_do_not_collide(empty_database_url: str) -> None:
    # Workers run `monitor db upgrade` as they start: two processes at once must both succeed.
    # (Processes, not threads: Alembic's migration context is process-global.)
    code = "import sys; from monitor.db.migrate import upgrade; upgrade(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.Popen([sys.executable, "-c", code, empty_database_url], cwd=ROOT, env=env)
        for _ in range(2)
    ]
    assert [run.wait(timeout=60) for run in runs] == [0, 0]
    assert table_names(empty_database_url) == TABLES
    assert current_revision(empty_database_url) == HEAD


def test_checkpoint_arrays_are_stored_uncompressed_on_postgresql(
    migrated_database_url: str,
) -> None:
    # Migration 0002: pglz compression of the ~0.6 MB checkpoint blob cost 20-40 ms per batch.
    if not migrated_database_url.startswith("postgresql"):
        pytest.skip("a PostgreSQL storage setting")
    engine = make_engine(migrated_database_url)
    try:
        with engine.connect() as conn:
            storage = [conn.exec_driver_sql(
                "SELECT attstorage FROM pg_attribute "
                f"WHERE attrelid = '{table}'::regclass AND attname = '{column}'"
            ).scalar_one() for table, column in (("checkpoints", "arrays"),
                                                 ("checkpoints", "state"),
                                                 ("checkpoint_chunks", "data"))]
    finally:
        engine.dispose()
    assert storage == ["e", "e", "e"]  # EXTERNAL: out of line, not compressed (0002, 0019)


def test_stored_time_budgets_keep_the_floor_they_had(empty_database_url: str) -> None:
    """Migration 0016 ("Changed defaults", docs/operations.md): a time budget stored before
    ``min_threshold`` existed keeps the floor it had (2), so its thresholds do not change; a
    fixed threshold is left alone; the downgrade removes the field the older release rejects."""
    upgrade(empty_database_url, "0015")
    budget = {"rule": "shiryaev_roberts", "threshold": None, "false_alarm_every": 604800.0}
    fixed = {"rule": "cusum", "threshold": 500.0, "false_alarm_every": None}
    engine = make_engine(empty_database_url)
    streams = Table("streams", MetaData(), autoload_with=engine)
    try:
        with engine.begin() as conn:
            conn.execute(insert(streams), [
                {"name": "budgeted", "task": "regression",
                 "config": {"name": "budgeted", "alarm": budget, "covariate_alarm": None}},
                {"name": "fixed", "task": "regression",
                 "config": {"name": "fixed", "alarm": fixed, "covariate_alarm": budget}},
            ])

        def alarms() -> dict[str, tuple[Any, Any]]:
            with engine.connect() as conn:
                rows = conn.execute(select(streams.c.name, streams.c.config)).all()
            return {name: (c["alarm"], c["covariate_alarm"]) for name, c in rows}

        upgrade(empty_database_url)
        assert alarms() == {"budgeted": ({**budget, "min_threshold": 2.0}, None),
                            "fixed": (fixed, {**budget, "min_threshold": 2.0})}
        downgrade(empty_database_url, "0015")
        assert alarms() == {"budgeted": (budget, None), "fixed": (fixed, budget)}
    finally:
        engine.dispose()


def test_event_ids_of_any_length_after_0017(empty_database_url: str) -> None:
    """Migration 0018 (issue #31): rows stored before keep their ids; from it an alarm and a
    calibration row hold an id of any length, an OOD flag its key and the whole id; the downgrade
    cuts the long ids to 255 characters and keeps the flags' keys."""
    from datetime import UTC, datetime

    from monitor.db.models import event_key

    upgrade(empty_database_url, "0017")
    engine = make_engine(empty_database_url)
    ts = datetime(2026, 12, 2, tzinfo=UTC)
    long_id = "order/" + "x" * 9_994

    def tables() -> dict[str, Table]:
        meta = MetaData()
        names = ("alarms", "calibration_events", "streams", "ood_windows", "ood_flags")
        return {name: Table(name, meta, autoload_with=engine) for name in names}

    def alarm(event_id: str, index: int) -> dict[str, Any]:
        return {"id": f"a-{index}", "stream": "s", "detector": "conditional",
                "kind": "concept_shift", "event_id": event_id, "event_index": index, "ts": ts,
                "statistic": 1.0, "threshold": 1.0, "rule": "cusum", "evidence": {}}

    def ids(t: dict[str, Table]) -> dict[str, list[Any]]:
        with engine.connect() as conn:
            return {
                "alarms": sorted(conn.execute(select(t["alarms"].c.event_id)).scalars()),
                "calibration": sorted(
                    conn.execute(select(t["calibration_events"].c.event_id)).scalars()),
                "flags": sorted(conn.execute(select(t["ood_flags"].c.event_id)).scalars()),
            }

    try:
        old = tables()
        with engine.begin() as conn:
            conn.execute(insert(old["streams"]), [{"name": "s", "task": "regression",
                                                   "config": {}}])
            conn.execute(insert(old["alarms"]), [alarm("e-1", 1)])
            conn.execute(insert(old["calibration_events"]), [
                {"stream": "s", "idx": 0, "event_id": "c-0", "features": [1.0],
                 "prediction": 1.0, "label": 1.0}])
            conn.execute(insert(old["ood_windows"]), [
                {"stream": "s", "window_index": 0, "start_index": 0, "end_index": 9, "ts": ts,
                 "n": 10, "n_flagged": 2, "threshold": 0.1, "rule": "eg_bh", "alpha": 0.1}])
            conn.execute(insert(old["ood_flags"]), [
                {"stream": "s", "window_index": 0, "event_id": "e-3"}])
        upgrade(empty_database_url)
        new = tables()
        assert ids(new) == {"alarms": ["e-1"], "calibration": ["c-0"], "flags": ["e-3"]}
        with engine.begin() as conn:
            conn.execute(insert(new["alarms"]), [alarm(long_id, 2)])
            conn.execute(insert(new["calibration_events"]), [
                {"stream": "s", "idx": 1, "event_id": long_id, "features": [1.0],
                 "prediction": 1.0, "label": 1.0}])
            conn.execute(insert(new["ood_flags"]), [
                {"stream": "s", "window_index": 0, "event_id": event_key(long_id),
                 "full_event_id": long_id}])
            full = conn.execute(select(new["ood_flags"].c.full_event_id)).scalars().all()
        assert sorted(full, key=str) == sorted([None, long_id], key=str)
        assert ids(new) == {"alarms": ["e-1", long_id], "calibration": ["c-0", long_id],
                            "flags": sorted(["e-3", event_key(long_id)])}
        downgrade(empty_database_url, "0017")
        assert ids(tables()) == {"alarms": ["e-1", long_id[:255]],
                                 "calibration": ["c-0", long_id[:255]],
                                 "flags": sorted(["e-3", event_key(long_id)])}
        upgrade(empty_database_url)
    finally:
        engine.dispose()


def test_checkpoint_pieces_go_back_into_the_blob_on_downgrade(empty_database_url: str) -> None:
    """Migration 0019: a checkpoint stored as pieces is whole again after the downgrade (the
    older release reads it without them), and loads the same after upgrading again."""
    from monitor.db.engine import session_factory
    from monitor.db.store import load_state, persist_batch
    from monitor.engine.batch import Batch
    from monitor.streams.state import Checkpoint, decode_state
    from tests.support.states import assert_identical

    rng = np.random.default_rng(4)
    state = {"bank": rng.normal(size=(900, 3)), "f": np.asfortranarray(rng.normal(size=(70, 20))),
             "small": np.arange(5), "x": 0.5}
    upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    try:
        with session_factory(engine)() as session:
            persist_batch(session, Batch(checkpoints={"s": Checkpoint("s", 3, 42, state)}))
        engine.dispose()
        downgrade(empty_database_url, "0018")
        checkpoints = Table("checkpoints", MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            text, blob = conn.execute(select(checkpoints.c.state, checkpoints.c.arrays)).one()
        assert "chunks" not in checkpoints.c
        assert_identical(decode_state(text, bytes(blob))["state"], state)
        engine.dispose()
        upgrade(empty_database_url)
        with session_factory(engine)() as session:
            loaded = load_state(session, "s")
        assert loaded is not None and loaded.event_index == 42
        assert_identical(loaded.state, state)
    finally:
        engine.dispose()
