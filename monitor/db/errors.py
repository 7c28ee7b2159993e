"""Exceptions raised by the persistence layer.

Every one derives from :class:`PersistenceError` (and so from :class:`monitor.errors.MonitorError`);
the tree, with when each is raised, is in :mod:`monitor.errors`.

The database's own errors reach callers as SQLAlchemy's ``DBAPIError`` subclasses;
:func:`database_fault` says what one means for whoever runs the service (its cause, what to do,
whether a retry may cure it), by SQLSTATE on PostgreSQL and by message on SQLite and for failed
connections (docs/operations.md "Database failures"); :func:`sink_fault` says what any error of
the database's sink means to the worker (:class:`monitor.engine.sink.Fault`).

State (de)serialisation errors live beside the format in :mod:`monitor.streams.state`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, OperationalError

from monitor.engine.sink import Fault, FaultKind
from monitor.errors import MonitorError


class PersistenceError(MonitorError):
    """Base class of the persistence layer's errors."""


class StaleWriterError(PersistenceError):
    """A stale writer: a batch tried to store an offset smaller than the one already stored.

    Offsets only ever increase: a smaller one means a stale writer (for example a worker that lost
    its partitions in a rebalance) is about to overwrite newer results. The batch is rolled back.
    """

    def __init__(self, source: str, partition: int, stored: int, attempted: int) -> None:
        super().__init__(
            f"offset for source {source!r} partition {partition} would go back from {stored} to "
            f"{attempted}; another worker has processed further: restore from the database "
            "instead of writing this batch"
        )
        self.source = source
        self.partition = partition
        self.stored = stored
        self.attempted = attempted


class FencedError(StaleWriterError):
    """A writer's fencing token (the epoch it got when it was assigned the partition) is no longer
    the stored one: another worker was assigned the partition since. Nothing is written; the
    worker handles it as any stale writer (drops the batch and resynchronises)."""

    def __init__(self, source: str, partition: int, stored: int, attempted: int,
                 why: str = "") -> None:
        PersistenceError.__init__(
            self,
            f"source {source!r} partition {partition}: this writer's fencing epoch {attempted} "
            f"was superseded by {why or f'epoch {stored}'}; another worker was assigned the "
            "partition: restore from the database instead of writing this batch",
        )
        self.source = source
        self.partition = partition
        self.stored = stored
        self.attempted = attempted


class StreamBoundError(PersistenceError):
    """Writing results of a stream bound to another source of writes; nothing is written."""

    def __init__(self, stream: str, bound: str, writer: str, rebind: str) -> None:
        super().__init__(
            f"stream {stream!r} is bound to {bound}, not to this writer ({writer}): nothing is "
            f"written for it here; to move it, run `monitor streams rebind {stream} {rebind}`"
        )
        self.stream = stream
        self.bound = bound
        self.writer = writer


class InvalidRecordError(PersistenceError, ValueError):
    """A record that cannot be stored as given; the message names the record and the field."""


class InvalidCursorError(PersistenceError, ValueError):
    """A pagination cursor that is corrupt or belongs to another query order."""


class UnsupportedDatabaseError(PersistenceError, ValueError):
    """A database URL whose dialect is not supported (PostgreSQL and SQLite are)."""


class StreamExistsError(PersistenceError):
    """A stream with this name is already registered."""


class StreamChangedError(StreamExistsError):
    """Registering a name that is registered with another configuration or calibration: the
    stored one is kept; a new version is stored only by an explicit update."""

    def __init__(self, name: str, version: int) -> None:
        super().__init__(
            f"stream {name!r} is already registered with another configuration (version "
            f"{version}); nothing was changed. To store this one as version {version + 1}, run "
            f"`monitor streams update CONFIG` or PUT /streams/{name}"
        )
        self.name = name
        self.version = version


class NotFoundError(PersistenceError, LookupError):
    """The requested row does not exist."""


class StreamNotFoundError(NotFoundError):
    """No stream with this name is registered."""


class AlarmNotFoundError(NotFoundError):
    """No alarm with this id exists."""


class DeliveryNotFoundError(NotFoundError):
    """No alert delivery (``alert_outbox`` row) with this id."""


class DeliveryNotDeadError(PersistenceError):
    """Only a dead alert delivery can be retried; a pending one is retried already and a
    delivered one needs nothing."""


class FleetNotFoundError(NotFoundError):
    """No fleet of that name is stored (``monitor fleets create FILE`` or ``POST /fleets``)."""


class FleetExistsError(PersistenceError, ValueError):
    """A fleet with this name is already stored."""


# -- what a database error means ------------------------------------------------------------


@dataclass(frozen=True)
class DatabaseFault:
    """A database error as an operator needs it: the cause (the driver's first line, with its
    SQLSTATE on PostgreSQL; never the statement or its parameters), what to do, whether waiting
    may cure it (a worker retries those), and whether it stopped a connection being made."""

    cause: str
    remedy: str
    transient: bool
    connecting: bool = False

    def __str__(self) -> str:
        return f"{self.cause}: {self.remedy}"


@dataclass(frozen=True)
class _Rule:
    match: str  # a SQLSTATE prefix, or a fragment of a message that carries none
    remedy: str
    transient: bool
    connecting: bool = False


_AGAIN = "then run it again"
_START = "start the server, or fix --db / MONITOR_DATABASE_URL"
_UPGRADE = ("the database schema is not this version's: run `monitor db upgrade` (or leave "
            "MONITOR_AUTO_MIGRATE on)")
_CONSTRAINT = ("the database refused a row that breaks a constraint: if its schema is older than "
               "this version, run `monitor db upgrade`; otherwise report it with the log")
_LOCKED = ("another process holds the database's write lock: end its transaction (a sqlite3 "
           f"shell, another monitor process) or use PostgreSQL for several writers, {_AGAIN}")

#: PostgreSQL, by SQLSTATE (https://www.postgresql.org/docs/current/errcodes-appendix.html);
#: the first rule whose prefix matches applies.
_BY_SQLSTATE = (
    _Rule("42501", "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public and "
                   "USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO the role in --db / "
                   "MONITOR_DATABASE_URL (a migration needs the schema's owner: run `monitor db "
                   f"upgrade` as it), {_AGAIN}", False),
    _Rule("53100", f"free space on the database server's disk (or grow the volume), {_AGAIN}",
          True),
    _Rule("53", "the server ran out of a resource: raise the limit it names (max_connections, "
                f"memory) or lower the load, {_AGAIN}", True),
    _Rule("40", "it kept conflicting with another transaction: make sure one worker group "
                "writes each stream and look for long transactions in pg_stat_activity, then "
                "restart", True),
    _Rule("55P03", "a lock was not granted in time: end the transaction holding it (pg_locks, "
                   f"pg_stat_activity), {_AGAIN}", True),
    _Rule("57014", "a statement was cancelled (statement_timeout or an operator): raise the "
                   f"role's statement_timeout, {_AGAIN}", True),
    _Rule("57P", "the server is shutting down, restarting or starting: wait for it or start it, "
                 "or fix --db / MONITOR_DATABASE_URL", True, True),
    _Rule("08", _START, True, True),
    _Rule("25006", "the server accepts no writes (a standby, or default_transaction_read_only): "
                   "point --db / MONITOR_DATABASE_URL at the primary", True),
    _Rule("42P01", _UPGRADE, False),
    _Rule("42703", _UPGRADE, False),
    _Rule("42883", _UPGRADE, False),
    _Rule("23", _CONSTRAINT, False),
    _Rule("22", "the database refused a value: report it with the log", False),
)

#: Errors without a SQLSTATE, by message: psycopg's failed connections, then SQLite's (its
#: messages are fixed English text, https://www.sqlite.org/rescode.html).
_BY_MESSAGE = (
    _Rule("does not exist", "create it (a database: createdb NAME; a role: CREATE ROLE NAME "
                            "LOGIN), or fix --db / MONITOR_DATABASE_URL", False, True),
    _Rule("authentication failed", "fix the user or password in --db / MONITOR_DATABASE_URL",
          False, True),
    _Rule("no pg_hba.conf entry", "allow this user and host in the server's pg_hba.conf, or "
                                  "fix --db / MONITOR_DATABASE_URL", False, True),
    _Rule("connection failed", _START, True, True),
    _Rule("server closed the connection", _START, True, True),
    _Rule("database or disk is full", "free space on the disk that holds the database file (or "
                                      f"move it: --db sqlite:///PATH), {_AGAIN}", True),
    _Rule("readonly database", "make the database file, its directory and its -wal and -shm "
                               f"files writable by this user, {_AGAIN}", False),
    _Rule("unable to open database file", "check that the file's directory exists and that this "
                                          "user may write in it, or fix --db / "
                                          "MONITOR_DATABASE_URL", False, True),
    _Rule("database is locked", _LOCKED, True),
    _Rule("database table is locked", _LOCKED, True),
    _Rule("disk I/O error", "check the disk and file system that hold the database file (dmesg) "
                            f"and their free space, {_AGAIN}", True),
    _Rule("file is not a database", "restore the file from a backup (docs/operations.md \"Backup "
                                    "and restore\"), or fix --db / MONITOR_DATABASE_URL", False),
    _Rule("malformed", "restore the file from a backup (docs/operations.md \"Backup and "
                       "restore\")", False),
    _Rule("no such table", _UPGRADE, False),
    _Rule("no such column", _UPGRADE, False),
    _Rule("has no column named", _UPGRADE, False),
    _Rule("constraint failed", _CONSTRAINT, False),
)


def database_fault(exc: BaseException) -> DatabaseFault | None:
    """What the database error ``exc`` means (``None`` if it is not one: not a ``DBAPIError``).

    An error no rule knows is transient if it is an ``OperationalError`` or ``InterfaceError``
    (the driver's class for trouble outside the statement), and so is every error that
    invalidated its connection.

    Examples
    --------
    >>> import sqlite3
    >>> error = OperationalError("INSERT ...", {"x": 1}, sqlite3.OperationalError(
    ...     "database or disk is full"))
    >>> print(database_fault(error))  # doctest: +ELLIPSIS
    database or disk is full: free space on the disk that holds the database file ...
    """
    if not isinstance(exc, DBAPIError):
        return None
    lines = str(exc.orig).strip().splitlines()
    first = lines[0].strip() if lines else type(exc.orig).__name__
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate:
        cause = f"{first} (SQLSTATE {sqlstate})"
        rule = next((r for r in _BY_SQLSTATE if sqlstate.startswith(r.match)), None)
    else:
        cause = first
        rule = next((r for r in _BY_MESSAGE if r.match in first), None)
    if rule is None:
        rule = _Rule("", "see the database server's log; if it recurs, report it with the log",
                     isinstance(exc, OperationalError | InterfaceError))
    return DatabaseFault(cause, rule.remedy, rule.transient or exc.connection_invalidated,
                         rule.connecting)


def sink_fault(exc: BaseException) -> Fault | None:
    """What an error of the database's sink means to the worker (``None``: not a database error
    nor a refusal of the persistence layer, a bug).

    A transient database error is retried; a batch refused for its offsets or fencing token is
    dropped; a stream bound elsewhere is set aside; a value or constraint the database refuses
    (or :class:`InvalidRecordError`) is dead-lettered; any other database error stops the worker.

    Examples
    --------
    >>> sink_fault(StreamBoundError("bikes", "kafka:bikes", "HTTP ingest", "--http")).kind
    <FaultKind.BOUND: 'bound'>
    >>> sink_fault(KeyError("bikes")) is None
    True
    """
    if isinstance(exc, StaleWriterError):
        return Fault(FaultKind.SUPERSEDED, str(exc))
    if isinstance(exc, StreamBoundError):
        return Fault(FaultKind.BOUND, str(exc), stream=exc.stream, bound=exc.bound)
    if isinstance(exc, InvalidRecordError):
        return Fault(FaultKind.CONTENT, str(exc))
    fault = database_fault(exc)
    if fault is None:
        return None
    if fault.transient:
        kind = FaultKind.TRANSIENT
    elif isinstance(exc, DataError | IntegrityError):
        kind = FaultKind.CONTENT
    else:
        kind = FaultKind.PERMANENT
    return Fault(kind, str(fault))
