"""The PostgreSQL init script of the compose stack, run against the real local PostgreSQL.

``dashboards/provisioning/postgres/10-grafana-reader.sh`` is what the postgres image runs on
an empty data directory. Here it runs the same way (``sh`` with the image's environment
variables, ``psql`` on the server) on a fresh database; then the migrations create the tables as
the owner, and the reader must be able to SELECT every table and nothing more.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from monitor.db.migrate import upgrade
from tests.conftest import postgres_database

SCRIPT = (
    Path(__file__).resolve().parents[2] / "dashboards/provisioning/postgres/10-grafana-reader.sh"
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(shutil.which("psql") is None, reason="needs the psql client"),
]


@pytest.fixture
def reader(postgres_admin: Engine) -> Iterator[tuple[str, str]]:
    """(database URL, reader role) after running the init script; the role is dropped after."""
    role = f"grafana_reader_{uuid.uuid4().hex[:8]}"
    with postgres_database(postgres_admin) as url:
        parsed = make_url(url)
        env = {
            **os.environ,
            "POSTGRES_USER": parsed.username or "postgres",
            "POSTGRES_DB": parsed.database or "",
            "GRAFANA_READER_USER": role,
            "GRAFANA_READER_PASSWORD": "reader-test-only",
            "PGHOST": parsed.host or "127.0.0.1",
            "PGPORT": str(parsed.port or 5432),
        }
        try:
            subprocess.run(
                ["sh", str(SCRIPT)], env=env, check=True, capture_output=True, timeout=60
            )
            yield url, role
        finally:
            with postgres_admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
                conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')


def _connect_as(url: str, role: str) -> psycopg.Connection:
    parsed = make_url(url)
    return psycopg.connect(
        host=parsed.host,
        port=parsed.port or 5432,
        dbname=parsed.database,
        user=role,
        password="reader-test-only",
        autocommit=True,
    )


def test_reader_can_read_the_tables_the_migrations_create(reader: tuple[str, str]) -> None:
    url, role = reader
    upgrade(url)  # as the owner, after the script: default privileges must cover these tables
    with _connect_as(url, role) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
            )
        ]
        assert {"alarms", "streams", "trace_points", "ood_windows", "dead_letters"} <= set(tables)
        for table in tables:
            conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()


def test_reader_cannot_write(reader: tuple[str, str]) -> None:
    url, role = reader
    upgrade(url)
    with _connect_as(url, role) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM alarms")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE grafana_was_here (x int)")
