"""The statements that PostgreSQL and SQLite spell differently: ``INSERT ... ON CONFLICT``.

SQLAlchemy's generic ``insert`` has no ``ON CONFLICT`` clause; each dialect's own ``insert``
has the same ``on_conflict_do_nothing`` and ``on_conflict_do_update``. :func:`insert` picks the
one of the session's database; :func:`insert_missing` is the common use, an insert that skips
rows whose key is stored already (how replays stay idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from monitor.db.errors import PersistenceError
from monitor.db.models import Base

__all__ = ["insert", "insert_missing", "table_of"]


def table_of(model: type[Base]) -> Table:
    """The table of a mapped class."""
    return Base.metadata.tables[model.__tablename__]


def insert(session: Session, model: type[Base]) -> postgresql.Insert | sqlite.Insert:
    """An insert into ``model``'s table in the dialect of ``session``'s database."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table_of(model))
    if dialect == "sqlite":
        return sqlite.insert(table_of(model))
    raise PersistenceError(f"unsupported database dialect {dialect!r}")


def insert_missing(
    session: Session, model: type[Base], rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert the ``rows`` whose key is not stored yet (``ON CONFLICT DO NOTHING``)."""
    if rows:
        session.execute(insert(session, model).on_conflict_do_nothing(), [dict(r) for r in rows])
