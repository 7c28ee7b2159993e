"""The in-memory webhook dispatcher of runs without a database (``monitor run --no-store``)
against a real HTTP server on loopback: signature, idempotency key, retries
with backoff, every attempt recorded in ``webhook_deliveries``, never blocking the caller."""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from bench.api_rows import alarm, store
from monitor.alerts.delivery import DeliveryAttempt, WebhookDispatcher, exponential_backoff
from monitor.alerts.signing import sign, verify
from monitor.db.engine import session_factory
from monitor.db.models import WebhookDeliveryRow
from monitor.streams.records import Alarm
from tests.support.receivers import Receiver, running_receiver

SECRET = "whsec-test-0123"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver(default=200) as state:
        yield state


@pytest.fixture
def stored(session: Session) -> list[Alarm]:
    records = [alarm("bikes", i) for i in range(5)]
    store(session, alarms=records)
    return records


def _deliveries(session: Session) -> list[WebhookDeliveryRow]:
    session.rollback()
    query = select(WebhookDeliveryRow).order_by(
        WebhookDeliveryRow.url, WebhookDeliveryRow.alarm_id, WebhookDeliveryRow.attempt
    )
    return list(session.scalars(query))


def _fast(urls: list[str], engine: Engine, **kwargs: Any) -> WebhookDispatcher:
    kwargs.setdefault("backoff", lambda n: 0.01)
    return WebhookDispatcher(urls, SECRET, session_factory(engine), **kwargs)


def test_delivery_is_signed_with_idempotency_key_and_recorded(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    hooks = _fast([receiver.url("/hook")], engine)
    hooks.submit(stored[0])
    hooks.close(timeout=5)
    (got,) = receiver.on("/hook")
    assert json.loads(got.body) == stored[0].to_json()
    stamp = got.headers["X-Monitor-Timestamp"]
    assert got.headers["X-Monitor-Signature"] == sign(got.body, SECRET, int(stamp))
    assert verify(got.body, SECRET, got.headers["X-Monitor-Signature"], stamp)
    assert not verify(got.body, "another-secret", got.headers["X-Monitor-Signature"], stamp)
    assert got.headers["X-Monitor-Idempotency-Key"] == f"{stored[0].id}:1"
    assert got.headers["X-Monitor-Attempt"] == "1"
    assert got.headers["Content-Type"] == "application/json"
    (row,) = _deliveries(session)
    assert (
        row.alarm_id,
        row.url,
        row.attempt,
        row.status_code,
        row.error,
        row.idempotency_key,
    ) == (stored[0].id, receiver.url("/hook"), 1, 200, None, f"{stored[0].id}:1")


def test_each_revision_is_a_delivery_of_its_own(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    """A receiver that drops repeats by key still gets the revision: same alarm id, new key."""
    revised = replace(stored[0], kind="concept_shift", revision=2, revised_at=stored[1].ts)
    hooks = _fast([receiver.url("/hook")], engine)
    hooks.submit(stored[0])
    hooks.submit(revised)
    hooks.close(timeout=5)
    got = receiver.on("/hook")
    assert [r.headers["X-Monitor-Idempotency-Key"] for r in got] == [
        f"{stored[0].id}:1", f"{stored[0].id}:2"
    ]
    bodies = [json.loads(r.body) for r in got]
    assert [(b["id"], b["revision"], b["kind"]) for b in bodies] == [
        (stored[0].id, 1, stored[0].kind), (stored[0].id, 2, "concept_shift")
    ]
    assert bodies[1]["revised_at"] == revised.to_json()["revised_at"]
    assert sorted(r.idempotency_key for r in _deliveries(session)) == [
        f"{stored[0].id}:1", f"{stored[0].id}:2"
    ]


def test_5xx_and_429_are_retried_with_the_same_key_until_success(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    receiver.script = {"/flaky": [503, 500, 429, 200]}
    hooks = _fast([receiver.url("/flaky")], engine)
    hooks.submit(stored[1])
    hooks.close(timeout=5)
    got = receiver.on("/flaky")
    assert [r.headers["X-Monitor-Attempt"] for r in got] == ["1", "2", "3", "4"]
    assert {r.headers["X-Monitor-Idempotency-Key"] for r in got} == {f"{stored[1].id}:1"}
    assert len({r.body for r in got}) == 1  # byte-identical, so the signature is too
    rows = _deliveries(session)
    assert [(r.attempt, r.status_code) for r in rows] == [(1, 503), (2, 500), (3, 429), (4, 200)]


def test_4xx_is_final(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    receiver.script = {"/gone": [410, 200]}
    hooks = _fast([receiver.url("/gone")], engine)
    hooks.submit(stored[2])
    hooks.close(timeout=5)
    assert len(receiver.on("/gone")) == 1
    assert [(r.attempt, r.status_code) for r in _deliveries(session)] == [(1, 410)]


def test_connection_errors_are_retried_up_to_max_attempts(
    engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/hook"
    hooks = _fast([dead], engine, max_attempts=3)
    hooks.submit(stored[0])
    hooks.close(timeout=5)
    rows = _deliveries(session)
    assert [r.attempt for r in rows] == [1, 2, 3]
    assert all(r.status_code is None and r.error.startswith("ConnectError") for r in rows)  # type: ignore[union-attr]


def test_backoff_is_exponential(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    receiver.script = {"/slowly": [500, 500, 500, 200]}
    hooks = _fast([receiver.url("/slowly")], engine, backoff=exponential_backoff(0.1, 2.0))
    hooks.submit(stored[0])
    hooks.close(timeout=10)
    times = [r.at for r in receiver.on("/slowly")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 3
    # Lower bounds only (a loaded machine may add delay, never remove it).
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and gaps[2] >= 0.4


def test_every_url_gets_every_alarm(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    urls = [receiver.url("/a"), receiver.url("/b")]
    hooks = _fast(urls, engine)
    for record in stored[:3]:
        hooks.submit(record)
    hooks.close(timeout=5)
    for path in ("/a", "/b"):
        keys = sorted(r.headers["X-Monitor-Idempotency-Key"] for r in receiver.on(path))
        assert keys == sorted(f"{a.id}:1" for a in stored[:3])
    rows = _deliveries(session)
    assert sorted((r.url, r.alarm_id) for r in rows) == sorted(
        (u, a.id) for u in urls for a in stored[:3]
    )


def test_submit_never_blocks_and_a_full_queue_drops_and_records(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    receiver.open.clear()  # the receiver holds every request until the submits are done
    hooks = _fast([receiver.url("/slow")], engine, max_pending=2)
    for record in stored:  # 5 alarms, room for 2 (plus the one being delivered)
        hooks.submit(record)
    # A submit that waited for its delivery could not return before an answer: none is given
    # until the receiver opens (counted, not timed).
    assert receiver.answered == 0
    receiver.open.set()
    hooks.close(timeout=10)
    rows = _deliveries(session)
    dropped = [r for r in rows if r.error and r.error.startswith("dropped")]
    delivered = [r for r in rows if r.status_code == 200]
    assert len(delivered) + len(dropped) == 5
    assert 2 <= len(delivered) <= 3 and all("queue full" in r.error for r in dropped)  # type: ignore[operator]


def test_close_records_undelivered_alarms_as_dropped(
    receiver: Receiver, engine: Engine, session: Session, stored: list[Alarm]
) -> None:
    receiver.script = {"/down": [503]}
    hooks = _fast([receiver.url("/down")], engine, backoff=lambda n: 60.0)
    hooks.submit(stored[0])
    deadline = time.monotonic() + 120  # liveness, not speed
    while not _deliveries(session) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the first attempt has failed; the retry is due in a minute
    hooks.close(timeout=0.2)
    rows = _deliveries(session)
    assert [(r.attempt, r.status_code) for r in rows] == [(1, 503), (2, None)]
    assert rows[1].error == "dropped: shutdown before attempt 2"
    hooks.submit(stored[1])  # after close: recorded as dropped, never raises


def test_a_failing_recorder_does_not_stop_deliveries(receiver: Receiver) -> None:
    seen: list[DeliveryAttempt] = []

    def flaky(attempt: DeliveryAttempt) -> None:
        seen.append(attempt)
        raise RuntimeError("recorder down")

    hooks = WebhookDispatcher([receiver.url("/r")], SECRET, flaky, backoff=lambda n: 0.01)
    hooks.submit(alarm("bikes", 1))
    hooks.submit(alarm("bikes", 2))
    hooks.close(timeout=5)
    assert len(receiver.on("/r")) == 2 and len(seen) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"urls": []}, "at least one URL"),
        ({"urls": ["ftp://x"]}, "http:// or https://"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_invalid_dispatcher_arguments(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "urls": ["http://127.0.0.1:9/x"],
        "secret": SECRET,
        "record": lambda a: None,
    } | kwargs
    with pytest.raises(ValueError, match=message):
        WebhookDispatcher(**arguments)
