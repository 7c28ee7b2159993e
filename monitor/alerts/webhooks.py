"""Alarm webhooks: signed, idempotent, retried deliveries that never block detection.

Every alarm delivery (to a webhook, Slack or Alertmanager receiver; :mod:`monitor.alerts`) is a
POST with these headers:

``X-Monitor-Timestamp: <unix seconds>``
    When the request was signed.
``X-Monitor-Signature: sha256=<hex>``
    HMAC-SHA256, with the shared secret, of ``f"{timestamp}.{body}"`` (the timestamp header's
    value, a dot, the exact request body). A receiver recomputes it over the raw bytes it
    received, compares in constant time and refuses a timestamp more than 5 minutes from its
    clock (:func:`verify`), so a captured request cannot be replayed later.
``X-Monitor-Idempotency-Key: <alarm id>:<revision>``
    The same on every attempt (alarm ids are deterministic), so a receiver can drop repeats.
    Each revision of an alarm (``revision`` in the body: an ``insufficient_evidence`` alarm is
    revised once its evidence is complete) is delivered as a new delivery with its own key.
``X-Monitor-Attempt: <n>``
    1 for the first attempt.

With a database, alarms are delivered from the ``alert_outbox`` table by
:class:`monitor.alerts.AlertDelivery` (at-least-once across crashes, routed per receiver).
:class:`WebhookDispatcher` is the delivery of runs without a database (``monitor run
--no-store``): an in-memory queue, so a crash loses what it holds. A 2xx answer ends the
delivery. Connection errors, timeouts, 429 and 5xx are retried with exponential backoff
(``Retry-After`` is honoured when longer) up to ``max_attempts``; any other answer (3xx, 4xx)
is final. Every attempt, and every delivery dropped without an attempt (queue
full, shutdown), is recorded (``webhook_deliveries`` with :class:`DatabaseRecorder`).

:meth:`WebhookDispatcher.submit` only appends to a bounded in-memory queue; the HTTP calls and the
recording happen in one background thread, so a slow or dead receiver never delays detection.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
from sqlalchemy import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from monitor.db.models import WebhookDeliveryRow
from monitor.db.types import json_dumps
from monitor.settings import Settings
from monitor.streams.records import Alarm

__all__ = [
    "DROPPED",
    "DatabaseRecorder",
    "DeliveryAttempt",
    "WebhookDispatcher",
    "exponential_backoff",
    "idempotency_key",
    "sign",
    "signed_headers",
    "verify",
]

log = logging.getLogger(__name__)

#: ``error`` of a recorded delivery that was dropped without being attempted starts with this.
DROPPED = "dropped"
SIGNATURE_HEADER = "X-Monitor-Signature"
TIMESTAMP_HEADER = "X-Monitor-Timestamp"
#: Seconds a signature's timestamp may be from the receiver's clock (:func:`verify`).
SIGNATURE_TOLERANCE = 300.0
IDEMPOTENCY_HEADER = "X-Monitor-Idempotency-Key"
ATTEMPT_HEADER = "X-Monitor-Attempt"
#: Longest wait a receiver's ``Retry-After`` can impose between two attempts, in seconds.
MAX_RETRY_AFTER = 300.0


def sign(body: bytes, secret: str, timestamp: int) -> str:
    """The ``X-Monitor-Signature`` value of ``body`` sent at ``timestamp`` (unix seconds):
    HMAC-SHA256 of ``f"{timestamp}.{body}"``, the scheme of Stripe's and Slack's webhooks.

    Examples
    --------
    >>> sign(b'{"id":"a"}', "s3cret", 1764547200)
    'sha256=4e32e33c7eaac67cca690e1f97c7c4f2a448a86d85ee8e26db0499dbb4b4dbca'
    """
    message = str(int(timestamp)).encode("ascii") + b"." + body
    return "sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def verify(
    body: bytes,
    secret: str,
    signature: str,
    timestamp: str | int,
    *,
    tolerance: float = SIGNATURE_TOLERANCE,
    now: float | None = None,
) -> bool:
    """What a receiver does with a delivery: refuse a timestamp (``X-Monitor-Timestamp``) more
    than ``tolerance`` seconds from its clock ``now``, recompute the signature over the raw body
    and that timestamp, and compare it with ``X-Monitor-Signature`` in constant time.

    Examples
    --------
    >>> signature = sign(b"{}", "s3cret", 1764547200)
    >>> verify(b"{}", "s3cret", signature, "1764547200", now=1764547260)
    True
    >>> verify(b"{ }", "s3cret", signature, "1764547200", now=1764547260)  # body changed
    False
    >>> verify(b"{}", "s3cret", signature, "1764547200", now=1764547200 + 301)  # replayed late
    False
    """
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    clock = time.time() if now is None else now
    if not abs(clock - sent) <= tolerance:
        return False
    return hmac.compare_digest(sign(body, secret, sent), signature)


def signed_headers(
    body: bytes, secret: str, key: str, attempt: int, now: float | None = None
) -> dict[str, str]:
    """Every header of a delivery: content type, timestamp, signature, idempotency key and
    attempt number."""
    timestamp = int(time.time() if now is None else now)
    return {
        "Content-Type": "application/json",
        "User-Agent": "monitor-webhooks/2",
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(body, secret, timestamp),
        IDEMPOTENCY_HEADER: key,
        ATTEMPT_HEADER: str(attempt),
    }


def idempotency_key(alarm: Alarm) -> str:
    """``{alarm id}:{revision}`` (revision 1 for an alarm record without revisions)."""
    return f"{alarm.id}:{getattr(alarm, 'revision', 1)}"


def exponential_backoff(
    base: float = 1.0, factor: float = 2.0, cap: float = 60.0
) -> Callable[[int], float]:
    """Delay before the retry that follows attempt ``n`` (1-based): ``base * factor**(n-1)``,
    at most ``cap`` seconds.

    Examples
    --------
    >>> [exponential_backoff()(n) for n in range(1, 5)]
    [1.0, 2.0, 4.0, 8.0]
    """
    if base < 0 or factor < 1 or cap < 0:
        raise ValueError("backoff needs base >= 0, factor >= 1 and cap >= 0")
    return lambda n: min(cap, base * factor ** (n - 1))


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    """One attempt to deliver an alarm to one URL (or a delivery dropped before any attempt)."""

    alarm_id: str
    url: str
    attempt: int
    status_code: int | None
    error: str | None
    idempotency_key: str

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class DatabaseRecorder:
    """Stores delivery attempts in ``webhook_deliveries``; a failed write is logged, not raised
    (the alarm itself is already stored, and the delivery thread must keep going)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def __call__(self, attempt: DeliveryAttempt) -> None:
        row = {
            "alarm_id": attempt.alarm_id,
            "url": attempt.url,
            "attempt": attempt.attempt,
            "status_code": attempt.status_code,
            "error": attempt.error,
            "idempotency_key": attempt.idempotency_key,
        }
        try:
            with self.sessions() as session, session.begin():
                session.execute(insert(WebhookDeliveryRow), [row])
        except SQLAlchemyError as exc:
            log.warning("could not record webhook delivery %s: %s", attempt, exc)


@dataclass(order=True)
class _Job:
    due: float
    seq: int
    alarm_id: str = field(compare=False)
    url: str = field(compare=False)
    body: bytes = field(compare=False)
    key: str = field(compare=False)
    attempt: int = field(compare=False, default=1)


class WebhookDispatcher:
    """Delivers alarms to webhook URLs from a background thread.

    Parameters
    ----------
    urls
        Receivers; each alarm goes to every one of them.
    secret
        Shared HMAC secret of the ``X-Monitor-Signature`` header.
    record
        Called (in the delivery thread) with every :class:`DeliveryAttempt`; pass a
        ``sessionmaker`` to store them in ``webhook_deliveries``.
    max_attempts
        Attempts per alarm and URL before giving up.
    backoff
        Seconds to wait after failed attempt ``n`` (default 1, 2, 4, 8, ... at most 60 s).
    timeout
        Seconds to wait for a receiver's answer.
    max_pending
        Deliveries (alarm × URL, including scheduled retries) held at most; beyond it new
        alarms are dropped and recorded as such, never waited for.

    Examples
    --------
    >>> seen = []
    >>> with WebhookDispatcher(["http://127.0.0.1:9/hook"], "s3cret", seen.append,
    ...                        max_attempts=1) as hooks:
    ...     pass
    >>> seen
    []
    """

    def __init__(
        self,
        urls: Sequence[str],
        secret: str,
        record: Callable[[DeliveryAttempt], None] | sessionmaker[Session],
        *,
        max_attempts: int = 5,
        backoff: Callable[[int], float] | None = None,
        timeout: float = 5.0,
        max_pending: int = 1000,
    ) -> None:
        if not urls:
            raise ValueError("WebhookDispatcher needs at least one URL")
        if any(not u.startswith(("http://", "https://")) for u in urls):
            raise ValueError(f"webhook URLs must start with http:// or https://, got {list(urls)}")
        if max_attempts < 1 or max_pending < 1 or timeout <= 0:
            raise ValueError("max_attempts and max_pending must be >= 1 and timeout > 0")
        self.urls = tuple(urls)
        self.secret = secret
        self.record = DatabaseRecorder(record) if isinstance(record, sessionmaker) else record
        self.max_attempts = max_attempts
        self.backoff = backoff or exponential_backoff()
        self.timeout = timeout
        self.max_pending = max_pending
        self._jobs: list[_Job] = []
        self._dropped: deque[DeliveryAttempt] = deque()
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name="monitor-webhooks", daemon=True)
        self._thread.start()

    def __enter__(self) -> WebhookDispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        """Deliveries queued or waiting for a retry."""
        with self._cond:
            return len(self._jobs)

    def submit(self, alarm: Alarm) -> None:
        """Queue ``alarm`` for every URL; returns at once, never raises for delivery problems."""
        body = json_dumps(alarm.to_json()).encode("utf-8")
        key = idempotency_key(alarm)
        with self._cond:
            reason = (
                "dispatcher is closed"
                if self._closing
                else f"queue full ({len(self._jobs)} deliveries pending)"
                if len(self._jobs) + len(self.urls) > self.max_pending
                else None
            )
            for url in self.urls:
                if reason is None:
                    heapq.heappush(
                        self._jobs,
                        _Job(time.monotonic(), next(self._seq), alarm.id, url, body, key),
                    )
                else:
                    dropped = f"{DROPPED}: {reason}"
                    self._dropped.append(_attempt(alarm.id, url, 1, None, dropped, key))
            self._cond.notify()

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking alarms, deliver what is queued (retries included) for up to ``timeout``
        seconds, record what is left as dropped, and stop the thread."""
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + timeout
            self._cond.notify()
        self._thread.join(timeout + self.timeout + 1.0)

    # -- delivery thread ------------------------------------------------------------------------

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while (job := self._next_job()) is not None:
                self._deliver(client, job)
        self._flush_dropped()

    def _next_job(self) -> _Job | None:
        """The next due job; ``None`` once closing and drained (or past the close deadline)."""
        while True:
            self._flush_dropped()
            with self._cond:
                now = time.monotonic()
                if self._closing and (not self._jobs or now >= self._deadline):
                    self._drop_remaining()
                    return None
                if self._jobs and self._jobs[0].due <= now:
                    return heapq.heappop(self._jobs)
                wake = self._jobs[0].due if self._jobs else float("inf")
                if self._closing:
                    wake = min(wake, self._deadline)
                if not self._dropped:
                    self._cond.wait(None if wake == float("inf") else wake - now)

    def _drop_remaining(self) -> None:
        for job in self._jobs:
            reason = f"{DROPPED}: shutdown before attempt {job.attempt}"
            self._dropped.append(
                _attempt(job.alarm_id, job.url, job.attempt, None, reason, job.key)
            )
        self._jobs.clear()

    def _flush_dropped(self) -> None:
        while True:
            with self._cond:
                if not self._dropped:
                    return
                attempt = self._dropped.popleft()
            self._safe_record(attempt)

    def _deliver(self, client: httpx.Client, job: _Job) -> None:
        headers = signed_headers(job.body, self.secret, job.key, job.attempt)
        retry_after = 0.0
        try:
            response = client.post(job.url, content=job.body, headers=headers)
            status, error = response.status_code, None
            retry = status == 429 or status >= 500
            retry_after = _retry_after(response)
        except httpx.HTTPError as exc:
            status, error, retry = None, f"{type(exc).__name__}: {exc}"[:1000], True
        self._safe_record(_attempt(job.alarm_id, job.url, job.attempt, status, error, job.key))
        if retry and job.attempt < self.max_attempts:
            delay = max(self.backoff(job.attempt), min(retry_after, MAX_RETRY_AFTER))
            with self._cond:
                heapq.heappush(
                    self._jobs,
                    _Job(
                        time.monotonic() + delay,
                        next(self._seq),
                        job.alarm_id,
                        job.url,
                        job.body,
                        job.key,
                        job.attempt + 1,
                    ),
                )
        elif retry:
            log.warning(
                "webhook %s gave up on alarm %s after %d attempts",
                job.url,
                job.alarm_id,
                job.attempt,
            )

    def _safe_record(self, attempt: DeliveryAttempt) -> None:
        try:
            self.record(attempt)
        except Exception:  # a broken recorder must not kill deliveries
            log.exception("recording webhook attempt %s failed", attempt)


def _attempt(
    alarm_id: str, url: str, n: int, status: int | None, error: str | None, key: str
) -> DeliveryAttempt:
    return DeliveryAttempt(alarm_id, url, n, status, error, idempotency_key=key)


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0  # HTTP-date form: fall back to our own backoff


def dispatcher_from_settings(
    settings: Settings, record: Callable[[DeliveryAttempt], None] | sessionmaker[Session]
) -> WebhookDispatcher | None:
    """The dispatcher of ``settings.webhook_urls``, or None when none is configured (shared by
    the API app and ``monitor run``)."""
    urls = webhook_urls(settings.webhook_urls)
    if not urls:
        return None
    if not settings.webhook_secret:
        log.warning(
            "webhooks are configured without MONITOR_WEBHOOK_SECRET: signatures are "
            "computed with an empty key and prove nothing"
        )
    return WebhookDispatcher(urls, settings.webhook_secret, record)


def webhook_urls(value: str | Sequence[str] | None) -> list[str]:
    """URLs from a comma/space separated string or a list.

    Examples
    --------
    >>> webhook_urls("http://a/hook, http://b/hook")
    ['http://a/hook', 'http://b/hook']
    """
    if not value:
        return []
    items = re.split(r"[\s,]+", value) if isinstance(value, str) else list(value)
    return [u.strip() for u in items if u and u.strip()]
