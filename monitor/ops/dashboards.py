"""Push the Grafana dashboards and their datasources through the Grafana HTTP API.

``monitor dashboards push --grafana-url URL`` calls :func:`push_dashboards`, which talks to
Grafana with grafana-client (the maintained fork of grafana-api) and, in this order:

1. creates the ``Monitor`` folder (uid :data:`FOLDER_UID`) if it is missing;
2. creates or updates the PostgreSQL datasource (uid :data:`POSTGRES_UID`) from the database URL:
   host, port, database and user go to the datasource settings, the password to
   ``secureJsonData`` (Grafana stores it encrypted and never returns it); ``sslmode`` is taken
   from the URL's query (``?sslmode=require``), ``disable`` otherwise;
3. creates or updates the Prometheus datasource (uid :data:`PROMETHEUS_UID`) when a Prometheus
   URL is given (the events/s and label-join-lag panels read the API's ``/metrics`` through it);
4. saves every dashboard of the dashboards folder with ``overwrite=True``, so pushing again
   updates them in place (same uids, new versions).

The files are in Grafana's export-for-sharing form, so that they also import through Grafana's
UI (Dashboards → New → Import): ``__inputs`` names the datasources a dashboard needs
(:data:`DATASOURCE_INPUTS`) and every datasource reference is ``${DS_...}``. The push resolves
them as Grafana's import does, each to its datasource here (:func:`resolve_inputs`), before it
saves. A datasource template variable of the same name keeps the files working when Grafana
loads them unresolved from disk (the provisioning of the compose stack).

The URL handed to Grafana is the database as *Grafana* reaches it: when Grafana runs in a
container, ``localhost`` is the container itself, so pass the host name Grafana resolves.

Errors a user can act on (Grafana unreachable, credentials refused, a SQLite URL, a missing
dashboards folder) raise :class:`DashboardPushError` with a message that says what to do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from monitor.errors import MonitorError

__all__ = [
    "DATASOURCE_INPUTS",
    "FOLDER_UID",
    "POSTGRES_TYPE",
    "POSTGRES_UID",
    "PROMETHEUS_UID",
    "DashboardPushError",
    "default_dashboards_dir",
    "load_dashboards",
    "postgres_datasource",
    "prometheus_datasource",
    "push_dashboards",
    "resolve_inputs",
]

#: uid of the PostgreSQL datasource every SQL panel refers to.
POSTGRES_UID = "monitor-postgres"
#: uid of the Prometheus datasource of the panels fed by the API's ``/metrics``.
PROMETHEUS_UID = "monitor-prometheus"
#: Plugin id of Grafana's built-in PostgreSQL datasource (Grafana ≥ 10.3; ``postgres`` before).
POSTGRES_TYPE = "grafana-postgresql-datasource"
#: The ``__inputs`` of the dashboards files → (plugin id, uid) of the datasource each resolves to.
DATASOURCE_INPUTS = {
    "DS_MONITOR_POSTGRESQL": (POSTGRES_TYPE, POSTGRES_UID),
    "DS_PROMETHEUS": ("prometheus", PROMETHEUS_UID),
}
#: Keys of the export-for-sharing form that only an import reads.
_EXPORT_KEYS = ("__inputs", "__elements", "__requires")
#: Folder the dashboards are saved in (the provisioning YAML uses the same uid).
FOLDER_UID = "monitor"
FOLDER_TITLE = "Monitor"
#: ``postgresVersion`` setting: 1500 is "15+", the newest choice Grafana offers; it only
#: selects the functions of the visual query builder.
_POSTGRES_VERSION = 1500
_SSL_MODES = ("disable", "require", "verify-ca", "verify-full")


class DashboardPushError(MonitorError):
    """Grafana could not be provisioned; the message says why and what to change."""


def push_dashboards(
    grafana_url: str,
    token: str | None = None,
    user: str | None = None,
    password: str | None = None,
    database_url: str | None = None,
    *,
    prometheus_url: str | None = None,
    dashboards_dir: str | Path | None = None,
    timeout: float = 10.0,
) -> list[str]:
    """Create or update the datasources and dashboards in the Grafana at ``grafana_url``.

    Parameters
    ----------
    grafana_url
        Base URL of Grafana, e.g. ``http://localhost:3000`` (a sub-path is kept).
    token
        A Grafana service-account token (Editor or Admin role). Exclusive with ``user``.
    user, password
        Basic-auth credentials, used together.
    database_url
        SQLAlchemy URL of the monitor's PostgreSQL database *as Grafana reaches it*; the
        PostgreSQL datasource is created or updated from it. ``None`` leaves the datasource
        alone but checks that it exists (e.g. provisioned from YAML).
    prometheus_url
        URL of a Prometheus that scrapes the API's ``/metrics``; the Prometheus datasource is
        created or updated when given, left alone otherwise.
    dashboards_dir
        Folder of the dashboard JSON files; :func:`default_dashboards_dir` when ``None``.
    timeout
        Seconds to wait for each HTTP request.

    Returns
    -------
    list of str
        The uids of the dashboards pushed, in file-name order.

    Raises
    ------
    DashboardPushError
        Grafana is unreachable, refuses the credentials (401/403) or rejects a request; the
        database URL is not PostgreSQL; the dashboards folder is missing or holds invalid JSON.

    Examples
    --------
    >>> postgres_datasource("postgresql+psycopg://grafana:s3cret@db:5433/monitor")["url"]
    'db:5433'
    """
    files = load_dashboards(dashboards_dir or default_dashboards_dir())
    dashboards = [resolve_inputs(dashboard) for dashboard in files]
    datasources = []
    if database_url is not None:
        datasources.append(postgres_datasource(database_url))
    if prometheus_url is not None:
        datasources.append(prometheus_datasource(prometheus_url))
    api = _connect(grafana_url, token, user, password, timeout)
    with _grafana_errors(grafana_url):
        _ensure_folder(api)
        for body in datasources:
            _upsert_datasource(api, body)
        if database_url is None:
            _require_datasource(api, POSTGRES_UID)
        return [_save_dashboard(api, dashboard) for dashboard in dashboards]


def default_dashboards_dir() -> Path:
    """The ``dashboards/`` folder of the source tree (also copied into the Docker image).

    Looked up next to the package first (a checkout or an editable install), then in the
    working directory (the image runs from ``/app``, which holds ``dashboards/``).
    """
    for candidate in (
        Path(__file__).resolve().parents[2] / "dashboards",
        Path.cwd() / "dashboards",
    ):
        if candidate.is_dir():
            return candidate
    raise DashboardPushError(
        "cannot find the dashboards folder (dashboards/ of the source tree); "
        "run from the repository root or pass dashboards_dir"
    )


def load_dashboards(directory: str | Path) -> list[dict[str, Any]]:
    """Every ``*.json`` dashboard of ``directory`` (not its sub-folders), by file name."""
    folder = Path(directory)
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DashboardPushError(f"no dashboard JSON files in {folder}")
    return [_read_dashboard(path) for path in files]


def _read_dashboard(path: Path) -> dict[str, Any]:
    try:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DashboardPushError(f"cannot read dashboard {path}: {exc}") from exc
    if not isinstance(dashboard, dict) or not dashboard.get("uid") or not dashboard.get("title"):
        raise DashboardPushError(f"dashboard {path} needs a JSON object with a uid and a title")
    return dashboard


def resolve_inputs(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The dashboard with each ``${DS_...}`` of its ``__inputs`` replaced by the uid of its
    datasource (:data:`DATASOURCE_INPUTS`), as Grafana's import would, without the keys only an
    import reads.

    Raises
    ------
    DashboardPushError
        An input that is not one of :data:`DATASOURCE_INPUTS`, or of another plugin.

    Examples
    --------
    >>> panel = {"datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}}
    >>> resolve_inputs({"uid": "d", "__inputs": [
    ...     {"name": "DS_PROMETHEUS", "type": "datasource", "pluginId": "prometheus"}],
    ...     "panels": [panel]})
    {'uid': 'd', 'panels': [{'datasource': {'type': 'prometheus', 'uid': 'monitor-prometheus'}}]}
    """
    values = {}
    for entry in dashboard.get("__inputs", []):
        name = entry.get("name")
        known = DATASOURCE_INPUTS.get(name)
        if entry.get("type") != "datasource" or known is None or entry.get("pluginId") != known[0]:
            raise DashboardPushError(
                f"dashboard {dashboard.get('uid')!r} asks for input {name!r} "
                f"({entry.get('type')} {entry.get('pluginId')}): the push resolves only "
                + ", ".join(f"{n} ({plugin})" for n, (plugin, _) in DATASOURCE_INPUTS.items())
            )
        values["${" + name + "}"] = known[1]
    body = {k: v for k, v in dashboard.items() if k not in _EXPORT_KEYS}
    return _substitute(body, values) if values else body


def _substitute(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, str):
        for template, value in values.items():
            node = node.replace(template, value)
        return node
    if isinstance(node, dict):
        return {key: _substitute(item, values) for key, item in node.items()}
    if isinstance(node, list):
        return [_substitute(item, values) for item in node]
    return node


def postgres_datasource(database_url: str, name: str = "Monitor PostgreSQL") -> dict[str, Any]:
    """Grafana datasource body for the PostgreSQL database at ``database_url``.

    Examples
    --------
    >>> body = postgres_datasource("postgresql://monitor:pw@postgres/monitor?sslmode=require")
    >>> body["url"], body["user"], body["jsonData"]["database"], body["jsonData"]["sslmode"]
    ('postgres:5432', 'monitor', 'monitor', 'require')
    >>> body["secureJsonData"]
    {'password': 'pw'}
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise DashboardPushError(f"invalid database URL: {exc}") from None
    if url.get_backend_name() != "postgresql":
        raise DashboardPushError(
            f"the dashboards query PostgreSQL, but the database URL is {url.get_backend_name()}: "
            "pass the PostgreSQL URL (--db or MONITOR_DATABASE_URL)"
        )
    if not url.database:
        raise DashboardPushError("the database URL names no database (postgresql://user@host/DB)")
    sslmode = str(url.query.get("sslmode", "disable"))
    if sslmode not in _SSL_MODES:
        raise DashboardPushError(
            f"sslmode must be one of {list(_SSL_MODES)} for Grafana, got {sslmode!r}"
        )
    body: dict[str, Any] = {
        "uid": POSTGRES_UID,
        "name": name,
        "type": POSTGRES_TYPE,
        "access": "proxy",
        "url": _host_port(url.host or "localhost", url.port or 5432),
        "user": url.username or "",
        "isDefault": False,
        "jsonData": {
            "database": url.database,
            "sslmode": sslmode,
            "postgresVersion": _POSTGRES_VERSION,
            "timescaledb": False,
        },
    }
    if url.password:
        body["secureJsonData"] = {"password": str(url.password)}
    return body


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def prometheus_datasource(prometheus_url: str, name: str = "Monitor Prometheus") -> dict[str, Any]:
    """Grafana datasource body for the Prometheus at ``prometheus_url``.

    Examples
    --------
    >>> prometheus_datasource("http://prometheus:9090")["type"]
    'prometheus'
    """
    if not prometheus_url.startswith(("http://", "https://")):
        raise DashboardPushError(
            f"the Prometheus URL must start with http(s)://, got {prometheus_url!r}"
        )
    return {
        "uid": PROMETHEUS_UID,
        "name": name,
        "type": "prometheus",
        "access": "proxy",
        "url": prometheus_url,
        "isDefault": False,
        "jsonData": {"httpMethod": "POST", "timeInterval": "15s"},
    }


# -- Grafana HTTP API --------------------------------------------------------------------------


def _connect(
    grafana_url: str, token: str | None, user: str | None, password: str | None, timeout: float
) -> Any:
    from grafana_client import GrafanaApi

    if token and (user or password):
        raise DashboardPushError("give either a token or a user and password, not both")
    if (user is None) != (password is None):
        raise DashboardPushError("basic auth needs both a user and a password")
    if not grafana_url.startswith(("http://", "https://")):
        raise DashboardPushError(f"the Grafana URL must start with http(s)://, got {grafana_url!r}")
    credential: str | tuple[str, str] | None = token or None
    if user is not None and password is not None:
        credential = (user, password)
    return GrafanaApi.from_url(grafana_url, credential=credential, timeout=timeout)


@contextmanager
def _grafana_errors(grafana_url: str) -> Iterator[None]:
    """Turn grafana-client's and the HTTP stack's exceptions into :class:`DashboardPushError`."""
    from grafana_client.client import (
        GrafanaException,
        GrafanaTimeoutError,
        GrafanaUnauthorizedError,
    )
    from niquests.exceptions import RequestException

    try:
        yield
    except GrafanaUnauthorizedError:
        raise DashboardPushError(
            f"Grafana at {grafana_url} refused the credentials (401): pass a valid service-account "
            "token (--token) or --user and --password"
        ) from None
    except (GrafanaTimeoutError, RequestException) as exc:
        raise DashboardPushError(f"cannot reach Grafana at {grafana_url}: {exc}") from None
    except GrafanaException as exc:
        raise DashboardPushError(_answer(grafana_url, exc)) from None


def _answer(grafana_url: str, exc: Any) -> str:
    detail = exc.response.get("message") if isinstance(exc.response, dict) else None
    detail = detail or exc.message
    if exc.status_code == 0:
        return f"cannot reach Grafana at {grafana_url}: {detail}"
    if exc.status_code == 403:
        return (
            f"Grafana at {grafana_url} denied the request (403): the token or user needs the "
            f"Editor role for dashboards and Admin for datasources ({detail})"
        )
    return f"Grafana at {grafana_url} answered {exc.status_code}: {detail}"


def _exists(call: Any, *args: Any) -> bool:
    from grafana_client.client import GrafanaClientError

    try:
        call(*args)
    except GrafanaClientError as exc:
        if exc.status_code == 404:
            return False
        raise
    return True


def _ensure_folder(api: Any) -> None:
    if not _exists(api.folder.get_folder, FOLDER_UID):
        api.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)


def _upsert_datasource(api: Any, body: dict[str, Any]) -> None:
    if _exists(api.datasource.get_datasource_by_uid, body["uid"]):
        api.datasource.update_datasource_by_uid(body["uid"], body)
    else:
        api.datasource.create_datasource(body)


def _require_datasource(api: Any, uid: str) -> None:
    if not _exists(api.datasource.get_datasource_by_uid, uid):
        raise DashboardPushError(
            f"Grafana has no datasource with uid {uid!r}: pass the database URL Grafana should "
            "connect with, a read-only role's (--datasource-db or MONITOR_GRAFANA_DATABASE_URL), "
            "so that the push creates it, or provision it from "
            "dashboards/provisioning/datasources"
        )


def _save_dashboard(api: Any, dashboard: dict[str, Any]) -> str:
    # id=None: Grafana matches the dashboard by uid, so the same file updates the same dashboard
    # on every Grafana instance.
    api.dashboard.update_dashboard(
        {
            "dashboard": {**dashboard, "id": None},
            "folderUid": FOLDER_UID,
            "overwrite": True,
            "message": "monitor dashboards push",
        }
    )
    return str(dashboard["uid"])
