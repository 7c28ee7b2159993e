"""An edited or forged alarm cursor is a 422; the cursor a page returned is accepted."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, alarm, store
from monitor.db import queries
from monitor.db.errors import InvalidCursorError


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _edit(cursor: str, change: Callable[[dict[str, Any]], None]) -> str:
    """The cursor with its sort key changed and anything after the key kept as it was."""
    head, dot, rest = cursor.partition(".")
    payload = json.loads(_unb64(head))
    change(payload)
    text = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    return _b64(text.encode()) + dot + rest


def _earlier(payload: dict[str, Any]) -> None:
    payload["ts"] = (datetime.fromisoformat(payload["ts"]) - timedelta(seconds=1)).isoformat()


def _other_id(payload: dict[str, Any]) -> None:
    payload["id"] = "f" * 36


@pytest.fixture
def first_cursor(client: TestClient, session: Session) -> Iterator[str]:
    store(session, alarms=[alarm("bikes", i) for i in range(6)])
    body = client.get("/alarms", params={"limit": 2}, headers=READ).json()
    assert body["next_cursor"]
    yield body["next_cursor"]


def test_the_cursor_of_a_page_is_accepted(client: TestClient, first_cursor: str) -> None:
    response = client.get("/alarms", params={"limit": 2, "cursor": first_cursor}, headers=READ)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 2


@pytest.mark.parametrize("change", [_earlier, _other_id], ids=["ts", "id"])
def test_an_edited_cursor_is_422(
    client: TestClient, first_cursor: str, change: Callable[[dict[str, Any]], None]
) -> None:
    edited = _edit(first_cursor, change)
    response = client.get("/alarms", params={"limit": 2, "cursor": edited}, headers=READ)
    assert response.status_code == 422, response.text
    assert "cursor is not valid" in response.text


def test_a_forged_cursor_is_422(client: TestClient, first_cursor: str) -> None:
    payload = {"k": "alarms", "o": "desc", "ts": "2026-11-30T12:00:03+00:00", "id": "x"}
    forged = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    tag = first_cursor.partition(".")[2]
    for cursor in (forged, f"{forged}.{tag}", f"{forged}.AAAAAAAAAAAAAAAA"):
        response = client.get("/alarms", params={"cursor": cursor}, headers=READ)
        assert response.status_code == 422, (cursor, response.text)


def test_a_cursor_signed_with_another_key_is_refused() -> None:
    ts = datetime.fromisoformat("2026-11-30T12:00:03+00:00")
    cursor = queries.alarm_cursor(ts, "a", "desc")
    assert queries.alarm_cursor_key(cursor, "desc") == (ts, "a")
    try:
        queries.set_cursor_key("another secret")
        with pytest.raises(InvalidCursorError, match="cursor is not valid"):
            queries.alarm_cursor_key(cursor, "desc")
    finally:
        queries.set_cursor_key("")
