"""``monitor dashboards push`` against a real HTTP server that checks Grafana's request shapes.

No Grafana binary is available on the machines that run these tests (and no network): the
server in :mod:`tests.support.fake_grafana` is a real ``http.server`` on loopback that
implements the Grafana HTTP API endpoints grafana-client calls (folders, datasources by uid,
``POST /api/dashboards/db``), answers with Grafana's status codes and validates every body.
The requests go through grafana-client and its HTTP stack unchanged.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from monitor.cli.main import main
from monitor.ops.dashboards import (
    FOLDER_UID,
    POSTGRES_UID,
    PROMETHEUS_UID,
    DashboardPushError,
    postgres_datasource,
    push_dashboards,
)
from tests.support.dashboards import DASHBOARDS_DIR, imported, load_dashboards
from tests.support.fake_grafana import FakeGrafana

DB_URL = "postgresql+psycopg://grafana_reader:read%40only@postgres:5432/monitor"
UIDS = [d["uid"] for d in load_dashboards()]


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    server = FakeGrafana().start()
    yield server
    server.stop()


def test_push_with_token_creates_folder_datasources_and_dashboards(grafana: FakeGrafana) -> None:
    pushed = push_dashboards(
        grafana.url,
        token=grafana.token,
        database_url=DB_URL,
        prometheus_url="http://prometheus:9090",
    )
    assert pushed == UIDS
    assert grafana.problems == []
    assert set(grafana.folders) == {FOLDER_UID}
    pg = grafana.datasources[POSTGRES_UID]
    assert pg["url"] == "postgres:5432" and pg["user"] == "grafana_reader"
    assert pg["jsonData"]["database"] == "monitor" and pg["jsonData"]["sslmode"] == "disable"
    assert pg["secureJsonData"] == {"password": "read@only"}  # URL-decoded, only in secureJsonData
    assert grafana.datasources[PROMETHEUS_UID]["url"] == "http://prometheus:9090"
    for dashboard in load_dashboards():
        saved = grafana.dashboards[dashboard["uid"]]
        assert saved["folderUid"] == FOLDER_UID and saved["version"] == 1
        # The inputs resolved as Grafana's import does, to the datasources just provisioned.
        assert saved["dashboard"] == imported(dashboard) | {"id": None}
        assert "${DS_" not in json.dumps(saved) and "__inputs" not in saved["dashboard"]
    assert all(r.authorization == f"Bearer {grafana.token}" for r in grafana.requests)


def test_every_dashboard_request_overwrites(grafana: FakeGrafana) -> None:
    push_dashboards(grafana.url, token=grafana.token, database_url=DB_URL)
    saves = [r.body for r in grafana.requests if r.path == "/api/dashboards/db"]
    assert len(saves) == len(UIDS) and all(body["overwrite"] is True for body in saves)


def test_second_push_updates_in_place(grafana: FakeGrafana) -> None:
    push_dashboards(grafana.url, token=grafana.token, database_url=DB_URL)
    first = len(grafana.requests)
    assert push_dashboards(grafana.url, token=grafana.token, database_url=DB_URL) == UIDS
    second = grafana.requests[first:]
    assert [(r.method, r.path) for r in second if r.method != "GET"] == [
        ("PUT", f"/api/datasources/uid/{POSTGRES_UID}"),
        *[("POST", "/api/dashboards/db")] * len(UIDS),
    ]
    assert {uid: d["version"] for uid, d in grafana.dashboards.items()} == dict.fromkeys(UIDS, 2)
    assert grafana.datasources[POSTGRES_UID]["version"] == 2
    assert len(grafana.folders) == 1 and grafana.problems == []


def test_basic_auth(grafana: FakeGrafana) -> None:
    assert (
        push_dashboards(
            grafana.url, user=grafana.user, password=grafana.password, database_url=DB_URL
        )
        == UIDS
    )
    assert all(r.authorization and r.authorization.startswith("Basic ") for r in grafana.requests)


def test_without_database_url_requires_an_existing_datasource(grafana: FakeGrafana) -> None:
    with pytest.raises(DashboardPushError, match=f"no datasource with uid '{POSTGRES_UID}'"):
        push_dashboards(grafana.url, token=grafana.token)
    assert grafana.dashboards == {}
    push_dashboards(grafana.url, token=grafana.token, database_url=DB_URL)
    assert push_dashboards(grafana.url, token=grafana.token) == UIDS  # provisioned: left alone
    assert grafana.datasources[POSTGRES_UID]["version"] == 1


def test_wrong_token_is_a_clear_401(grafana: FakeGrafana) -> None:
    with pytest.raises(DashboardPushError, match=r"refused the credentials \(401\)"):
        push_dashboards(grafana.url, token="wrong", database_url=DB_URL)
    with pytest.raises(DashboardPushError, match=r"\(401\)"):
        push_dashboards(grafana.url, user="admin", password="nope", database_url=DB_URL)
    assert grafana.dashboards == {} and grafana.datasources == {}


def test_unreachable_grafana() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(
            DashboardPushError, match=f"cannot reach Grafana at http://127.0.0.1:{port}"
        ):
            push_dashboards(f"http://127.0.0.1:{port}", token="t", database_url=DB_URL, timeout=2)


def test_rejected_request_reports_grafana_message(grafana: FakeGrafana) -> None:
    grafana.datasources["other"] = {"uid": "other", "name": "Monitor PostgreSQL", "version": 1}
    with pytest.raises(DashboardPushError, match="answered 409: data source with the same name"):
        push_dashboards(grafana.url, token=grafana.token, database_url=DB_URL)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"token": "t", "user": "u", "password": "p"}, "either a token or a user"),
        ({"user": "u"}, "both a user and a password"),
        ({"token": "t", "database_url": "sqlite:///./monitor.db"}, "dashboards query PostgreSQL"),
        ({"token": "t", "database_url": "postgresql://u@h"}, "names no database"),
        ({"token": "t", "database_url": "postgresql://u@h/d?sslmode=prefer"}, "sslmode must be"),
        ({"token": "t", "prometheus_url": "prometheus:9090"}, "must start with http"),
    ],
    ids=["token-and-user", "user-without-password", "sqlite", "no-database", "sslmode", "prom-url"],
)
def test_invalid_arguments(grafana: FakeGrafana, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(DashboardPushError, match=message):
        push_dashboards(grafana.url, **kwargs)
    assert grafana.requests == []  # rejected before any request


def test_bad_dashboards_folder(tmp_path: Path, grafana: FakeGrafana) -> None:
    with pytest.raises(DashboardPushError, match="no dashboard JSON files"):
        push_dashboards(grafana.url, token=grafana.token, dashboards_dir=tmp_path)
    (tmp_path / "x.json").write_text(json.dumps({"title": "no uid"}))
    with pytest.raises(DashboardPushError, match="needs a JSON object with a uid"):
        push_dashboards(grafana.url, token=grafana.token, dashboards_dir=tmp_path)


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "DS_LOKI", "type": "datasource", "pluginId": "loki"},
        {"name": "DS_PROMETHEUS", "type": "datasource", "pluginId": "postgres"},
        {"name": "VAR_SITE", "type": "constant", "value": "eu"},
    ],
    ids=["unknown-datasource", "other-plugin", "constant"],
)
def test_unresolvable_input(tmp_path: Path, grafana: FakeGrafana, entry: dict[str, str]) -> None:
    dashboard = {"uid": "x", "title": "X", "__inputs": [entry], "panels": []}
    (tmp_path / "x.json").write_text(json.dumps(dashboard))
    message = f"asks for input '{entry['name']}'.*resolves only DS_MONITOR_POSTGRESQL"
    with pytest.raises(DashboardPushError, match=message):
        push_dashboards(grafana.url, token=grafana.token, dashboards_dir=tmp_path)
    assert grafana.requests == []  # refused before any request


def test_postgres_datasource_ipv6_and_defaults() -> None:
    body = postgres_datasource("postgresql://reader@[::1]/monitor")
    assert body["url"] == "[::1]:5432" and "secureJsonData" not in body


def test_cli_push(grafana: FakeGrafana, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "--db",
            "postgresql://owner:owner-secret@db:5432/monitor",
            "dashboards",
            "push",
            "--grafana-url",
            grafana.url,
            "--token",
            grafana.token,
            "--datasource-db",
            DB_URL,
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert all(f"dashboard {uid} pushed" in out for uid in UIDS)
    source = grafana.datasources[POSTGRES_UID]
    assert source["jsonData"]["database"] == "monitor"
    assert source["user"] == make_url(DB_URL).username  # the reader's, never --db's owner
    assert "owner-secret" not in json.dumps(source)


def test_cli_push_never_hands_grafana_the_db_owner(
    grafana: FakeGrafana, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MONITOR_GRAFANA_DATABASE_URL", raising=False)
    args = ["--db", "postgresql://owner:owner-secret@db:5432/monitor", "dashboards", "push"]
    args += ["--grafana-url", grafana.url, "--token", grafana.token]
    assert main(args) == 2  # no datasource yet, and --db is not the one to create it with
    assert "--datasource-db" in capsys.readouterr().err
    assert POSTGRES_UID not in grafana.datasources
    monkeypatch.setenv("MONITOR_GRAFANA_DATABASE_URL", DB_URL)
    assert main(args) == 0
    assert grafana.datasources[POSTGRES_UID]["user"] == make_url(DB_URL).username
    monkeypatch.delenv("MONITOR_GRAFANA_DATABASE_URL")
    assert main(args) == 0  # the datasource exists now: left as it is, and said so
    assert "left as it is" in capsys.readouterr().out


def test_dashboards_dir_is_the_repository_folder() -> None:
    from monitor.ops.dashboards import default_dashboards_dir

    assert default_dashboards_dir() == DASHBOARDS_DIR
