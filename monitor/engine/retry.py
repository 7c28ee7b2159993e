"""Retrying the sink while it is unavailable: :class:`RetryPolicy` and :func:`durably`.

A sink action whose error the sink calls transient (:attr:`~monitor.engine.sink.FaultKind.
TRANSIENT`: connection lost, server restarting, deadlock, busy) is retried with exponential
backoff until the policy's deadline; then, or when a stop is requested meanwhile, the worker
gives up with :class:`DatabaseUnavailableError`. Every other error goes through at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from monitor.engine.signals import StopFlag
from monitor.engine.sink import Fault, FaultKind
from monitor.errors import MonitorError

__all__ = ["DatabaseUnavailableError", "Durably", "RetryPolicy", "WorkerError", "durably", "short"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class WorkerError(MonitorError):
    """Base class of the errors the worker raises on purpose."""


class DatabaseUnavailableError(WorkerError):
    """The database could not be written (or read) before the retry deadline.

    The batch in hand was neither persisted nor committed to the source, so a restarted worker
    resumes exactly at the last durable batch.
    """


@dataclass(frozen=True)
class RetryPolicy:
    """How long the worker keeps retrying an unavailable database, and how often.

    Waits start at ``backoff_s`` and double up to ``max_backoff_s``; after ``deadline_s`` of
    failures the worker gives up with :class:`DatabaseUnavailableError`. Keep ``deadline_s``
    below the Kafka consumer's ``max_poll_interval_ms`` (300 s by default), or the group evicts
    the worker while it waits.

    Examples
    --------
    >>> list(RetryPolicy(deadline_s=10, backoff_s=0.5, max_backoff_s=2).delays(6))
    [0.5, 1.0, 2.0, 2.0, 2.0, 2.0]
    >>> RetryPolicy(deadline_s=0)
    Traceback (most recent call last):
    ...
    ValueError: deadline_s must be > 0, got 0
    """

    deadline_s: float = 60.0
    backoff_s: float = 0.5
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("deadline_s", "backoff_s", "max_backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def delays(self, n: int) -> Iterator[float]:
        """The first ``n`` waits between attempts, in seconds."""
        wait = self.backoff_s
        for _ in range(n):
            yield float(min(wait, self.max_backoff_s))
            wait *= 2


class Durably(Protocol):
    """A sink action run with retries (the worker's :func:`durably` under its policy)."""

    def __call__(self, action: Callable[[], T], what: str) -> T: ...


def durably(
    action: Callable[[], T],
    what: str,
    policy: RetryPolicy,
    fault: Callable[[BaseException], Fault | None],
    stop: StopFlag,
) -> T:
    """Run a sink action, retrying the failures ``fault`` calls transient with backoff until
    the deadline (or a stop); ``what`` names the action in the log and the error."""
    deadline = time.monotonic() + policy.deadline_s
    for attempt, wait in enumerate(policy.delays(1_000_000), start=1):
        try:
            return action()
        except Exception as exc:
            found = fault(exc)
            if found is None or found.kind is not FaultKind.TRANSIENT:
                raise
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0 or stop:
                raise _gave_up(what, attempt, found, policy, stop) from exc
            log.warning("%s failed (attempt %d: %s); retrying in %.1f s",
                        what, attempt, short(exc), wait)
            stop.wait(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def _gave_up(
    what: str, attempts: int, fault: Fault, policy: RetryPolicy, stop: StopFlag
) -> DatabaseUnavailableError:
    why = "a stop was requested" if stop else f"{policy.deadline_s:g} s passed"
    return DatabaseUnavailableError(
        f"{what} failed {attempts} times and {why}: {fault}; "
        "nothing was committed to the source, so a restarted worker resumes at the last "
        "stored batch"
    )


def short(exc: BaseException) -> str:
    """The error's type and the first line of its cause, for a log line or a dead letter's
    reason."""
    # SQLAlchemy's message embeds the statement and its parameters (a whole batch): keep the cause.
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:200] if lines else ''}"
