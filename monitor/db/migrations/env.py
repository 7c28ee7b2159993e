"""Alembic environment: migrations for monitor's database (PostgreSQL or SQLite).

The URL comes from, in order: a connection in ``config.attributes["connection"]`` (used by
:mod:`monitor.db.migrate` and the tests), ``alembic -x url=...``, ``sqlalchemy.url`` in the
config, then ``monitor.settings.Settings().database_url`` (``MONITOR_DATABASE_URL``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy.engine import Connection

from monitor.db.engine import SQLITE_BEGIN, make_engine
from monitor.db.grafana_reader import drop_views, make_views
from monitor.db.models import Base
from monitor.db.types import UTCDateTime

config = context.config
target_metadata = Base.metadata


def database_url() -> str:
    """The URL to migrate when no connection was handed over."""
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if url:
        return url
    from monitor.settings import Settings  # an entry point may read the settings

    return Settings().database_url


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Render our column types as plain SQLAlchemy types so migrations never import models."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.TIMESTAMP(timezone=True)"
    return False


def configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        render_as_batch=(connection is not None and connection.dialect.name == "sqlite"),
        compare_type=True,
        render_item=render_item,
        literal_binds=connection is None,
    )


@contextmanager
def sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """Switch SQLite foreign keys off while migrating.

    Batch migrations rebuild SQLite tables; with foreign keys on, dropping the old table would
    cascade deletes into the tables that refer to it. The pragma only works outside a transaction.
    """
    switch = connection.dialect.name == "sqlite" and not connection.in_transaction()
    raw = connection.connection.driver_connection if switch else None
    if raw is not None:
        raw.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        if raw is not None:
            raw.execute("PRAGMA foreign_keys=ON")


#: Key of the PostgreSQL advisory lock that serialises concurrent upgrades (several workers
#: running ``monitor db upgrade`` as they start): the second one waits, then finds nothing to do.
#: On SQLite the migration transaction begins IMMEDIATE, which takes the write lock the same way.
MIGRATION_LOCK_KEY = 0x6D6F6E69746F72  # "monitor"


def run(connection: Connection) -> None:
    with sqlite_foreign_keys_off(connection):
        configure(connection)
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
            # The dashboards' read-only views follow the tables: made again after every change.
            drop_views(connection)
            context.run_migrations()
            make_views(connection)


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    engine = make_engine(database_url())
    try:
        with engine.connect().execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}) as connection:
            run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    configure(url=database_url())
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
