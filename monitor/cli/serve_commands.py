"""``monitor serve`` (the API) and ``monitor dashboards push``."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
from typing import Any

from monitor.cli.common import UserError, alerts_argument, port_number, with_alerts
from monitor.settings import Settings

log = logging.getLogger(__name__)


def add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8000)
    p.add_argument(
        "--workers",
        type=int,
        help="worker processes (default: MONITOR_API_WORKERS or 1; one per core is usual)",
    )
    p.add_argument(
        "--dev",
        action="store_true",
        help="development mode (or MONITOR_DEV=1): no token needed for any route; refused "
        "unless --host is a loopback address",
    )
    alerts_argument(p)
    p.set_defaults(handler=_cmd_serve)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or ``localhost`` (an empty host, like
    ``0.0.0.0`` or ``::``, binds every interface: not loopback).

    >>> [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.5")]
    [True, True, True, False, False]
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from monitor.api import create_app
    from monitor.api.app import guard_limits
    from monitor.api.guard import GuardedHttpToolsProtocol, configure

    settings = with_alerts(args, settings)
    if args.dev:
        settings = settings.model_copy(update={"dev": True})
    if settings.dev and not is_loopback(args.host):
        raise UserError(
            f"development mode answers every request without a token: it binds only to a "
            f"loopback address (--host 127.0.0.1 or ::1), not {args.host!r}; drop --dev "
            "(and MONITOR_DEV) to serve other hosts with tokens"
        )
    if settings.dev:
        log.warning("DEVELOPMENT MODE on http://%s:%d: no token is needed for any route",
                    args.host, args.port)
    workers = settings.api_workers if args.workers is None else args.workers
    if workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "access_log": settings.api_access_log,
        # Slow or idle clients cannot starve the others (monitor/api/guard.py): header and body
        # timeouts, a header size limit and an evicting connection cap, plus uvicorn's keep-alive
        # timeout. uvicorn's limit_concurrency is not used: it answers 503 to every new request
        # once that many connections are open, which is what a slow-connection flood wants.
        "http": GuardedHttpToolsProtocol,
        "timeout_keep_alive": settings.api_keep_alive_timeout,
        "h11_max_incomplete_event_size": settings.api_max_header_bytes,
        "backlog": 2048,
    }
    if workers == 1:
        configure(guard_limits(settings))
        uvicorn.run(create_app(settings), **options)
        return 0
    _prepare_workers(settings)
    # Each worker process imports the app factory and reads its settings from the environment.
    uvicorn.run("monitor.api.app:app_from_environment", factory=True, workers=workers, **options)
    return 0


def _prepare_workers(settings: Settings) -> None:
    """Check the token list, migrate once (not once per worker) and hand the settings to the
    worker processes."""
    from monitor.api.auth import TokenStore

    TokenStore.from_setting(settings.api_tokens)  # a bad list is one line here, not N tracebacks
    if settings.auto_migrate:
        from monitor.db.migrate import upgrade

        upgrade(settings.database_url)
    os.environ["MONITOR_DATABASE_URL"] = settings.database_url  # it may come from --db
    os.environ["MONITOR_AUTO_MIGRATE"] = "false"
    os.environ["MONITOR_ALERTS_FILE"] = settings.alerts_file  # it may come from --alerts
    os.environ["MONITOR_DEV"] = "true" if settings.dev else "false"  # it may come from --dev
    # One session key for all the workers: a cookie set by one is valid on the others.
    os.environ["MONITOR_SESSION_SECRET"] = settings.session_secret or secrets.token_hex(32)


def add_dashboards(sub: Any) -> None:
    p = sub.add_parser("dashboards", help="Grafana dashboards")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    push = s.add_parser("push", help="create or update the dashboards and datasource in Grafana")
    push.add_argument("--grafana-url", required=True)
    push.add_argument("--token", help="Grafana service-account token (or GRAFANA_TOKEN)")
    push.add_argument("--user", help="basic-auth user (with --password)")
    push.add_argument("--password", help="basic-auth password")
    push.add_argument("--prometheus-url", help="Prometheus URL for the panels fed by /metrics")
    push.add_argument(
        "--datasource-db",
        metavar="URL",
        help="database URL Grafana's datasource connects with, as Grafana reaches it: the "
        "read-only reader role (or MONITOR_GRAFANA_DATABASE_URL); without it the datasource is "
        "left as it is (--db is never handed to Grafana)",
    )
    push.set_defaults(handler=_cmd_dashboards_push)


def _cmd_dashboards_push(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.ops.dashboards import POSTGRES_UID, DashboardPushError, push_dashboards

    datasource = args.datasource_db or os.environ.get("MONITOR_GRAFANA_DATABASE_URL") or None
    try:
        pushed = push_dashboards(
            args.grafana_url,
            token=args.token or os.environ.get("GRAFANA_TOKEN") or None,
            user=args.user,
            password=args.password,
            database_url=datasource,
            prometheus_url=args.prometheus_url,
        )
    except DashboardPushError as exc:
        raise UserError(str(exc)) from None
    for uid in pushed:
        print(f"dashboard {uid} pushed to {args.grafana_url}")
    if datasource is None:
        print(
            f"datasource {POSTGRES_UID} left as it is: pass --datasource-db with the read-only "
            "reader's URL to create or update it (docs/dashboards.md)"
        )
    return 0
