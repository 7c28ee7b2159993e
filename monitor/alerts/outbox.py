"""At-least-once alarm delivery through the ``alert_outbox`` table.

Enqueueing: :func:`outbox_rows` turns a batch's alarms into one row per (alarm, receiver) of the
routing; the sink inserts them in the transaction that stores the alarms (``persist_batch``'s
``alerts``), with ``ON CONFLICT DO NOTHING`` on ``(idempotency_key, receiver)``, so a replayed
batch queues nothing twice and no crash can store an alarm without queueing its deliveries.

Delivering: :class:`AlertDelivery` runs one background thread that repeatedly

1. *claims* up to ``batch`` due ``pending`` rows in one short transaction (PostgreSQL:
   ``SELECT ... FOR UPDATE SKIP LOCKED``, so several processes share the outbox; SQLite: the
   transaction holds the database's write lock), counting the attempt and pushing
   ``next_attempt_at`` past a lease — a process that dies mid-delivery leaves the row to be
   claimed again once the lease ends;
2. POSTs the bodies (a few at a time), signed (:func:`monitor.alerts.delivery.post_signed`),
   outside any transaction;
3. *finishes* each row: ``delivered`` on a 2xx answer; ``dead`` on another final answer (3xx,
   4xx but 429) or once ``attempt_limit`` attempts failed; else back to ``pending``, due after an
   exponential backoff with jitter (``Retry-After`` is honoured when longer:
   :func:`monitor.alerts.delivery.retry_delay`). Every attempt is
   also recorded in ``webhook_deliveries`` (with the receiver's name).

One alarm's versions reach each receiver in order: a row is not claimed while an earlier row of
the same alarm and receiver (an earlier revision) is still pending, so a revision waits for its
predecessor to be delivered or to die.

A receiver may see a delivery more than once (a crash between its answer and step 3); the
``X-Monitor-Idempotency-Key`` header, ``{alarm id}:{revision}``, is the same on every attempt.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import exists, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, aliased, sessionmaker

from monitor.alerts.delivery import Answer, exponential_backoff, post_signed, retry_delay
from monitor.alerts.payloads import render
from monitor.alerts.routing import AlertRouting, Delivery
from monitor.alerts.signing import idempotency_key
from monitor.db.dialect import insert_missing
from monitor.db.engine import SQLITE_BEGIN
from monitor.db.models import AlertOutboxRow, WebhookDeliveryRow, utcnow
from monitor.streams.records import Alarm

__all__ = ["AlertDelivery", "Claimed", "outbox_rows"]

log = logging.getLogger(__name__)

PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"
STATUSES = (PENDING, DELIVERED, DEAD)


def outbox_rows(
    alarms: Sequence[Alarm], routing: AlertRouting, now: datetime | None = None
) -> list[dict[str, Any]]:
    """One ``alert_outbox`` row per alarm and receiver it is routed to, due ``now``."""
    due = now or utcnow()
    limit = routing.delivery.max_attempts
    return [
        {
            "alarm_id": alarm.id,
            "receiver": receiver.name,
            "receiver_type": receiver.type,
            "url": receiver.url,
            "idempotency_key": idempotency_key(alarm),
            "body": render(receiver, alarm, routing.generator_url),
            "status": PENDING,
            "attempts": 0,
            "max_attempts": limit,
            "attempt_limit": limit,
            "next_attempt_at": due,
            "created_at": due,
            "updated_at": due,
        }
        for alarm in alarms
        for receiver in routing.receivers_of(alarm)
    ]


@dataclass(frozen=True, slots=True)
class Claimed:
    """An outbox row taken for one attempt."""

    id: int
    alarm_id: str
    receiver: str
    url: str
    body: str
    key: str
    attempt: int


class AlertDelivery:
    """Delivers the ``alert_outbox`` from a background thread (see the module docstring).

    Parameters
    ----------
    sessions
        Sessions of the database holding the outbox.
    secret
        HMAC key of the ``X-Monitor-Signature`` header.
    delivery
        Retry settings (attempts per delivery are stored with each row at enqueueing).
    poll_s
        Longest sleep between two looks at the outbox (:meth:`wake` ends it early).
    lease_s
        How long a claimed row is left to its claimer before another may take it (default:
        ``delivery.lease_seconds``).
    batch
        Rows claimed at a time.
    concurrency
        Requests of a pass in flight at once (so one slow receiver holds up at most this share
        of the pass).
    rng
        Source of the backoff jitter.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        secret: str,
        delivery: Delivery | None = None,
        *,
        poll_s: float = 1.0,
        lease_s: float | None = None,
        batch: int = 20,
        concurrency: int = 8,
        rng: random.Random | None = None,
    ) -> None:
        self.sessions = sessions
        self.secret = secret
        self.delivery = delivery or Delivery()
        if poll_s <= 0 or batch < 1 or concurrency < 1 or (lease_s is not None and lease_s <= 0):
            raise ValueError("poll_s and lease_s must be > 0, batch and concurrency >= 1")
        self.poll_s = poll_s
        self.lease_s = self.delivery.lease_seconds if lease_s is None else lease_s
        self.batch = batch
        self.concurrency = concurrency
        self.backoff = exponential_backoff(
            self.delivery.backoff_seconds,
            cap=self.delivery.max_backoff_seconds,
            jitter=rng or random.Random(),
        )
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._deadline = float("inf")
        self._thread: threading.Thread | None = None
        self._client = httpx.Client(timeout=self.delivery.timeout_seconds)

    def __enter__(self) -> AlertDelivery:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> AlertDelivery:
        """Start the delivery thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="monitor-alerts", daemon=True)
            self._thread.start()
        return self

    def wake(self, _alarm: Any = None) -> None:
        """Look at the outbox now (an ``on_alarm`` callback: new rows were committed)."""
        self._wake.set()

    def close(self, drain_s: float = 10.0) -> None:
        """Deliver what is due for up to ``drain_s`` seconds, then stop; rows still pending
        (scheduled retries included) stay in the outbox for the next start."""
        self._deadline = time.monotonic() + drain_s
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(drain_s + self.delivery.timeout_seconds + 5.0)
        self._client.close()

    # -- one pass -------------------------------------------------------------------------------

    def deliver_due(self) -> int:
        """Claim due rows, attempt each, record the outcomes (one transaction for the pass);
        the number attempted."""
        claimed = self.claim(self.batch)
        if claimed:
            with ThreadPoolExecutor(min(self.concurrency, len(claimed))) as pool:
                answers = list(pool.map(self._post, claimed))
            self.finish(list(zip(claimed, answers, strict=True)))
        return len(claimed)

    def claim(self, n: int) -> list[Claimed]:
        """Take up to ``n`` due pending rows for one attempt each (see the module docstring)."""
        with self.sessions() as session, session.begin():
            session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
            now = utcnow()
            # A receiver gets one alarm's versions in order: a row waits while an earlier
            # version of its alarm for the same receiver is still pending.
            earlier = aliased(AlertOutboxRow)
            waiting = exists().where(
                earlier.alarm_id == AlertOutboxRow.alarm_id,
                earlier.receiver == AlertOutboxRow.receiver,
                earlier.status == PENDING,
                earlier.id < AlertOutboxRow.id,
            )
            query = (
                select(AlertOutboxRow)
                .where(AlertOutboxRow.status == PENDING, AlertOutboxRow.next_attempt_at <= now,
                       ~waiting)
                .order_by(AlertOutboxRow.next_attempt_at, AlertOutboxRow.id)
                .limit(n)
                .with_for_update(skip_locked=True)
            )
            taken = []
            for k, row in enumerate(session.scalars(query)):
                # The pass POSTs ``concurrency`` rows at a time: the k-th may wait for
                # k // concurrency requests before its own.
                lease = self.lease_s + (k // self.concurrency) * self.delivery.timeout_seconds
                row.attempts += 1
                row.next_attempt_at = now + timedelta(seconds=lease)
                taken.append(Claimed(row.id, row.alarm_id, row.receiver, row.url, row.body,
                                     row.idempotency_key, row.attempts))
            return taken

    def finish(self, outcomes: Sequence[tuple[Claimed, Answer]]) -> None:
        """Store the outcome of each attempt (a row re-claimed meanwhile is left to its new
        claimer unless this attempt delivered it) and record the attempts, in one transaction."""
        with self.sessions() as session, session.begin():
            session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
            ids = sorted(claimed.id for claimed, _ in outcomes)
            query = select(AlertOutboxRow).where(AlertOutboxRow.id.in_(ids)).with_for_update()
            rows = {row.id: row for row in session.scalars(query)}
            for claimed, answer in outcomes:
                row = rows.get(claimed.id)
                if row is None or row.status != PENDING:
                    continue
                if row.attempts == claimed.attempt or answer.succeeded:
                    self._update(row, claimed, answer)
            # Two receivers may share a URL: their attempts are recorded once.
            insert_missing(session, WebhookDeliveryRow,
                           [_attempt_row(claimed, answer) for claimed, answer in outcomes])

    def _update(self, row: AlertOutboxRow, claimed: Claimed, answer: Answer) -> None:
        now = utcnow()
        row.last_status_code, row.last_error = answer.status_code, answer.error
        if answer.succeeded:
            row.status, row.delivered_at = DELIVERED, now
        elif not answer.retryable or claimed.attempt >= row.attempt_limit:
            row.status = DEAD
            log.warning("alert delivery %d (alarm %s to %s) is dead after %d attempt(s): %s",
                        row.id, row.alarm_id, row.receiver, claimed.attempt,
                        answer.error or f"HTTP {answer.status_code}")
        else:
            wait = retry_delay(self.backoff, claimed.attempt, answer)
            row.next_attempt_at = now + timedelta(seconds=wait)

    def _post(self, claimed: Claimed) -> Answer:
        return post_signed(self._client, claimed.url, claimed.body.encode("utf-8"), self.secret,
                           claimed.key, claimed.attempt)

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                attempted = self.deliver_due()
            except SQLAlchemyError as exc:  # the database is away: try again after a pause
                log.warning("alert delivery could not reach the outbox: %s", exc)
                attempted = 0
            except Exception:  # a bug must not end deliveries: claimed rows come back later
                log.exception("alert delivery pass failed")
                attempted = 0
            if self._closing.is_set() and (not attempted or time.monotonic() >= self._deadline):
                return
            if not attempted:
                self._wake.wait(self.poll_s)
                self._wake.clear()


def _attempt_row(claimed: Claimed, answer: Answer) -> dict[str, Any]:
    return {
        "alarm_id": claimed.alarm_id,
        "url": claimed.url,
        "attempt": claimed.attempt,
        "status_code": answer.status_code,
        "error": answer.error,
        "idempotency_key": claimed.key,
        "receiver": claimed.receiver,
    }

