"""Request body size limit (413) and the error contract: 4xx with a message, never a 500."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import WRITE, alarm, store

LIMIT = 1_000_000  # make_settings' max_body_bytes


def _chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        chunk = b" " * min(size, total - sent)
        sent += len(chunk)
        yield chunk


@pytest.mark.parametrize("path", ["/events", "/streams", "/alarms/x/ack"])
def test_declared_oversized_body_is_413(client: TestClient, path: str) -> None:
    response = client.post(path, content=b"[" + b" " * LIMIT + b"]", headers=WRITE)
    assert response.status_code == 413
    assert response.json()["detail"] == (
        f"request body too large: {LIMIT + 2} bytes exceeds the limit of {LIMIT} bytes"
    )


def test_chunked_oversized_body_is_413(client: TestClient) -> None:
    response = client.post("/events", content=_chunks(LIMIT + 1), headers=WRITE)
    assert response.status_code == 413
    assert "exceeds the limit" in response.json()["detail"]


def test_chunked_body_within_the_limit_reaches_the_route(
    client: TestClient, session: Session
) -> None:
    record = alarm("bikes", 1)
    store(session, alarms=[record])
    body = iter([b'{"by":', b' "chunked"}'])
    response = client.post(
        f"/alarms/{record.id}/ack",
        content=body,
        headers=WRITE | {"Content-Type": "application/json"},
    )
    assert response.status_code == 200
    assert response.json()["acknowledged_by"] == "chunked"


def test_body_at_the_limit_is_accepted_by_the_limit(client: TestClient) -> None:
    body = b"[" + b" " * (LIMIT - 2) + b"]"
    response = client.post(
        "/events", content=body, headers=WRITE | {"Content-Type": "application/json"}
    )
    assert response.status_code == 422  # past the limit check: an empty batch is refused


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "JSON decode error"),
        (b"[]", "at least 1 item"),
        (b'{"kind": "prediction"}', "valid list"),
        (b"[1, 2]", "valid dictionary"),
        (b"", "Field required"),
    ],
    ids=["malformed", "empty", "object", "numbers", "no-body"],
)
def test_malformed_event_batches_are_422(client: TestClient, body: bytes, fragment: str) -> None:
    response = client.post(
        "/events", content=body, headers=WRITE | {"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert fragment in response.text


def test_body_that_is_not_utf8_is_400(client: TestClient) -> None:
    response = client.post(
        "/events", content=b"\xff\xfe[", headers=WRITE | {"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "There was an error parsing the body"}
