"""Databases for tests: a fresh PostgreSQL database, the Grafana reader role of the compose
stack, a database that refuses one alarm.

The server is ``MONITOR_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``), used only to create and drop uniquely
named test databases; the fixtures of tests/conftest.py build on these helpers.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from monitor.db.engine import make_engine
from monitor.db.migrate import upgrade

POSTGRES_ADMIN_URL = os.environ.get(
    "MONITOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def postgres_database(admin: Engine) -> Iterator[str]:
    """A fresh, uniquely named, empty PostgreSQL database, dropped (with FORCE) afterwards."""
    name = f"monitor_test_{uuid.uuid4().hex[:16]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


READER_SCRIPT = (
    Path(__file__).resolve().parents[2] / "dashboards/provisioning/postgres/10-grafana-reader.sh"
)
READER_PASSWORD = "reader-test-only"


@contextmanager
def grafana_reader(admin: Engine, url: str) -> Iterator[str]:
    """Run the compose stack's reader script on the database at ``url`` (as the postgres image
    does: ``sh`` with its environment, ``psql`` on the server); yield the new role, dropped after
    (run it before the migrations, like the stack)."""
    parsed = make_url(url)
    role = f"grafana_reader_{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "POSTGRES_USER": parsed.username or "postgres",
        "POSTGRES_DB": parsed.database or "",
        "GRAFANA_READER_USER": role,
        "GRAFANA_READER_PASSWORD": READER_PASSWORD,
        "PGHOST": parsed.host or "127.0.0.1",
        "PGPORT": str(parsed.port or 5432),
    }
    subprocess.run(["sh", str(READER_SCRIPT)], env=env, check=True, capture_output=True, timeout=60)
    try:
        yield role
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')


def refuse_alarm(url: str, refused: dict[str, Any]) -> None:
    """Make the database refuse one alarm of the reference run (a CHECK constraint)."""
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:  # the database refuses this one alarm, whatever the reason
        conn.exec_driver_sql("ALTER TABLE alarms ADD CONSTRAINT refuse_one "
                             f"CHECK (event_id <> '{refused['event_id']}')")
    engine.dispose()


@contextmanager
def executed(engine: Engine | Connection) -> Iterator[list[tuple[str, Any, bool]]]:
    """Every statement ``engine`` sends while the block runs: ``(statement, parameters,
    executemany)`` as ``before_cursor_execute`` sees them (one per round trip but for the
    pipelined ``executemany``)."""
    from sqlalchemy import event

    seen: list[tuple[str, Any, bool]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        seen.append((statement, parameters, executemany))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)
