"""What every alarm delivery carries: a signature, an idempotency key and the attempt number.

Every alarm delivery (to a webhook, Slack or Alertmanager receiver) is a POST with these
headers:

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
"""

from __future__ import annotations

import hashlib
import hmac
import time

from monitor.streams.records import Alarm

__all__ = [
    "ATTEMPT_HEADER",
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "SIGNATURE_TOLERANCE",
    "TIMESTAMP_HEADER",
    "idempotency_key",
    "sign",
    "signed_headers",
    "verify",
]

SIGNATURE_HEADER = "X-Monitor-Signature"
TIMESTAMP_HEADER = "X-Monitor-Timestamp"
#: Seconds a signature's timestamp may be from the receiver's clock (:func:`verify`).
SIGNATURE_TOLERANCE = 300.0
IDEMPOTENCY_HEADER = "X-Monitor-Idempotency-Key"
ATTEMPT_HEADER = "X-Monitor-Attempt"

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
