"""The project's exceptions: one root, :class:`MonitorError`, and the whole tree below.

Every exception that :mod:`monitor` and :mod:`connectors` define derives from
:class:`MonitorError`, so ``except MonitorError`` catches any error the project raises on purpose
(and none that Python or a library raises). Each class lives beside the code that raises it; this
docstring is the one map of them. A class that was a built-in error before the root existed keeps
that base too (shown in parentheses), so ``except ValueError`` still catches it. The right column
is the defining module (under ``monitor.`` unless it starts with ``connectors``); the line below
says when the class is raised. ``tests/core/test_errors.py`` checks this tree against the code:
every class, its module, its built-in base and its parent.

Hierarchy::

    MonitorError                                    errors
    │   the root: ``except MonitorError`` catches every error the project raises on purpose
    ├── MissingExtraError (ModuleNotFoundError)     errors
    │       a command or class needs an optional dependency that is not installed; the message
    │       names the extra to install (``pip install 'conformal-monitor[server]'``)
    ├── StateError (ValueError)                     core.martingales.state
    │       a detector state dict of another class, or of an unknown layout version
    ├── NotFittedError (RuntimeError)               core.ood.base
    │       ``score`` called on an OOD scorer that needs ``fit`` first
    ├── ConfigError (ValueError)                    streams.config
    │       a stream configuration that cannot be used; the message names the field
    ├── CalibrationError (ValueError)               streams.calibration
    │       calibration data that cannot be used; the message names the line
    ├── FrontDoorError (ValueError)                 frontdoor_tables
    │       data the front door cannot turn into a stream's files; the message says what to give
    ├── AmbiguousAlarmIdError (LookupError)         streams.alarm_ids
    │       an alarm id prefix that names more than one alarm; the message lists the candidates
    ├── SchemaError (ValueError)                    streams.schema
    │       calibration values that do not fit a feature schema; the message names row and feature
    ├── InvalidEvent (ValueError)                   streams.event_reference
    │       an event that cannot be processed; the message is its dead-letter reason
    ├── FeatureOrderError (ValueError)              streams.monitor_versions
    │       features that cannot be read in the order the stream's state or calibration needs: the
    │       stream is stopped
    ├── StateEncodingError (TypeError)              streams.state
    │       a value in a detector state that the safe format cannot represent
    ├── StateFormatError (ValueError)               streams.state
    │       stored state text or blob that is corrupt or of an unknown format version
    ├── RunError                                    streams.setup
    │       a run that cannot start (bad configuration, calibration or source)
    ├── BatchStepError                              engine.pipeline
    │       a stream's batch step failed on something other than the data (a bug): the worker
    │       reloads the streams and processes the records one at a time
    ├── WorkerError                                 engine.retry
    │   │   base class of the errors the worker raises on purpose
    │   └── DatabaseUnavailableError                engine.retry
    │           the database could not be written (or read) before the retry deadline; nothing of
    │           the batch was persisted or committed
    ├── PersistenceError                            db.errors
    │   │   base class of the persistence layer's errors
    │   ├── StaleWriterError                        db.errors
    │   │   │   a batch's offset is below the stored one: another worker has processed further; the
    │   │   │   batch is rolled back and the worker resynchronises
    │   │   └── FencedError                         db.errors
    │   │           the writer's fencing epoch was superseded (a zombie after a rebalance); nothing
    │   │           is written
    │   ├── StreamBoundError                        db.errors
    │   │       writing a stream bound to another writer (another group); nothing is written for it
    │   ├── InvalidRecordError (ValueError)         db.errors
    │   │       a record that cannot be stored as given; the message names the record and the field
    │   ├── InvalidCursorError (ValueError)         db.errors
    │   │       a pagination cursor that is corrupt or belongs to another query order
    │   ├── UnsupportedDatabaseError (ValueError)   db.errors
    │   │       a database URL whose dialect is neither PostgreSQL nor SQLite
    │   ├── StreamExistsError                       db.errors
    │   │   │   registering a stream whose name is taken
    │   │   └── StreamChangedError                  db.errors
    │   │           ... with another configuration or calibration (update it instead)
    │   ├── DeliveryNotDeadError                    db.errors
    │   │       retrying an alert delivery that is not dead
    │   ├── FleetExistsError (ValueError)           db.errors
    │   │       creating a fleet whose name is taken
    │   ├── CheckpointMovedError                    db.replay_store
    │   │       a stream's checkpoint changed between a dead-letter replay's load and its write (a
    │   │       worker runs the stream): the replay batch is not stored
    │   └── NotFoundError (LookupError)             db.errors
    │       │   the requested row does not exist
    │       ├── StreamNotFoundError                 db.errors
    │       │       no stream with this name is registered
    │       ├── AlarmNotFoundError                  db.errors
    │       │       no alarm with this id exists
    │       ├── DeliveryNotFoundError               db.errors
    │       │       no alert delivery (``alert_outbox`` row) with this id
    │       └── FleetNotFoundError                  db.errors
    │               no fleet of that name is stored
    ├── AlertRoutingError (ValueError)              alerts.routing
    │       a routing configuration that cannot be used; the message says where and why
    ├── DashboardPushError                          ops.dashboards
    │       Grafana could not be provisioned; the message says why and what to change
    ├── BenchmarksUnavailable (RuntimeError)        ops.benchmarks
    │       the ``bench/`` folder is not there (an installed package without its checkout)
    ├── TokenConfigError (ValueError)               api.auth
    │       ``MONITOR_API_TOKENS`` cannot be parsed; the message names the entry, never the token
    ├── BodyTooLarge                                api.limits
    │       a chunked request body passes the size limit (413), inside the middleware
    ├── IdempotencyKeyReusedError (ValueError)      api.ingest
    │       an ``Idempotency-Key`` sent again with another body (409)
    ├── ClientGoneError                             api.ingest
    │       the client left before its batch was processed; nothing was committed
    ├── IngestQueueFullError                        api.ingest
    │       more ingest requests wait than the queue holds (429 with ``Retry-After``)
    ├── UserError                                   cli.common
    │       a problem the user can fix (bad file, bad configuration); printed without a traceback
    ├── SourceError                                 connectors.errors
    │   │   base class of every error a connector raises on purpose
    │   ├── SourceConfigError (ValueError)          connectors.errors
    │   │       a source URL or option that cannot be used; the message names the valid forms
    │   ├── SourceUnavailableError                  connectors.errors
    │   │       the file is missing, or no Kafka broker answered before the start-up deadline
    │   │       (retried with backoff until then)
    │   ├── UnsupportedCompressionError             connectors.errors
    │   │       a producer compressed with a codec whose Python library is not installed (lz4,
    │   │       zstandard, python-snappy)
    │   ├── PartitionNotAssignedError               connectors.errors
    │   │       a seek or commit of a partition this consumer does not own
    │   ├── OffsetRegressionError                   connectors.errors
    │   │       a commit lower than an offset already committed (a bug in the caller: committed
    │   │       offsets only ever increase)
    │   └── OffsetCommitError                       connectors.errors
    │           the broker refused a commit, usually because the group rebalanced and the partition
    │           now belongs to another member
    └── MockRetentionExceeded (RuntimeError)        connectors.mock_kafka
            the mock broker deleted records before anyone read them (5 MiB per partition)

This module imports nothing of the project, so every layer may import it (the import contract in
``pyproject.toml`` lists it as the lowest layer).
"""

from __future__ import annotations

__all__ = ["EXTRA_OF_MODULE", "MissingExtraError", "MonitorError", "missing_extra"]

#: The distribution's name on the package index (the import name is ``monitor``).
DISTRIBUTION = "conformal-monitor"

#: Top-level module of each optional dependency → the extra of pyproject.toml that installs it.
EXTRA_OF_MODULE = {
    "sqlalchemy": "server",
    "alembic": "server",
    "fastapi": "server",
    "starlette": "server",
    "swagger_ui_bundle": "server",
    "uvicorn": "server",
    "prometheus_client": "server",
    "grafana_client": "server",
    "niquests": "server",
    "httpx": "server",
    "rich": "server",
    "matplotlib": "server",
    "psycopg": "postgres",
    "kafka": "kafka",
    "confluent_kafka": "kafka",
    "pandas": "pandas",
}


class MonitorError(Exception):
    """Base class of every exception the project defines (the tree: this module's docstring)."""


class MissingExtraError(MonitorError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def missing_extra(exc: ModuleNotFoundError, what: str) -> MissingExtraError | None:
    """The error to raise when ``what`` failed on ``exc``, a missing optional dependency;
    ``None`` when the missing module is none of the extras' (a bug, or a broken install).

    Examples
    --------
    >>> print(missing_extra(ModuleNotFoundError(name="kafka.errors"), "monitor run"))
    monitor run needs the kafka extra: pip install 'conformal-monitor[kafka]' (no module kafka)
    >>> missing_extra(ModuleNotFoundError(name="monitor.nope"), "monitor run") is None
    True
    """
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return MissingExtraError(
        f"{what} needs the {extra} extra: pip install '{DISTRIBUTION}[{extra}]' "
        f"(no module {module})",
        name=exc.name,
    )
