"""HTTP ingest into a stream bound to another writer (a consumer group) is refused with 409 and
one clear message, and stores nothing (issue #14, one writer per stream)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import WRITE
from monitor.db.fencing import Writer, rebind_stream
from monitor.db.models import StreamWriterRow
from tests.support.api import counted, create, events


def test_http_ingest_into_a_group_bound_stream_is_refused(
    client: TestClient, session: Session
) -> None:
    create(client)
    assert client.post("/events", json=events(10, seed=1), headers=WRITE).status_code == 202
    session.expire_all()
    assert session.get(StreamWriterRow, "bikes").source == "http"
    session.rollback()
    rebind_stream(session, "bikes", Writer("kafka:predictions", "blue"))
    refused = client.post("/events", json=events(10, seed=2, start=10), headers=WRITE)
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "stream 'bikes' is bound to kafka:predictions (consumer group 'blue'), not to this writer "
        "(HTTP ingest): nothing is written for it here; to move it, run `monitor streams rebind "
        "bikes --http`"
    )
    assert counted(session) == 10
    session.rollback()
    rebind_stream(session, "bikes", Writer("http"))
    assert client.post("/events", json=events(10, seed=2, start=10), headers=WRITE).json()[
        "accepted"] == 10
    assert counted(session) == 20
