"""At-least-once alert delivery through ``alert_outbox``, on SQLite and PostgreSQL, against a real
HTTP receiver on loopback: queued in the results transaction, routed, signed, retried with
backoff, dead after the last attempt, redelivered after a crash."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from bench.api_rows import alarm
from monitor.alerts import AlertDelivery, AlertRouting, Delivery
from monitor.alerts.outbox import outbox_rows
from monitor.alerts.routing import parse_alert_routing
from monitor.alerts.signing import verify
from monitor.db.engine import session_factory
from monitor.db.errors import StaleWriterError
from monitor.db.models import AlertOutboxRow, WebhookDeliveryRow
from monitor.db.queries import retry_alert_delivery
from monitor.db.sink import DatabaseSink
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import SourceOffset
from tests.support.receivers import Receiver

SECRET = "whsec-alerts-42"
FAST = {"backoff_seconds": 0.05, "max_backoff_seconds": 1.0, "timeout_seconds": 2.0}


def routing(receiver: Receiver, **delivery: Any) -> AlertRouting:
    return parse_alert_routing({
        "receivers": [
            {"name": "hook", "type": "webhook", "url": receiver.url("/hook")},
            {"name": "slack", "type": "slack", "url": receiver.url("/slack")},
            {"name": "am", "type": "alertmanager", "url": receiver.url("/api/v2/alerts")},
        ],
        "routes": [
            {"receivers": ["hook"]},
            {"receivers": ["slack"], "kinds": ["concept_shift"]},
            {"receivers": ["am"], "streams": ["fraud-*"], "min_severity": "warning"},
        ],
        "delivery": FAST | delivery,
    })


@pytest.fixture
def sink(migrated_database_url: str, db_session: Session) -> Iterator[DatabaseSink]:
    sink = DatabaseSink(migrated_database_url, migrate=False)
    yield sink
    sink.close()


def deliveries(engine: Engine) -> list[AlertOutboxRow]:
    with session_factory(engine)() as session:
        return list(session.scalars(select(AlertOutboxRow).order_by(AlertOutboxRow.id)))


def attempts(engine: Engine) -> list[WebhookDeliveryRow]:
    with session_factory(engine)() as session:
        query = select(WebhookDeliveryRow).order_by(WebhookDeliveryRow.id)
        return list(session.scalars(query))


def drain(delivery: AlertDelivery, until: float = 120.0) -> None:
    """Run delivery passes (no thread) until one attempts nothing due."""
    deadline = time.monotonic() + until
    while delivery.deliver_due() and time.monotonic() < deadline:
        pass


def wait_for(condition: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_deliveries_are_queued_in_the_results_transaction(
    db_engine: Engine, db_session: Session, receiver: Receiver
) -> None:
    rows = outbox_rows([alarm("bikes", 0, kind="concept_shift")], routing(receiver))
    offsets = [SourceOffset("file:x", 0, 10)]
    persist_batch(db_session, Batch(alarms=[alarm("bikes", 0, kind="concept_shift")],
                                    offsets=offsets), alerts=rows)
    assert [(d.receiver, d.status) for d in deliveries(db_engine)] == [
        ("hook", "pending"), ("slack", "pending")
    ]
    # A replay of the batch queues nothing twice.
    persist_batch(db_session, Batch(alarms=[alarm("bikes", 0, kind="concept_shift")]), alerts=rows)
    assert len(deliveries(db_engine)) == 2
    # A batch the database refuses stores neither its alarm nor its deliveries.
    late = [alarm("bikes", 1, kind="concept_shift")]
    with pytest.raises(StaleWriterError):
        persist_batch(db_session, Batch(alarms=late, offsets=[SourceOffset("file:x", 0, 5)]),
                      alerts=outbox_rows(late, routing(receiver)))
    assert len(deliveries(db_engine)) == 2


def test_each_receiver_gets_its_routed_alarms_in_its_format_signed(
    db_engine: Engine, sink: DatabaseSink, receiver: Receiver
) -> None:
    sink.routing = routing(receiver)
    alarms = [
        alarm("bikes", 0, kind="concept_shift"),
        alarm("fraud-eu", 1, kind="benign_covariate_shift"),
        alarm("fraud-eu", 2, kind="extreme_covariate_shift"),
    ]
    sink.persist(Batch(alarms=alarms))
    drain(AlertDelivery(sink.sessions, SECRET, sink.routing.delivery))
    hook, slack, am = (receiver.on(p) for p in ("/hook", "/slack", "/api/v2/alerts"))
    assert sorted(json.loads(r.body)["id"] for r in hook) == sorted(a.id for a in alarms)
    assert [json.loads(r.body)["text"].split(" on ")[0] for r in slack] == [
        ":rotating_light: concept shift"
    ]
    assert [json.loads(r.body)[0]["labels"]["alarm_id"] for r in am] == [alarms[2].id]
    for request in hook + slack + am:
        headers = request.headers
        assert verify(request.body, SECRET, headers["X-Monitor-Signature"],
                      headers["X-Monitor-Timestamp"])
        assert headers["X-Monitor-Attempt"] == "1"
        assert headers["X-Monitor-Idempotency-Key"].endswith(":1")
    assert {d.status for d in deliveries(db_engine)} == {"delivered"}
    assert sorted(a.receiver or "" for a in attempts(db_engine)) == [
        "am", "hook", "hook", "hook", "slack"
    ]


def test_failures_are_retried_with_backoff_and_the_same_key_until_delivered(
    db_engine: Engine, sink: DatabaseSink, receiver: Receiver
) -> None:
    receiver.script["/hook"] = [503, 429, 500, 204]
    sink.routing = routing(receiver)
    record = alarm("bikes", 0, kind="benign_covariate_shift")
    sink.persist(Batch(alarms=[record]))
    with AlertDelivery(sink.sessions, SECRET, sink.routing.delivery, poll_s=0.01):
        wait_for(lambda: [d.status for d in deliveries(db_engine)] == ["delivered"])
    got = receiver.on("/hook")
    assert [r.headers["X-Monitor-Attempt"] for r in got] == ["1", "2", "3", "4"]
    assert {r.headers["X-Monitor-Idempotency-Key"] for r in got} == {f"{record.id}:1"}
    # Waits after attempts 1, 2, 3: at least half of 0.05, 0.1, 0.2 s (equal jitter).
    gaps = [b.at - a.at for a, b in itertools.pairwise(got)]
    assert all(gap >= 0.5 * 0.05 * 2**n for n, gap in enumerate(gaps)), gaps
    assert [a.status_code for a in attempts(db_engine)] == [503, 429, 500, 204]
    (row,) = deliveries(db_engine)
    assert row.attempts == 4 and row.delivered_at is not None and row.last_status_code == 204


def test_an_alarms_versions_reach_a_receiver_in_order(
    db_engine: Engine, db_session: Session, receiver: Receiver
) -> None:
    """Revision 2 is queued beside revision 1, whose first attempts fail: it is held back
    until revision 1 is delivered, so a receiver never sees a newer version before an older one
    (while another alarm's delivery is not held up)."""
    receiver.script["/hook"] = [503, 503, 204]
    route = routing(receiver)
    first = alarm("bikes", 0, kind="insufficient_evidence")
    revised = replace(first, kind="concept_shift", revision=2, revised_at=first.ts)
    other = alarm("bikes", 1, kind="concept_shift")
    persist_batch(db_session, Batch(alarms=[first, other]), alerts=outbox_rows([first], route))
    persist_batch(db_session, Batch(alarms=[]), alerts=outbox_rows([revised, other], route))
    hooks = AlertDelivery(session_factory(db_engine), SECRET, route.delivery, batch=10)
    claimed = hooks.claim(10)
    # Revision 1 went to the webhook only (the Slack route takes concept shifts): revision 2
    # waits for it there, not on Slack.
    assert {(c.key, c.receiver) for c in claimed} == {
        (f"{first.id}:1", "hook"), (f"{first.id}:2", "slack"),
        (f"{other.id}:1", "hook"), (f"{other.id}:1", "slack"),
    }
    hooks.finish([(c, hooks._post(c)) for c in claimed])
    wait_for(lambda: hooks.deliver_due() >= 0 and {
        d.status for d in deliveries(db_engine)} == {"delivered"})
    keys = [r.headers["X-Monitor-Idempotency-Key"] for r in receiver.on("/hook")]
    mine = [k for k in keys if k.startswith(f"{first.id}:")]
    assert mine == [f"{first.id}:1"] * 2 + [f"{first.id}:2"]  # 503 (the script), 204, then 2


def test_a_final_answer_or_the_last_failed_attempt_makes_a_delivery_dead(
    db_engine: Engine, sink: DatabaseSink, receiver: Receiver
) -> None:
    receiver.script["/hook"] = [404]
    receiver.script["/slack"] = [503]
    sink.routing = routing(receiver, max_attempts=3, backoff_seconds=0.01)
    sink.persist(Batch(alarms=[alarm("bikes", 0, kind="concept_shift")]))
    with AlertDelivery(sink.sessions, SECRET, sink.routing.delivery, poll_s=0.01):
        wait_for(lambda: {d.status for d in deliveries(db_engine)} == {"dead"})
    hook, slack = deliveries(db_engine)
    assert (hook.attempts, hook.last_status_code) == (1, 404)  # 4xx: no retry
    assert (slack.attempts, slack.last_status_code) == (3, 503)
    # Retried by an operator (the API's POST /alerts/deliveries/{id}/retry): a fresh budget.
    receiver.script["/slack"] = [503, 204]
    with session_factory(db_engine)() as session:
        assert retry_alert_delivery(session, slack.id).status == "pending"
    drain_until = time.monotonic() + 120  # liveness, not speed
    delivery = AlertDelivery(sink.sessions, SECRET, sink.routing.delivery)
    while deliveries(db_engine)[1].status == "pending" and time.monotonic() < drain_until:
        delivery.deliver_due()
        time.sleep(0.01)
    slack = deliveries(db_engine)[1]
    assert (slack.status, slack.attempts, slack.attempt_limit) == ("delivered", 5, 6)


def test_unreachable_receivers_are_retried_then_dead_with_the_error(
    db_engine: Engine, sink: DatabaseSink, receiver: Receiver
) -> None:
    sink.routing = parse_alert_routing({
        "receivers": [{"name": "gone", "type": "webhook", "url": "http://127.0.0.1:9/hook"}],
        "routes": [{"receivers": ["gone"]}],
        "delivery": FAST | {"max_attempts": 2, "backoff_seconds": 0.01},
    })
    sink.persist(Batch(alarms=[alarm("bikes", 0)]))
    with AlertDelivery(sink.sessions, SECRET, sink.routing.delivery, poll_s=0.01):
        wait_for(lambda: [d.status for d in deliveries(db_engine)] == ["dead"])
    (row,) = deliveries(db_engine)
    assert row.attempts == 2 and row.last_status_code is None
    assert row.last_error and row.last_error.startswith("ConnectError")


def test_a_crash_before_or_during_delivery_is_redelivered_after_restart(
    migrated_database_url: str, db_engine: Engine, db_session: Session, receiver: Receiver
) -> None:
    # Process 1 stores a batch (alarms and deliveries) and dies before delivering anything.
    first = DatabaseSink(migrated_database_url, migrate=False, routing=routing(receiver))
    benign = [alarm("bikes", i, kind="benign_covariate_shift") for i in (0, 1)]  # "hook" only
    first.persist(Batch(alarms=benign))
    first.close()
    assert receiver.received == []
    # Process 2 claims them (leases: 0.3 s, plus its 0.1 s timeout for the second, which it
    # POSTs after the first's) and dies during its POSTs.
    second = DatabaseSink(migrated_database_url, migrate=False)
    crashed = AlertDelivery(second.sessions, SECRET, Delivery(**FAST | {"timeout_seconds": 0.1}),
                            lease_s=0.3, concurrency=1)
    before = datetime.now(UTC)
    claimed = crashed.claim(10)
    assert len(claimed) == 2
    del crashed
    second.close()
    # The claims are leased: not due before 0.3 s (first) and 0.4 s (second) after the claim.
    leases = sorted(d.next_attempt_at - before for d in deliveries(db_engine))
    assert leases[0] >= timedelta(seconds=0.3) and leases[1] >= timedelta(seconds=0.4)
    # Process 3, once the leases end, finds them due and delivers each.
    time.sleep(max(0.0, (before + leases[1] - datetime.now(UTC)).total_seconds()) + 0.05)
    third = DatabaseSink(migrated_database_url, migrate=False)
    try:
        drain(AlertDelivery(third.sessions, SECRET, Delivery(**FAST)))
    finally:
        third.close()
    got = receiver.on("/hook")
    assert sorted(r.headers["X-Monitor-Idempotency-Key"] for r in got) == sorted(
        f"{a.id}:1" for a in benign
    )
    assert {r.headers["X-Monitor-Attempt"] for r in got} == {"2"}  # the claim counted one
    assert {d.status for d in deliveries(db_engine)} == {"delivered"}


def test_concurrent_claims_never_take_a_row_twice(
    db_engine: Engine, sink: DatabaseSink, receiver: Receiver
) -> None:
    sink.routing = routing(receiver)
    sink.persist(Batch(alarms=[alarm("bikes", i) for i in range(40)]))
    claimers = [AlertDelivery(sink.sessions, SECRET, Delivery(**FAST)) for _ in range(4)]
    taken: list[list[int]] = [[] for _ in claimers]
    start = threading.Barrier(len(claimers))

    def claim(k: int) -> None:
        start.wait()
        for _ in range(10):
            taken[k] += [c.id for c in claimers[k].claim(3)]

    threads = [threading.Thread(target=claim, args=(k,)) for k in range(len(claimers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for ours in taken for i in ours]
    assert len(ids) == len(set(ids)) == len(deliveries(db_engine))
