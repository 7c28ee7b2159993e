"""The worker's and the API's /metrics pass Prometheus's own linter, ``promtool check metrics``."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from bench.api_rows import READ, make_settings
from monitor.api import create_app
from monitor.db.migrate import upgrade
from monitor.engine.pipeline import BatchOutput
from monitor.ops.health import HealthServer, StreamEvents, WorkerHealth
from tests.support.databases import postgres_database
from tests.support.http import http_get

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian: apt-get install prometheus; CI installs it)",
)


def _check(text: str) -> None:
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                          capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


@needs_promtool
def test_worker_metrics_pass_promtool() -> None:
    health = WorkerHealth(uses_database=False)
    health.registry.register(StreamEvents(lambda: {}))
    health.polled(3)
    health.lag_read({("predictions", 0): 12, ("predictions", 1): 0})
    health.batch_done(BatchOutput(events=3))
    server = HealthServer(health, 0, "127.0.0.1").start()
    try:
        status, text = http_get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
    assert status == 200 and "monitor_consumer_lag" in text
    _check(text)


@needs_promtool
def test_api_metrics_pass_promtool(postgres_admin: Engine) -> None:
    with postgres_database(postgres_admin) as url:
        upgrade(url)
        with TestClient(create_app(make_settings(url))) as client:
            client.get("/alarms", headers=READ)
            response = client.get("/metrics", headers=READ)
            assert response.status_code == 200
            assert "monitor_http_requests_total" in response.text
            _check(response.text)
