"""Events without ``ts`` through HTTP ingest: counted in the stream's checkpoint, shown with a
warning by ``GET /streams/{name}``, exported as ``monitor_events_without_ts_total{stream}``, and
logged once per stream per process; a stream whose events all had a ts shows none of it."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from bench.api_rows import READ, WRITE, calibration_rows, stream_config
from monitor.db.store import load_state
from tests.support.api import events, post


def _without_ts(n: int, start: int, stream: str) -> list[dict[str, object]]:
    batch = events(n, seed=start, start=start, stream=stream)
    for event in batch:
        del event["ts"]
    return batch


def _metric(client: TestClient, stream: str) -> float:
    text = client.get("/metrics", headers=READ).text
    [value] = [s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "monitor_events_without_ts_total" and s.labels["stream"] == stream]
    return value


def test_events_without_ts_are_counted_shown_and_warned_once(
    client: TestClient, session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("untimed", "timed"):  # the default budget (7d): its warm-up on 2 · 50 000
        body = stream_config(name, calibration=calibration_rows(200))
        assert client.post("/streams", json=body, headers=WRITE).status_code == 201
    with caplog.at_level(logging.WARNING, logger="monitor.engine.pipeline"):
        post(client, _without_ts(30, 0, "untimed"))
        post(client, events(20, seed=1, start=30, stream="untimed"))  # with ts: not counted
        post(client, _without_ts(12, 50, "untimed") + events(40, seed=2, stream="timed"))
    warned = [r.getMessage() for r in caplog.records if "without ts" in r.getMessage()]
    assert len(warned) == 1 and "'untimed'" in warned[0]

    got = client.get("/streams/untimed", headers=READ).json()
    assert got["events_without_ts"] == 42
    assert got["warnings"] == [
        "42 events had no ts: they were timed by the broker or at ingest, and the alarm budget "
        "ran them on its event-count threshold 100000 instead of following the stream's event "
        "rate; give every event its ts (the time the model made the prediction)"
    ]
    timed = client.get("/streams/timed", headers=READ).json()
    assert (timed["events_without_ts"], timed["warnings"]) == (0, [])
    listed = client.get("/streams", headers=READ).json()["data"]
    assert {s["events_without_ts"] for s in listed} == {None}  # read per stream only
    assert (_metric(client, "untimed"), _metric(client, "timed")) == (42.0, 0.0)

    session.expire_all()
    checkpoint = load_state(session, "timed")
    assert checkpoint is not None  # a stream with every ts keeps the state of before: no such key
    assert "events_without_ts" not in checkpoint.state
