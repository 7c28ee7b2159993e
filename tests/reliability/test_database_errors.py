"""Database failures a worker meets end in one line that names the cause and what to do, with a
non-zero exit code, no traceback and never a statement's parameters.

Each failure is real: a PostgreSQL role whose privileges were revoked, a SQLite file that cannot
grow (``PRAGMA max_page_count``: SQLite's own "database or disk is full"), a port nothing listens
on, a schema never migrated. PostgreSQL's disk-full, serialization and constraint errors come from
a trigger that raises their SQLSTATE (a deterministic path to the server's own error); the
worker's retries use a short deadline so that giving up takes a fraction of a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from monitor.cli.main import main
from monitor.cli.runs import register_stream, run_source
from monitor.db.migrate import upgrade
from monitor.engine.worker import DatabaseUnavailableError, RetryPolicy
from monitor.ops.datasets import build_example
from monitor.settings import Settings
from tests.support.cli_errors import closed_port, one_line
from tests.support.databases import postgres_database
from tests.support.processes import ROOT

#: Retries that give up at once (the default waits 60 s).
QUICK = RetryPolicy(deadline_s=0.3, backoff_s=0.05, max_backoff_s=0.1)


@pytest.fixture
def example(tmp_path: Path) -> dict[str, Path]:
    """A short stream (400 events) that stores trace points and checkpoints from its first
    batch."""
    return build_example(tmp_path / "example", seed=3, n_calibration=200, stream="s",
                         phases=[("stable", 200), ("concept", 200)])


def _run_argv(db: str, example: dict[str, Path]) -> list[str]:
    return ["--db", db, "run", "--source", f"file:{example['events']}",
            "--config", str(example["config"]), "--batch-size", "100"]


def _clean(line: str) -> None:
    """Nothing of the statement or its parameters."""
    for leak in ("[SQL", "parameters", "INSERT INTO", " FROM ", "'stream': ", "Traceback"):
        assert leak not in line, line
    assert len(line) < 600, line


# -- permission denied --------------------------------------------------------------------------


@contextmanager
def limited_role(admin_engine: Engine, url: str, revoke: str) -> Iterator[str]:
    """The URL of a new login role on the database at ``url`` that may read and write every
    table but for ``revoke`` (``PRIVILEGES ON TABLES``); dropped afterwards."""
    role = f"monitor_worker_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for statement in (
            f'CREATE ROLE "{role}" LOGIN',
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"',
            f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"',
            f'REVOKE {revoke} FROM "{role}"',
        ):
            conn.exec_driver_sql(statement)
    try:
        yield make_url(url).set(username=role).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
        admin.dispose()
        with admin_engine.connect() as conn:
            conn.exec_driver_sql(f'DROP ROLE "{role}"')


@pytest.fixture
def revoked_url(postgres_admin: Engine, example: dict[str, Path]) -> Iterator[str]:
    """A migrated database with the stream registered, and the URL of a role without INSERT
    and UPDATE on trace_points and checkpoints."""
    with postgres_database(postgres_admin) as url:
        upgrade(url)
        register_stream(str(example["config"]), Settings(database_url=url))
        revoke = "INSERT, UPDATE ON trace_points, checkpoints"
        with limited_role(postgres_admin, url, revoke) as limited:
            yield limited


@pytest.mark.postgres
def test_revoked_privileges_end_in_one_line(revoked_url: str, example: dict[str, Path]) -> None:
    """The real process: its whole stderr is the one line."""
    code = "import sys; from monitor.cli.main import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, *_run_argv(revoked_url, example)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT), "MONITOR_AUTO_MIGRATE": "false",
                          "MONITOR_LOG_LEVEL": "WARNING"},
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    line = result.stderr
    assert line.startswith("monitor: error: "), line
    assert "permission denied for table" in line and "SQLSTATE 42501" in line, line
    assert "GRANT" in line, line
    _clean(line)


@pytest.mark.postgres
def test_a_refused_background_prune_is_one_warning_and_the_run_goes_on(
    postgres_admin: Engine, example: dict[str, Path], caplog: pytest.LogCaptureFixture,
) -> None:
    config = example["config"]
    config.write_text(config.read_text() + "retention:\n  trace_points: 1m\n", encoding="utf-8")
    with postgres_database(postgres_admin) as url:
        upgrade(url)
        register_stream(str(config), Settings(database_url=url))
        with limited_role(postgres_admin, url, "DELETE ON trace_points") as limited:
            settings = Settings(database_url=limited, auto_migrate=False,
                                retention_interval=1e-9)
            summary = run_source(f"file:{example['events']}", [], "g", settings,
                                 batch_size=100)
    assert summary.events == 400
    refused = [r for r in caplog.records if r.getMessage().startswith("housekeeping failed")]
    assert refused and all(r.exc_info is None for r in refused)
    line = refused[0].getMessage()
    assert "permission denied for table trace_points (SQLSTATE 42501)" in line, line
    assert "GRANT" in line, line
    _clean(line)


# -- disk full ----------------------------------------------------------------------------------


@contextmanager
def sqlite_that_cannot_grow() -> Iterator[None]:
    """Every SQLite connection opened meanwhile may not grow its file (``max_page_count`` at
    its current size, at least 1 page): writes that need a page fail with SQLITE_FULL."""

    def cap(dbapi: Any, _record: Any) -> None:
        pages = dbapi.execute("PRAGMA page_count").fetchone()[0]
        dbapi.execute(f"PRAGMA max_page_count = {max(pages, 1)}")

    event.listen(Engine, "connect", cap)
    try:
        yield
    finally:
        event.remove(Engine, "connect", cap)


def test_starting_on_a_full_disk_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, example: dict[str, Path],
) -> None:
    with sqlite_that_cannot_grow():
        code = main(_run_argv(f"sqlite:///{tmp_path}/m.db", example))
    assert code == 1
    line = one_line(capsys)
    assert "database or disk is full" in line and "free space" in line, line
    assert "start the server" not in line, line
    _clean(line)


def test_a_full_disk_mid_run_ends_in_one_line(tmp_path: Path, example: dict[str, Path]) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/m.db")
    register_stream(str(example["config"]), settings)
    with sqlite_that_cannot_grow(), pytest.raises(DatabaseUnavailableError) as raised:
        run_source(f"file:{example['events']}", [], "g", settings, batch_size=100, retry=QUICK)
    message = str(raised.value)
    assert "\n" not in message
    assert "database or disk is full" in message and "free space" in message, message
    _clean(message)


@pytest.fixture
def pg_url(postgres_admin: Engine) -> Iterator[str]:
    with postgres_database(postgres_admin) as url:
        upgrade(url)
        yield url


def _raise_on_insert(url: str, table: str, sqlstate: str, message: str) -> None:
    """A trigger that makes every INSERT into ``table`` fail with ``sqlstate``."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION monitor_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{sqlstate}'; END $$"
        )
        conn.exec_driver_sql(
            f"CREATE TRIGGER monitor_test_fail BEFORE INSERT ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION monitor_test_fail()"
        )
    engine.dispose()


DISK_FULL = ("53100", 'could not extend file "base/16384/16402": No space left on device')


@pytest.mark.postgres
def test_starting_on_a_full_postgres_disk_says_so(
    capsys: pytest.CaptureFixture[str], pg_url: str, example: dict[str, Path],
) -> None:
    _raise_on_insert(pg_url, "streams", *DISK_FULL)
    assert main(_run_argv(pg_url, example)) == 1
    line = one_line(capsys)
    assert "No space left on device" in line and "SQLSTATE 53100" in line, line
    assert "free space" in line and "start the server" not in line, line
    _clean(line)


@pytest.mark.postgres
@pytest.mark.parametrize(("sqlstate", "message", "says"), [
    (*DISK_FULL, "free space"),
    ("40001", "could not serialize access due to concurrent update", "conflict"),
    ("40P01", "deadlock detected", "conflict"),
], ids=["disk-full", "serialization", "deadlock"])
def test_failures_the_worker_retries_end_in_one_line(
    pg_url: str, example: dict[str, Path], sqlstate: str, message: str, says: str,
) -> None:
    settings = Settings(database_url=pg_url)
    register_stream(str(example["config"]), settings)
    _raise_on_insert(pg_url, "trace_points", sqlstate, message)
    with pytest.raises(DatabaseUnavailableError) as raised:
        run_source(f"file:{example['events']}", [], "g", settings, batch_size=100, retry=QUICK)
    line = str(raised.value)
    assert "\n" not in line
    assert message in line and f"SQLSTATE {sqlstate}" in line and says in line, line
    assert "restart" in line, line
    _clean(line)


# -- constraint violations, schema, connection ---------------------------------------------------


@pytest.mark.postgres
def test_a_constraint_violation_ends_in_one_line(
    capsys: pytest.CaptureFixture[str], pg_url: str, example: dict[str, Path],
) -> None:
    """Every write of the stored offsets breaks a constraint: the batch, each of its records
    alone and then its dead letters are refused (the offsets go with each of them)."""
    _raise_on_insert(pg_url, "source_offsets", "23514",
                     'new row for relation "source_offsets" violates check constraint "ck_x"')
    assert main(_run_argv(pg_url, example)) == 1
    line = one_line(capsys)
    assert "violates check constraint" in line and "SQLSTATE 23514" in line, line
    assert "monitor db upgrade" in line, line
    _clean(line)


@pytest.mark.parametrize(
    "dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_schema_never_migrated_says_to_upgrade(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    example: dict[str, Path], dialect: str, request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("MONITOR_AUTO_MIGRATE", "false")
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path}/m.db"
        code = main(_run_argv(url, example))
    else:
        with postgres_database(request.getfixturevalue("postgres_admin")) as url:
            code = main(_run_argv(url, example))
    assert code == 1
    line = one_line(capsys)
    assert "monitor db upgrade" in line, line
    _clean(line)


def test_connection_refused_ends_in_one_line(
    capsys: pytest.CaptureFixture[str], example: dict[str, Path],
) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/monitor"
    assert main(_run_argv(url, example)) == 1
    line = one_line(capsys)
    assert "cannot connect to the database" in line and "Connection refused" in line, line
    assert "start the server" in line, line
    _clean(line)


def test_a_sqlite_file_that_cannot_be_opened_ends_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, example: dict[str, Path],
) -> None:
    url = f"sqlite:///{tmp_path}/missing/folder/m.db"
    assert main(_run_argv(url, example)) == 1
    line = one_line(capsys)
    assert "unable to open database file" in line and "directory" in line, line
    assert "start the server" not in line, line
    _clean(line)
