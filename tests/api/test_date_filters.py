"""``since`` and ``until`` accept a plain date (midnight UTC), besides a date and time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, T0, alarm, store
from monitor.api.timeutil import check_range


def test_a_date_is_midnight_utc() -> None:
    since, until = check_range("2026-11-30", "2026-12-01")
    assert since == datetime(2026, 11, 30, tzinfo=UTC)
    assert until == datetime(2026, 12, 1, tzinfo=UTC)


def test_a_date_and_a_time_mix() -> None:
    since, until = check_range("2026-11-30", "2026-11-30T06:00:00+02:00")
    assert since == datetime(2026, 11, 30, tzinfo=UTC)
    assert until == datetime(2026, 11, 30, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"since": "2026-11-30"}, 6),
        ({"since": "2026-12-01"}, 0),
        ({"until": "2026-11-30"}, 0),
        ({"until": "2026-12-01"}, 6),
        ({"since": "2026-11-30", "until": "2026-12-01"}, 6),
    ],
)
def test_alarms_filtered_by_date(
    client: TestClient, session: Session, params: dict[str, str], expected: int
) -> None:
    assert T0.date().isoformat() == "2026-11-30"
    store(session, alarms=[alarm("bikes", i) for i in range(6)])
    response = client.get("/alarms", params=params, headers=READ)
    assert response.status_code == 200, response.text
    assert response.json()["count"] == expected


@pytest.mark.parametrize("text", ["2026-11-31", "2026-13-01", "30.11.2026", "2026-11-30T"])
def test_a_bad_date_is_422(client: TestClient, text: str) -> None:
    response = client.get("/alarms", params={"since": text}, headers=READ)
    assert response.status_code == 422, response.text
    assert "since" in response.text
