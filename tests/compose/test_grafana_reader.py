"""The PostgreSQL init script of the compose stack, run against the real local PostgreSQL.

``dashboards/provisioning/postgres/10-grafana-reader.sh`` is what the postgres image runs on
an empty data directory. Here it runs the same way (``sh`` with the image's environment
variables, ``psql`` on the server) on a fresh database; then the migrations create the tables
and the reader's views as the owner. The reader must read the results through the views and
nothing more: no write, no table of ``public``, no raw payload, no calibration data or state.
(tests/dashboards/test_sql.py runs every dashboard query as such a reader.)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from monitor.db.grafana_reader import HIDDEN_COLUMNS, HIDDEN_TABLES, READER_SCHEMA
from monitor.db.migrate import downgrade, upgrade
from tests.support.databases import READER_PASSWORD, grafana_reader, postgres_database

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(shutil.which("psql") is None, reason="needs the psql client"),
]


@pytest.fixture
def reader(postgres_admin: Engine) -> Iterator[tuple[str, str]]:
    """(database URL, reader role) after running the init script, then the migrations."""
    with postgres_database(postgres_admin) as url, grafana_reader(postgres_admin, url) as role:
        upgrade(url)  # as the owner, after the script, like the compose stack's `migrate`
        yield url, role


def _connect_as(url: str, role: str) -> psycopg.Connection:
    parsed = make_url(url)
    return psycopg.connect(
        host=parsed.host,
        port=parsed.port or 5432,
        dbname=parsed.database,
        user=role,
        password=READER_PASSWORD,
        autocommit=True,
    )


def _owner_tables(url: str) -> dict[str, list[str]]:
    parsed = make_url(url)
    with psycopg.connect(
        host=parsed.host, port=parsed.port or 5432, dbname=parsed.database, user=parsed.username
    ) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ).fetchall()
    tables: dict[str, list[str]] = {}
    for table, column in rows:
        tables.setdefault(table, []).append(column)
    return tables


def test_reader_reads_every_results_table_through_its_view(reader: tuple[str, str]) -> None:
    url, role = reader
    tables = _owner_tables(url)
    visible = sorted(set(tables) - HIDDEN_TABLES)
    results = {"alarms", "streams", "trace_points", "ood_windows", "dead_letters", "checkpoints"}
    assert results <= set(visible)
    with _connect_as(url, role) as conn:
        for table in visible:
            cur = conn.execute(f'SELECT * FROM "{table}" LIMIT 0')  # the view, by search_path
            shown = [c.name for c in cur.description or []]
            assert shown == [c for c in tables[table] if c not in HIDDEN_COLUMNS], table


def test_reader_cannot_read_payloads_state_or_calibration(reader: tuple[str, str]) -> None:
    url, role = reader
    with _connect_as(url, role) as conn:
        for sql in (
            "SELECT payload FROM dead_letters",
            "SELECT state FROM checkpoints",
            "SELECT config FROM streams",
        ):
            with pytest.raises(psycopg.errors.UndefinedColumn):
                conn.execute(sql)
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM calibration_events")
        for table in ("dead_letters", "calibration_events", "checkpoints", "alarms"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT * FROM public.{table}")


def test_reader_cannot_write(reader: tuple[str, str]) -> None:
    url, role = reader
    with _connect_as(url, role) as conn:
        assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM alarms")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM public.alarms")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"CREATE TABLE {READER_SCHEMA}.grafana_was_here (x int)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE public.grafana_was_here (x int)")


def test_views_follow_downgrade_and_upgrade(reader: tuple[str, str]) -> None:
    url, role = reader
    downgrade(url, "0004")  # tables and columns of later revisions go, with their views
    with _connect_as(url, role) as conn, pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM stream_writers")
    upgrade(url)
    with _connect_as(url, role) as conn:
        assert conn.execute("SELECT count(*) FROM stream_writers").fetchone() == (0,)
    downgrade(url, "base")
    with _connect_as(url, role) as conn, pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM alarms")
