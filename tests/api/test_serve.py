"""``monitor serve``: the worker-count setting, and a real two-process server over PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from bench.api_rows import READ, READ_TOKEN
from monitor.api.app import app_from_environment
from monitor.cli.main import main
from monitor.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_workers_default_to_one_and_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().api_workers == 1
    monkeypatch.setenv("MONITOR_API_WORKERS", "2")
    assert Settings().api_workers == 2
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(api_workers=0)


def test_serve_refuses_zero_workers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", "sqlite://", "serve", "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


def test_worker_app_takes_its_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    monkeypatch.setenv("MONITOR_DATABASE_URL", database_url)
    monkeypatch.setenv("MONITOR_API_TOKENS", f"read:{READ_TOKEN}")
    monkeypatch.setenv("MONITOR_AUTO_MIGRATE", "false")
    settings = app_from_environment().state.context.settings
    assert (settings.database_url, settings.auto_migrate) == (database_url, False)


@pytest.fixture
def two_workers(database_url: str) -> Iterator[tuple[str, int]]:
    """``monitor serve --workers 2`` in a child process; its base URL and process id."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = "import sys; from monitor.cli.main import main; sys.exit(main(sys.argv[1:]))"
    env = os.environ | {"MONITOR_API_TOKENS": f"read:{READ_TOKEN}", "PYTHONPATH": str(ROOT)}
    args = ["--db", database_url, "serve", "--port", str(port), "--workers", "2"]
    process = subprocess.Popen([sys.executable, "-c", code, *args], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield base, process.pid
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_two_workers_serve_the_api(two_workers: tuple[str, int]) -> None:
    base, pid = two_workers
    workers = [
        child
        for task in Path(f"/proc/{pid}/task").glob("*/children")
        for child in task.read_text().split()
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]
    assert len(workers) == 2
    # The --db URL reached the workers, and the token check holds in each of them.
    with httpx.Client(base_url=base) as client:
        for _ in range(8):
            assert client.get("/alarms", headers=READ).status_code == 200
            assert client.get("/alarms").status_code == 401
