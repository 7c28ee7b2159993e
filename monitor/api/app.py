"""The application factory: :func:`create_app` builds the FastAPI app from one ``Settings``."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pydantic_core
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from monitor.alerts import AlertDelivery, routing_from_settings
from monitor.api.auth import AuthMiddleware, DevModeMiddleware, TokenStore
from monitor.api.deps import ApiContext
from monitor.api.docs import install_docs
from monitor.api.errors import install_error_handlers
from monitor.api.http_metrics import HttpMetricsMiddleware
from monitor.api.ingest import Ingestor
from monitor.api.limits import BodySizeLimitMiddleware
from monitor.api.routes import alarms, alerts, events, fleets, health, login, metrics, streams
from monitor.api.sessions import SessionSigner
from monitor.db import queries
from monitor.db.engine import make_engine, normalise_url, session_factory
from monitor.db.sink import DatabaseSink
from monitor.ops.metrics import DatabaseCollector
from monitor.settings import Settings

__all__ = ["app_from_environment", "create_app"]

log = logging.getLogger(__name__)

DESCRIPTION = """\
Alarms, diagnoses, streams, detector traces and OOD decisions of the online ML monitor.

Every route except `/health` needs `Authorization: Bearer <token>` with a token from
`MONITOR_API_TOKENS` (`read` tokens: GET routes; `write` tokens: every route). In a browser, log
in once at [/login](/login): a session cookie then authenticates GET requests (reports, lists)
in this page and in links. Errors are JSON `{"detail": ...}`; lists are
`{"data": [...], "count": N, "next_cursor": ...}`.
"""

TAGS = [
    {"name": "alarms", "description": "Alarms with their diagnosis; filters, keyset pages, ack."},
    {"name": "streams", "description": "Registered streams, their traces and OOD windows."},
    {"name": "events", "description": "Batch ingest in the wire format."},
    {"name": "alerts", "description": "Alert deliveries (the outbox); retry a dead one."},
    {"name": "metrics", "description": "Prometheus exposition."},
    {"name": "health", "description": "Liveness (no token)."},
]


def create_app(settings: Settings) -> FastAPI:
    """The HTTP API over the database named by ``settings``.

    Parameters
    ----------
    settings
        ``database_url``, ``api_tokens``, ``max_body_bytes``, ``max_event_bytes``,
        ``webhook_urls``, ``webhook_secret`` and ``auto_migrate`` (migrate the database to the
        latest schema first) are used.

    Raises
    ------
    ValueError
        ``api_tokens`` is malformed (the message names the entry), or a webhook URL is invalid.

    Examples
    --------
    >>> app = create_app(Settings(database_url="sqlite://", api_tokens="read:abc"))
    >>> sorted(path for path in app.openapi()["paths"] if path.startswith("/alarms"))
    ['/alarms', '/alarms/{alarm_id}', '/alarms/{alarm_id}/ack', '/alarms/{alarm_id}/report']
    """
    tokens = TokenStore.from_setting(settings.api_tokens)
    queries.set_cursor_key(settings.cursor_secret)
    # Requests run in a pool of 40 threads; with fewer connections a burst waits on the pool.
    engine = make_engine(settings.database_url, **_engine_options(settings.database_url))
    read_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    sessions = session_factory(engine)
    read_sessions = session_factory(read_engine)
    # Migrating here (auto_migrate, the embedded default) makes `monitor serve` work on a new
    # database; replicas of a shared deployment turn it off and run `monitor db upgrade` once.
    routing = routing_from_settings(settings)
    sink = DatabaseSink(settings.database_url, migrate=settings.auto_migrate, routing=routing)
    if settings.dev:
        log.warning("DEVELOPMENT MODE (MONITOR_DEV / --dev): every route answers without a "
                    "token; never expose this server")
    elif not len(tokens):
        log.warning("MONITOR_API_TOKENS is empty: every route but /health will answer 401")
    signer = SessionSigner(session_key(settings), tokens, round(settings.session_hours * 3600))
    ingestor = Ingestor(
        sink,
        max_event_bytes=settings.max_event_bytes,
        max_queue=settings.api_ingest_queue,
        dedup_seconds=settings.api_ingest_dedup_seconds,
    )
    context = ApiContext(
        settings, engine, read_engine, sessions, read_sessions, tokens, ingestor, signer
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Ingested alarms are queued in alert_outbox with their batch; this thread sends them
        # (and any other process's: claims are exclusive).
        hooks = None
        if routing is not None:
            hooks = AlertDelivery(sessions, settings.webhook_secret, routing.delivery).start()
        ingestor.on_alarm = None if hooks is None else hooks.wake
        try:
            yield
        finally:
            ingestor.on_alarm = None
            if hooks is not None:
                await anyio.to_thread.run_sync(hooks.close)
            engine.dispose()
            sink.engine.dispose()

    app = FastAPI(
        title="monitor",
        version="1",
        description=DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        docs_url=None,  # served from local files by install_docs
        redoc_url=None,
    )
    install_docs(app)
    app.state.context = context
    app.state.registry = CollectorRegistry(auto_describe=False)
    app.state.registry.register(DatabaseCollector(read_sessions))
    ProcessCollector(registry=app.state.registry)
    PlatformCollector(registry=app.state.registry)
    for module in (health, login, metrics, streams, alarms, fleets, events, alerts):
        app.include_router(module.router)
    install_error_handlers(app)
    # The last middleware added runs first: authentication before the body is read.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.dev:
        app.add_middleware(DevModeMiddleware)
    else:
        app.add_middleware(AuthMiddleware, tokens=tokens, sessions=signer)
    # Outermost: every request is counted and timed, refused ones included.
    app.add_middleware(
        HttpMetricsMiddleware,
        registry=app.state.registry,
        templates=lambda: list(app.openapi().get("paths", {})),
    )
    return app


def app_from_environment() -> FastAPI:
    """The app of one ``monitor serve --workers N`` worker process, with the settings of the
    environment (``MONITOR_*``, which the serve command sets for its workers); also sets the
    process's connection guard limits."""
    from monitor.api.guard import configure

    settings = Settings()
    configure(guard_limits(settings))
    return create_app(settings)


def guard_limits(settings: Settings) -> Any:
    """The connection guard limits (:class:`monitor.api.guard.GuardLimits`) of ``settings``."""
    from monitor.api.guard import GuardLimits

    return GuardLimits(
        header_timeout=settings.api_header_timeout,
        body_timeout=settings.api_body_timeout,
        max_header_bytes=settings.api_max_header_bytes,
        max_connections=settings.api_max_connections,
    )


def session_key(settings: Settings) -> bytes:
    """The HMAC key of the browser sessions: ``session_secret``'s SHA-256, or (empty) a random
    key for this process alone (``monitor serve --workers N`` sets one secret for all N).

    Raises
    ------
    ValueError
        ``session_secret`` is shorter than 16 characters.
    """
    if not settings.session_secret:
        return secrets.token_bytes(32)
    if len(settings.session_secret) < 16:
        raise ValueError(
            "MONITOR_SESSION_SECRET must be at least 16 characters (e.g. `openssl rand -hex 32`)"
        )
    return hashlib.sha256(settings.session_secret.encode()).digest()


def _engine_options(url: str) -> dict[str, Any]:
    if normalise_url(url).get_backend_name() == "sqlite":
        return {}  # SQLite's pools are sized by SQLAlchemy for the file or memory database
    # JSONB values (alarm evidence: one per listed alarm) parsed by pydantic-core: the json
    # module's loads was 13 % of the CPU time of a GET /alarms request (cProfile).
    return {"pool_size": 10, "max_overflow": 30, "json_deserializer": pydantic_core.from_json}
