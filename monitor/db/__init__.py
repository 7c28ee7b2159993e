"""Persistence: SQLAlchemy models, Alembic migrations, queries and the one-transaction batch
writer. See docs/persistence.md."""

from monitor.db.engine import make_engine, session_factory
from monitor.db.errors import (
    AlarmNotFoundError,
    InvalidCursorError,
    InvalidRecordError,
    NotFoundError,
    PersistenceError,
    StaleWriterError,
    StreamExistsError,
    StreamNotFoundError,
    UnsupportedDatabaseError,
)
from monitor.db.migrate import downgrade, upgrade
from monitor.db.store import load_offsets, load_state, persist_batch

__all__ = [
    "AlarmNotFoundError",
    "InvalidCursorError",
    "InvalidRecordError",
    "NotFoundError",
    "PersistenceError",
    "StaleWriterError",
    "StreamExistsError",
    "StreamNotFoundError",
    "UnsupportedDatabaseError",
    "downgrade",
    "load_offsets",
    "load_state",
    "make_engine",
    "persist_batch",
    "session_factory",
    "upgrade",
]
