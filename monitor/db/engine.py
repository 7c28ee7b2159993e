"""Engines and sessions for PostgreSQL (psycopg 3) and SQLite, configured for the service."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

from monitor.db.errors import UnsupportedDatabaseError
from monitor.db.types import json_dumps

__all__ = ["SQLITE_BEGIN", "make_engine", "normalise_url", "session_factory"]

#: Execution option naming the SQLite ``BEGIN`` mode of a connection's next transaction.
#: ``persist_batch`` asks for ``"IMMEDIATE"`` so that it takes the write lock up front (and waits
#: for it under ``busy_timeout``) instead of failing when a read transaction upgrades to a write.
SQLITE_BEGIN = "monitor_sqlite_begin"

#: How long a SQLite connection waits for another writer's lock, in milliseconds.
SQLITE_BUSY_TIMEOUT_MS = 10_000


def normalise_url(url: str | URL) -> URL:
    """Parse a database URL, mapping ``postgres://`` and ``postgresql://`` to psycopg 3.

    Examples
    --------
    >>> normalise_url("postgresql://u@h/db").drivername
    'postgresql+psycopg'
    >>> normalise_url("sqlite:///./monitor.db").drivername
    'sqlite'
    """
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise UnsupportedDatabaseError(
            f"unsupported database {parsed.get_backend_name()!r}: use postgresql+psycopg://... or "
            "sqlite:///path"
        )
    return parsed


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """Create an engine for the service's database.

    SQLite: write-ahead log (readers never block the writer), foreign keys on, a busy timeout,
    ``synchronous=NORMAL`` (a power cut may lose the last transactions, never half of one), and
    SQLAlchemy in charge of ``BEGIN`` so that transactions and savepoints behave as on PostgreSQL.
    PostgreSQL: ``pool_pre_ping`` so a restarted server does not fail the next request. Both:
    ``hide_parameters``, so that no error message or log line carries a statement's parameters
    (a batch's rows, a detector checkpoint).

    Parameters
    ----------
    url
        SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db`` or ``sqlite:///./monitor.db``.
    **kwargs
        Passed on to :func:`sqlalchemy.create_engine`.

    Examples
    --------
    >>> engine = make_engine("sqlite://")
    >>> with engine.connect() as conn:
    ...     conn.exec_driver_sql("PRAGMA foreign_keys").scalar()
    1
    """
    parsed = normalise_url(url)
    kwargs.setdefault("hide_parameters", True)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, **kwargs)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, json_serializer=json_dumps, **kwargs)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``; objects stay readable after commit (no expiry on commit)."""
    return sessionmaker(engine, expire_on_commit=False)


def _sqlite_engine(url: URL, **kwargs: Any) -> Engine:
    connect_args = dict(kwargs.pop("connect_args", {}))
    # The API serves requests from a thread pool; the pool hands each connection to one thread
    # at a time, which is what sqlite3's check guards against.
    connect_args.setdefault("check_same_thread", False)
    engine = create_engine(url, json_serializer=json_dumps, connect_args=connect_args, **kwargs)
    in_memory = url.database in (None, "", ":memory:")
    event.listen(engine, "connect", lambda dbapi, _rec: _configure_sqlite(dbapi, in_memory))
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _configure_sqlite(dbapi_connection: Any, in_memory: bool) -> None:
    # Stop sqlite3 from issuing its own BEGIN (it would defer it past our PRAGMAs and SELECTs).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    if not in_memory:
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _enable_wal(cursor: Any) -> None:
    """Switch the database file to write-ahead logging (a persistent property of the file).

    Switching needs an exclusive lock, and SQLite answers "database is locked" at once, without
    the busy handler, when waiting could deadlock (e.g. two processes opening a new database at
    the same moment). So: skip it when the file is already in WAL mode, else retry for up to the
    busy timeout.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                return
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _sqlite_begin(connection: Any) -> None:
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return
    mode = connection.get_execution_options().get(SQLITE_BEGIN, "")
    if mode not in ("", "DEFERRED", "IMMEDIATE", "EXCLUSIVE"):
        raise ValueError(f"{SQLITE_BEGIN} must be DEFERRED, IMMEDIATE or EXCLUSIVE, got {mode!r}")
    connection.exec_driver_sql(f"BEGIN {mode}".strip())
