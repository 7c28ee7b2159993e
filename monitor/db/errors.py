"""Exceptions raised by the persistence layer.

Hierarchy::

    PersistenceError
    ├── OffsetRegressionError      a source offset would move backwards (stale or zombie writer)
    │   └── FencedError            a writer whose fencing token was superseded (a zombie)
    ├── StreamBoundError           writing a stream bound to another writer (another group)
    ├── InvalidRecordError         a record that cannot be stored as given (also a ValueError)
    ├── InvalidCursorError         a pagination cursor not produced by this API (ValueError)
    ├── UnsupportedDatabaseError   a database URL whose dialect is neither PostgreSQL nor SQLite
    ├── StreamExistsError          creating a stream whose name is taken
    │   └── StreamChangedError     ... with another configuration (update it instead)
    ├── DeliveryNotDeadError       retrying an alert delivery that is not dead
    ├── FleetExistsError           creating a fleet whose name is taken (also a ValueError)
    └── NotFoundError              (also a LookupError)
        ├── StreamNotFoundError
        ├── AlarmNotFoundError
        ├── DeliveryNotFoundError
        └── FleetNotFoundError

State (de)serialisation errors live beside the format in :mod:`monitor.state`.
"""

from __future__ import annotations


class PersistenceError(Exception):
    """Base class of the persistence layer's errors."""


class OffsetRegressionError(PersistenceError):
    """A batch tried to store an offset smaller than the one already stored.

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


class FencedError(OffsetRegressionError):
    """A writer's fencing token (the epoch it got when it was assigned the partition) is no longer
    the stored one: another worker was assigned the partition since. Nothing is written; the
    worker handles it as it handles an offset regression (drops the batch and resynchronises)."""

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
