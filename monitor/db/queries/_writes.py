"""How a write executor starts its transaction."""

from __future__ import annotations

from sqlalchemy.orm import Session

from monitor.db.engine import SQLITE_BEGIN

__all__ = ["begin_write"]


def begin_write(session: Session) -> None:
    """Start a write transaction; on SQLite take the write lock up front (waiting for it under
    the busy timeout) instead of failing when a read transaction tries to upgrade."""
    if not session.in_transaction():
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
