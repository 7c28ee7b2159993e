"""Delivering an alarm over HTTP: one signed attempt, the retry rule and the backoff, and the
in-memory delivery of runs without a database.

One attempt (:func:`post_signed`) is a POST with the headers of :mod:`monitor.alerts.signing`.
A 2xx answer ends the delivery. Connection errors, timeouts, 429 and 5xx are retried
(:attr:`Answer.retryable`) after an exponential backoff (:func:`exponential_backoff`), or after
the receiver's ``Retry-After`` when that is longer (at most :data:`MAX_RETRY_AFTER`:
:func:`retry_delay`); any other answer (3xx, 4xx) is final.

With a database, alarms are delivered from the ``alert_outbox`` table by
:class:`monitor.alerts.AlertDelivery` (:mod:`monitor.alerts.outbox`: at-least-once across
crashes, routed per receiver). :class:`WebhookDispatcher` is the delivery of runs without a
database (``monitor run --no-store``): an in-memory queue, so a crash loses what it holds. It
retries up to ``max_attempts``. Every attempt, and every delivery dropped without an attempt
(queue full, shutdown), is recorded (``webhook_deliveries`` with :class:`DatabaseRecorder`).

:meth:`WebhookDispatcher.submit` only appends to a bounded in-memory queue; the HTTP calls and the
recording happen in one background thread, so a slow or dead receiver never delays detection.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
from sqlalchemy import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from monitor.alerts.routing import webhook_urls
from monitor.alerts.signing import idempotency_key, signed_headers
from monitor.db.models import WebhookDeliveryRow
from monitor.db.types import json_dumps
from monitor.settings import Settings
from monitor.streams.records import Alarm

__all__ = [
    "DROPPED",
    "MAX_RETRY_AFTER",
    "Answer",
    "DatabaseRecorder",
    "DeliveryAttempt",
    "WebhookDispatcher",
    "dispatcher_from_settings",
    "exponential_backoff",
    "post_signed",
    "retry_delay",
]

log = logging.getLogger(__name__)

#: ``error`` of a recorded delivery that was dropped without being attempted starts with this.
DROPPED = "dropped"
#: Longest wait a receiver's ``Retry-After`` can impose between two attempts, in seconds.
MAX_RETRY_AFTER = 300.0


@dataclass(frozen=True, slots=True)
class Answer:
    """What one attempt got: an HTTP status, or the error that prevented one."""

    status_code: int | None
    error: str | None
    #: Seconds the receiver asked us to wait (its ``Retry-After``; 0 when it gave none).
    retry_after: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def retryable(self) -> bool:
        code = self.status_code
        return code is None or code == 429 or code >= 500


def post_signed(
    client: httpx.Client, url: str, body: bytes, secret: str, key: str, attempt: int
) -> Answer:
    """POST ``body`` to ``url`` as attempt ``attempt`` of the delivery ``key``, signed with
    ``secret``; a connection error or timeout is an answer without a status."""
    headers = signed_headers(body, secret, key, attempt)
    try:
        response = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:1000])
    return Answer(response.status_code, None, _retry_after(response))


def exponential_backoff(
    base: float = 1.0,
    factor: float = 2.0,
    cap: float = 60.0,
    *,
    jitter: random.Random | None = None,
) -> Callable[[int], float]:
    """Delay before the retry that follows attempt ``n`` (1-based): ``base * factor**(n-1)``,
    at most ``cap`` seconds. With ``jitter``, that delay times a uniform factor in [1/2, 1]
    drawn from it ("equal jitter": M. Brooker, *Exponential Backoff And Jitter*, AWS
    Architecture Blog, 2015), so that receivers recovering from an outage are not hit by every
    sender at the same instant, while each wait stays at least half the exponential one.

    Examples
    --------
    >>> [exponential_backoff()(n) for n in range(1, 5)]
    [1.0, 2.0, 4.0, 8.0]
    >>> wait = exponential_backoff(1.0, cap=60.0, jitter=random.Random(0))
    >>> [0.5 * 2**(n - 1) <= wait(n) <= 2**(n - 1) for n in range(1, 6)]
    [True, True, True, True, True]
    """
    if base < 0 or factor < 1 or cap < 0:
        raise ValueError("backoff needs base >= 0, factor >= 1 and cap >= 0")
    if jitter is None:
        return lambda n: min(cap, base * factor ** (n - 1))
    return lambda n: min(cap, base * factor ** (n - 1)) * jitter.uniform(0.5, 1.0)


def retry_delay(backoff: Callable[[int], float], attempt: int, answer: Answer) -> float:
    """Seconds to wait after failed attempt ``attempt``: the backoff's, or the receiver's
    ``Retry-After`` when longer (at most :data:`MAX_RETRY_AFTER`)."""
    return max(backoff(attempt), min(answer.retry_after, MAX_RETRY_AFTER))


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0  # HTTP-date form: fall back to our own backoff

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
        answer = post_signed(client, job.url, job.body, self.secret, job.key, job.attempt)
        self._safe_record(_attempt(job.alarm_id, job.url, job.attempt, answer.status_code,
                                   answer.error, job.key))
        if answer.retryable and job.attempt < self.max_attempts:
            due = time.monotonic() + retry_delay(self.backoff, job.attempt, answer)
            retry = _Job(due, next(self._seq), job.alarm_id, job.url, job.body, job.key,
                         job.attempt + 1)
            with self._cond:
                heapq.heappush(self._jobs, retry)
        elif answer.retryable:
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


