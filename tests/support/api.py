"""Helpers of the POST /events tests: labeled events, a registered stream, a checked post, the
count a checkpoint holds (rows and tokens are in bench/api_rows.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import WRITE, calibration_rows, stream_config
from monitor.db.models import CheckpointRow

#: Alarm when the conditional test martingale reaches 1/alpha = 100 (Ville), so a clear shift
#: alarms within a few dozen events.
VILLE = {"rule": "ville", "alpha": 0.01}


#: 2026-11-30T12:00:00Z in epoch seconds: the time of ``events(start=0)``.
NOON = 1_796_040_000


def events(
    n: int, seed: int, shift: float = 0.0, start: int = 0, stream: str = "bikes"
) -> list[dict[str, Any]]:
    """Labeled predictions like calibration_rows(); ``shift`` moves the labels (concept shift)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = x.sum(axis=1) + rng.normal(scale=0.5, size=n) + shift
    return [
        {
            "kind": "prediction",
            "stream": stream,
            "id": f"e-{start + i}",
            "ts": f"2026-11-30T12:{(start + i) // 60 % 60:02d}:{(start + i) % 60:02d}Z",
            "features": x[i].round(4).tolist(),
            "prediction": float(x[i].sum().round(4)),
            "label": float(y[i].round(4)),
        }
        for i in range(n)
    ]


def create(client: TestClient, name: str = "bikes") -> None:
    """Register stream ``name`` through the API, alarming by Ville's inequality."""
    body = stream_config(name, calibration=calibration_rows(200), alarm=VILLE)
    assert client.post("/streams", json=body, headers=WRITE).status_code == 201


def post(client: TestClient, batch: list[Any]) -> dict[str, Any]:
    """POST ``batch`` to /events, check it was accepted (202) and return the body."""
    response = client.post("/events", json=batch, headers=WRITE)
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def counted(session: Session) -> int:
    """Events the checkpoint of stream ``bikes`` has counted (0 before the first)."""
    session.expire_all()
    row = session.get(CheckpointRow, "bikes")
    return 0 if row is None else row.event_index
