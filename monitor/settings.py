"""Service settings, read only by entry points (CLI, app factory, worker) and passed down.

Every field can be set through an environment variable with the ``MONITOR_`` prefix, e.g.
``MONITOR_DATABASE_URL=postgresql+psycopg://user@host/db``. Library code never reads the
environment.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings of the monitoring service (environment prefix ``MONITOR_``).

    Examples
    --------
    >>> Settings(database_url="sqlite:///./x.db").database_url
    'sqlite:///./x.db'
    """

    model_config = SettingsConfigDict(env_prefix="MONITOR_", extra="ignore")

    #: SQLAlchemy URL; SQLite is the embedded default, PostgreSQL is ``postgresql+psycopg://``.
    database_url: str = "sqlite:///./monitor.db"
    #: ``"read:TOKEN_A,write:TOKEN_B"``; write implies read. Empty: no token is valid.
    api_tokens: str = ""
    #: Comma-separated webhook URLs that receive every alarm (a catch-all alert route).
    webhook_urls: str = ""
    #: HMAC key used to sign alert deliveries (``X-Monitor-Signature``).
    webhook_secret: str = ""
    #: Alert routing file, YAML or JSON: receivers (webhook, Slack, Alertmanager) and the
    #: streams, kinds and severities routed to each (docs/operations.md, "Alert routing").
    alerts_file: str = ""
    #: HMAC key of the API's pagination cursors (an edited or forged cursor is a 422). Empty: a
    #: built-in key, which detects edits but not a forger who read the source; set it (the same
    #: on every replica) to deny forgeries.
    cursor_secret: str = ""
    #: HMAC key of the browser session cookies set by ``/login`` (docs/api.md "In a browser").
    #: Empty: ``monitor serve`` generates a random key at start and hands it to its
    #: ``--workers`` processes, so sessions end when the server restarts; set it (the same on
    #: every replica) to keep them across restarts and replicas.
    session_secret: str = ""
    #: Hours a browser session lasts after its login.
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    #: Development mode (``monitor serve --dev``): no token is needed for any route. Loopback
    #: addresses only; every response carries ``X-Monitor-Dev-Mode: 1``.
    dev: bool = False
    #: Largest accepted HTTP request body, bytes.
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    #: Largest accepted event (one Kafka message, JSONL line or HTTP item), bytes.
    max_event_bytes: int = Field(default=256 * 1024, ge=1)
    #: Records per processing batch (one database transaction each). Each transaction rewrites
    #: the touched streams' checkpoints, so larger batches amortise that (docs/streaming.md).
    batch_size: int = Field(default=2000, ge=1)
    #: Batches per checkpoint of ``monitor run``: the detector states and source offsets are
    #: stored (and offsets committed) every this many batches, the results of every batch at
    #: once. 1 stores everything each batch; larger values replay up to that many batches after
    #: a crash and deliver their alarms again, each with its id (docs/streaming.md, "Delivery
    #: semantics"). 5 was chosen by measurement: most of the saving, a bounded replay.
    checkpoint_every: int = Field(default=5, ge=1)
    #: Seconds between the worker's background retention passes (``monitor db prune`` between
    #: batches, each pass at most ``retention_max_seconds``); 0 turns them off.
    retention_interval: float = Field(default=600.0, ge=0)
    retention_max_seconds: float = Field(default=2.0, gt=0)
    #: Apply pending migrations when a command opens the database (off for multi-worker setups).
    auto_migrate: bool = True
    #: Logging level of the service (DEBUG, INFO, WARNING, ERROR or CRITICAL).
    log_level: str = "INFO"
    #: Processes of ``monitor serve`` (uvicorn workers sharing the port); one per core is the
    #: usual choice. Each keeps its own connection pool (up to 40 connections).
    api_workers: int = Field(default=1, ge=1)
    #: Log one line per HTTP request (uvicorn's access log).
    api_access_log: bool = True
    #: ``POST /events`` batches waiting or processing per API process; more answer 429.
    api_ingest_queue: int = Field(default=16, ge=1)
    #: Seconds ``POST /events`` remembers processed (stream, kind, id) and Idempotency-Key
    #: answers: a retry within it counts nothing twice. At least the label-join window
    #: (``labels.max_delay_seconds``, 7 days by default).
    api_ingest_dedup_seconds: float = Field(default=7 * 24 * 3600.0, gt=0)
    #: ``monitor serve``: seconds a connection may take to send its request headers (from its
    #: opening, or from the first byte of its next request), and a request its body; slower
    #: ones are closed (docs/operations.md "The API under abuse").
    api_header_timeout: float = Field(default=10.0, gt=0)
    api_body_timeout: float = Field(default=60.0, gt=0)
    #: Seconds an idle keep-alive connection stays open between requests.
    api_keep_alive_timeout: float = Field(default=5.0, gt=0)
    #: Largest request head (request line and headers), bytes.
    api_max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    #: Open connections per API process (lowered to stay below its file-descriptor limit); past
    #: it the connection waiting longest for its headers or body is closed to make room.
    api_max_connections: int = Field(default=10_000, ge=16)

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return value
