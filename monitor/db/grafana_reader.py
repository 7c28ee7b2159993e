"""The read-only view of the results that dashboards get on PostgreSQL: no raw event payloads.

Grafana runs any SQL a dashboard editor types, so its datasource connects as a role that can read
only the schema :data:`READER_SCHEMA`. That schema holds one view per table of ``public``, with the
columns that carry users' raw data left out (:data:`HIDDEN_COLUMNS`) and the tables that are raw
data or internal state left out altogether (:data:`HIDDEN_TABLES`). Dashboards name tables
without a schema; the reader role's ``search_path`` is :data:`READER_SCHEMA`, so the same SQL
reads the views there and the tables on SQLite.

The views are dropped before and made again after every ``monitor db upgrade`` / ``downgrade``
(in the migration's transaction), so they follow the tables' columns and never block a migration.
The role itself, its ``USAGE`` on the schema and its default ``SELECT`` privilege on the views
are set up once by the deployment (``dashboards/provisioning/postgres/10-grafana-reader.sh`` in
the compose stack; the SQL is in docs/dashboards.md).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

__all__ = ["HIDDEN_COLUMNS", "HIDDEN_TABLES", "READER_SCHEMA", "drop_views", "make_views"]

READER_SCHEMA = "monitor_reader"

#: Tables with no view: calibration data (users' features, predictions and labels), detector
#: state, stored HTTP responses, and Alembic's bookkeeping.
HIDDEN_TABLES = frozenset(
    {"alembic_version", "calibration_events", "ingest_requests"}
)

#: Columns left out of a table's view (by name, in any table): raw records and payloads,
#: serialised detector state, a stream's configuration (it may hold inline calibration rows) and
#: alert receivers' URLs (a Slack incoming-webhook URL is a secret).
HIDDEN_COLUMNS = frozenset(
    {"payload", "body", "state", "arrays", "response", "config", "features", "prediction",
     "label", "logits", "embedding", "url"}
)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def drop_views(connection: Connection) -> None:
    """Drop every view of :data:`READER_SCHEMA` (PostgreSQL; nothing elsewhere)."""
    if connection.dialect.name != "postgresql":
        return
    views = connection.execute(
        text("SELECT viewname FROM pg_views WHERE schemaname = :schema"),
        {"schema": READER_SCHEMA},
    ).scalars()
    for view in list(views):
        connection.exec_driver_sql(f"DROP VIEW IF EXISTS {_quote(READER_SCHEMA)}.{_quote(view)}")


def make_views(connection: Connection) -> list[str]:
    """Create :data:`READER_SCHEMA` if needed and one view per visible table of ``public``.

    Returns the views' names (empty on SQLite, which has no schemas or roles)."""
    if connection.dialect.name != "postgresql":
        return []
    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {_quote(READER_SCHEMA)}")
    rows = connection.execute(
        text(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c "
            "JOIN information_schema.tables t "
            "  ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
            "WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' "
            "ORDER BY c.table_name, c.ordinal_position"
        )
    ).all()
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        if table not in HIDDEN_TABLES and column not in HIDDEN_COLUMNS:
            columns.setdefault(table, []).append(column)
    for table, names in columns.items():
        listed = ", ".join(_quote(n) for n in names)
        connection.exec_driver_sql(
            f"CREATE VIEW {_quote(READER_SCHEMA)}.{_quote(table)} AS "
            f"SELECT {listed} FROM public.{_quote(table)}"
        )
    return sorted(columns)
