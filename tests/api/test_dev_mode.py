"""Development mode (``monitor serve --dev`` / ``MONITOR_DEV``): no token, a header on every
response, a warning at start, and refused on any address but loopback."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from bench.api_rows import make_settings
from monitor.api import create_app
from monitor.cli.main import main
from monitor.cli.serve_commands import is_loopback


def test_dev_mode_needs_no_token_and_says_so(database_url: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="monitor.api.app"):
        app = create_app(make_settings(database_url, dev=True, api_tokens=""))
    assert any("DEVELOPMENT MODE" in r.getMessage() for r in caplog.records)
    with TestClient(app) as client:
        responses = [client.get("/alarms"), client.get("/health"), client.get("/nope"),
                     client.post("/alarms/a-1/ack", json={}), client.get("/docs")]
    assert [r.status_code for r in responses] == [200, 200, 404, 404, 200]
    assert all(r.headers.get("x-monitor-dev-mode") == "1" for r in responses)


def test_normal_mode_has_no_dev_header(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200 and "x-monitor-dev-mode" not in response.headers
    assert client.get("/alarms").status_code == 401


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "monitor.example"])
def test_dev_mode_is_refused_off_loopback(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", "sqlite://", "serve", "--dev", "--host", host]) == 2
    err = capsys.readouterr().err
    assert "loopback" in err and repr(host) in err


def test_dev_setting_is_refused_off_loopback(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MONITOR_DEV", "1")
    assert main(["--db", "sqlite://", "serve", "--host", "0.0.0.0"]) == 2
    assert "development mode" in capsys.readouterr().err


def test_loopback_addresses() -> None:
    assert [is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost")] \
        == [True] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "", "::", "192.168.0.1", "example.org")] \
        == [False] * 5
