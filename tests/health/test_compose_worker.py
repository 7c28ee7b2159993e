"""docker-compose: the worker serves /healthz and its healthcheck asks it."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_worker_healthcheck_hits_healthz() -> None:
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    port = worker["environment"]["MONITOR_WORKER_METRICS_PORT"]
    check = worker["healthcheck"]
    assert check["test"][0] == "CMD" and f"localhost:{port}/healthz" in " ".join(check["test"])
    assert check["retries"] >= 3
    # The rest of the shared environment is kept.
    assert "MONITOR_DATABASE_URL" in worker["environment"]
