"""POST /events is idempotent and bounded (issue #14): a retried request counts each event once,
a client that timed out and retried does not double-count, an Idempotency-Key retry answers what
the first request did, and a full queue answers 429 with Retry-After."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import WRITE
from monitor.db.models import DeadLetterRow
from tests.support.api import counted, create, events


def test_a_retried_post_counts_each_event_once(client: TestClient, session: Session) -> None:
    create(client)
    batch = events(100, seed=3)
    first = client.post("/events", json=batch, headers=WRITE).json()
    assert first["accepted"] == 100 and first["duplicates"] == []
    again = client.post("/events", json=batch, headers=WRITE).json()
    assert again["accepted"] == 0 and again["duplicates"] == list(range(100))
    assert counted(session) == 100
    # Overlapping batches: only the new events count; labels reuse their prediction's id.
    more = events(50, seed=4, start=80)
    label = [{"kind": "label", "stream": "bikes", "id": "e-150", "label": 1.0}]
    body = client.post("/events", json=more + label, headers=WRITE).json()
    assert body["duplicates"] == list(range(20)) and body["accepted"] == 31
    assert counted(session) == 130


def test_a_client_timeout_does_not_double_count(client: TestClient, session: Session) -> None:
    """The client gives up on a request still being processed and retries at once: the two run
    one after the other (serialised), and the retry skips what the first committed."""
    create(client)
    batch = events(100, seed=5)
    answers: list[dict[str, Any]] = []
    first = threading.Thread(
        target=lambda: answers.append(client.post("/events", json=batch, headers=WRITE).json()))
    first.start()  # the "timed out" request: nobody waits for it
    retry = client.post("/events", json=batch, headers=WRITE).json()
    first.join()
    assert sorted([retry["accepted"], answers[0]["accepted"]]) == [0, 100]
    assert counted(session) == 100


def test_an_idempotency_key_retry_answers_the_same(client: TestClient, session: Session) -> None:
    create(client)
    batch = [*events(30, seed=6), {"kind": "prediction", "stream": "nope", "id": "x"}]
    key = {"Idempotency-Key": "batch-0001"}
    first = client.post("/events", json=batch, headers=WRITE | key)
    again = client.post("/events", json=batch, headers=WRITE | key)
    assert first.status_code == again.status_code == 202
    assert {**again.json(), "replayed": False} == first.json() and again.json()["replayed"]
    assert first.json()["accepted"] == 30 and len(first.json()["dead_letters"]) == 1
    assert counted(session) == 30
    assert session.query(DeadLetterRow).count() == 1  # the retry stored no second dead letter
    other = client.post("/events", json=events(2, seed=9, start=500), headers=WRITE | key)
    assert other.status_code == 409 and "another body" in other.json()["detail"]


def test_a_full_queue_answers_429_with_retry_after(client: TestClient, session: Session) -> None:
    create(client)
    ingestor = client.app.state.context.ingestor  # type: ignore[attr-defined]
    held = [ingestor.slot() for _ in range(ingestor.max_queue)]
    for slot in held:
        slot.__enter__()
    try:
        response = client.post("/events", json=events(5, seed=7), headers=WRITE)
        assert response.status_code == 429
        assert int(response.headers["Retry-After"]) >= 1
    finally:
        for slot in held:
            slot.__exit__(None, None, None)
    assert client.post("/events", json=events(5, seed=7), headers=WRITE).status_code == 202
    assert counted(session) == 5
