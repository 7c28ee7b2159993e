"""``/alerts/deliveries``: the outbox listed by status with keyset pages, dead deliveries retried
through the API (write scope), alarms of ``POST /events`` queued and delivered, and the outbox
metrics (receiver names as labels, never URLs)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from bench.api_rows import READ, WRITE, alarm, make_settings, store
from monitor.alerts.outbox import outbox_rows
from monitor.alerts.routing import parse_alert_routing
from monitor.api import create_app
from monitor.db.models import AlertOutboxRow
from tests.support.api import create, events, post
from tests.support.receivers import Receiver, running_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as state:
        yield state


def queue(session: Session, n: int, dead: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Store ``n`` alarms, each routed to one receiver; the deliveries of ``dead`` are dead."""
    routing = parse_alert_routing({
        "receivers": [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:9/h"}],
        "routes": [{"receivers": ["ops"]}],
        "delivery": {"max_attempts": 2},
    })
    alarms = [alarm("bikes", i) for i in range(n)]
    store(session, alarms=alarms, alerts=outbox_rows(alarms, routing))
    ids = list(session.scalars(select(AlertOutboxRow.id).order_by(AlertOutboxRow.id)))
    dead_ids = [ids[i] for i in sorted(dead)]
    session.execute(update(AlertOutboxRow).where(AlertOutboxRow.id.in_(dead_ids)).values(
        status="dead", attempts=2, last_status_code=503))
    session.commit()
    return ids


def test_deliveries_are_listed_by_status_in_keyset_pages(
    client: TestClient, session: Session
) -> None:
    ids = queue(session, 7, dead={1, 3, 4})
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"status": "dead", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/alerts/deliveries", params=params, headers=READ)
        assert page.status_code == 200, page.text
        body = page.json()
        assert (body["count"], body["count_exact"]) == (3, True)
        seen += body["data"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [d["id"] for d in seen] == [ids[4], ids[3], ids[1]]  # newest first
    assert {(d["status"], d["attempts"], d["last_status_code"]) for d in seen} == {
        ("dead", 2, 503)
    }
    assert seen[0]["receiver"] == "ops" and "url" not in seen[0]
    pending = client.get("/alerts/deliveries?status=pending", headers=READ).json()
    assert pending["count"] == 4
    assert client.get("/alerts/deliveries?receiver=nobody", headers=READ).json()["count"] == 0


@pytest.mark.parametrize(
    "query", ["status=lost", "limit=0", "limit=1001", "cursor=abc", "receiver="]
)
def test_bad_list_parameters_are_422(client: TestClient, query: str) -> None:
    response = client.get(f"/alerts/deliveries?{query}", headers=READ)
    assert response.status_code == 422, response.text


def test_a_dead_delivery_is_retried_with_the_write_scope_only(
    client: TestClient, session: Session
) -> None:
    ids = queue(session, 2, dead={0})
    url = f"/alerts/deliveries/{ids[0]}/retry"
    assert client.post(url, headers=READ).status_code == 403
    assert client.post(url).status_code == 401
    retried = client.post(url, headers=WRITE)
    assert retried.status_code == 200, retried.text
    assert (retried.json()["status"], retried.json()["attempts"]) == ("pending", 2)
    session.expire_all()
    row = session.get(AlertOutboxRow, ids[0])
    assert row is not None and row.attempt_limit == 4  # two more attempts
    again = client.post(url, headers=WRITE)
    assert again.status_code == 409 and "only dead deliveries" in again.json()["detail"]
    assert client.post(f"/alerts/deliveries/{ids[1]}/retry", headers=WRITE).status_code == 409
    assert client.post("/alerts/deliveries/999999/retry", headers=WRITE).status_code == 404
    assert client.post("/alerts/deliveries/0/retry", headers=WRITE).status_code == 422


def test_ingested_alarms_are_routed_delivered_and_measured(
    database_url: str, session: Session, receiver: Receiver, tmp_path: Any
) -> None:
    routes = tmp_path / "alerts.yaml"
    routes.write_text(
        "receivers:\n"
        f"  - {{name: team, type: slack, url: '{receiver.url('/slack')}'}}\n"
        f"  - {{name: am, type: alertmanager, url: '{receiver.url('/api/v2/alerts')}'}}\n"
        "routes:\n"
        "  - {receivers: [team], kinds: [concept_shift]}\n"
        "  - {receivers: [am], streams: ['other-*']}\n"
    )
    receiver.script["/slack"] = [503, 204]
    settings = make_settings(database_url, alerts_file=str(routes), webhook_secret="s3cret")
    with TestClient(create_app(settings)) as client:
        create(client)
        post(client, events(100, seed=5))
        alarms = post(client, events(100, seed=6, shift=4.0, start=100))["alarms"]
        concept = [a["id"] for a in alarms if a["kind"] == "concept_shift"]
        assert concept
        deadline = time.monotonic() + 120  # liveness, not speed
        while True:
            listed = client.get("/alerts/deliveries?status=delivered", headers=READ).json()
            if listed["count"] == len(concept):
                break
            assert time.monotonic() < deadline, "not every alarm was delivered"
            time.sleep(0.05)
        metrics = client.get("/metrics", headers=READ).text
    assert receiver.on("/api/v2/alerts") == []  # no route: stream "bikes" is not other-*
    assert len(receiver.on("/slack")) == len(concept) + 1  # the first answer was a 503
    assert sorted(d["alarm_id"] for d in listed["data"]) == sorted(concept)
    assert {d["receiver"] for d in listed["data"]} == {"team"}
    assert 'monitor_alert_outbox{receiver="team",status="pending"} 0.0' in metrics
    assert 'monitor_alert_outbox{receiver="team",status="dead"} 0.0' in metrics
    failed = 'monitor_alert_delivery_attempts_total{receiver="team",result="http_error"} 1.0'
    assert failed in metrics
    assert receiver.url("/slack") not in metrics
