"""What both Kafka sources share, whichever client reads the topic: consumer-group membership with
manual commits, the start-up retries, rebalance callbacks that re-raise from ``poll``, and the
accounting of offsets that were never delivered.

:class:`connectors.KafkaSource` (kafka-python) and :class:`connectors.RdKafkaSource` (librdkafka)
subclass :class:`GroupSource` and implement the client calls: ``poll``, ``commit``, ``seek``,
``assignment``, ``lag``, and ``_release`` (close the client).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from connectors.base import (
    ClosesOnExit,
    OffsetLedger,
    PartitionsCallback,
    RebalanceCallbacks,
    Record,
    TopicPartition,
)
from connectors.errors import (
    PartitionNotAssignedError,
    SourceConfigError,
    SourceError,
    SourceUnavailableError,
)

__all__ = ["GroupSource", "TopicPartition"]

log = logging.getLogger("connectors.kafka")

T = TypeVar("T")


class GroupSource(ClosesOnExit):
    """A Kafka source in a consumer group: the parts that do not depend on the client library.

    The parameters are those of :class:`connectors.KafkaSource` (but ``commit_timeout_s``, which
    depends on the client); a subclass builds its client
    with :meth:`_connect` and forwards the client's rebalance events to :meth:`_assigned` and
    :meth:`_revoked`.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topics: str | Sequence[str],
        group_id: str,
        start_timeout_s: float,
        retry_backoff_s: float,
        max_backoff_s: float,
        max_poll_errors: int,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.group_id = group_id
        self.start_timeout_s = start_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_poll_errors = max_poll_errors
        self._servers = split_names(bootstrap_servers)
        self._topics = split_names(topics)
        self._validate()
        self._callbacks = RebalanceCallbacks()
        self._ledger = OffsetLedger()
        self._expected: dict[TopicPartition, int] = {}
        self._skipped = 0
        self._poll_errors = 0
        self._callback_error: Exception | None = None
        self._closed = False

    @property
    def name(self) -> str:
        return "kafka:" + ",".join(self._topics)

    @property
    def exhausted(self) -> bool:
        """Always False: a topic has no end."""
        return False

    @property
    def committed(self) -> dict[TopicPartition, int]:
        """Offsets this source committed (next offset to read, per partition)."""
        return self._ledger.committed

    @property
    def skipped_offsets(self) -> int:
        """Offsets jumped over while reading (retention, compaction or transaction markers)."""
        return self._skipped

    def assignment(self) -> set[TopicPartition]:
        raise NotImplementedError

    def on_assign(self, callback: PartitionsCallback) -> None:
        self._callbacks.on_assign(callback)

    def on_revoke(self, callback: PartitionsCallback) -> None:
        self._callbacks.on_revoke(callback)

    def close(self) -> None:
        """Fire ``on_revoke`` for the current assignment, then leave the group."""
        if self._closed:
            return
        try:
            self._callbacks.revoked(self.assignment())  # may still commit: close afterwards
        finally:
            self._closed = True
            self._release()
            log.info("left group %r", self.group_id)

    def _release(self) -> None:
        """Close the client (leave the group)."""
        raise NotImplementedError

    # -- start-up -------------------------------------------------------------------------------

    def _connect(self, attempt: Callable[[float], T | None]) -> T:
        """``attempt(seconds_left)`` until it returns something (None: no broker answered),
        with exponential backoff, for at most ``start_timeout_s``."""
        deadline = time.monotonic() + self.start_timeout_s
        backoff = self.retry_backoff_s
        tries = 1
        while True:
            connected = attempt(deadline - time.monotonic())
            if connected is not None:
                return connected
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SourceUnavailableError(
                    f"no Kafka broker answered at {','.join(self._servers)} within "
                    f"{self.start_timeout_s:g} s ({tries} attempts): check the address, "
                    "that the brokers are up and that this host can reach them"
                )
            wait = min(backoff, remaining)
            log.warning("no Kafka broker at %s (attempt %d); retrying in %.1f s",
                        ",".join(self._servers), tries, wait)
            time.sleep(wait)
            backoff = min(2 * backoff, self.max_backoff_s)
            tries += 1

    # -- polling --------------------------------------------------------------------------------

    def _poll_failed(self, exc: Exception, timeout_s: float) -> None:
        self._poll_errors += 1
        if self._poll_errors > self.max_poll_errors:
            raise SourceError(
                f"Kafka consumer of {self.name} failed {self._poll_errors} times in a row, "
                f"last with {exc!r}"
            ) from exc
        wait = min(self.retry_backoff_s * 2 ** (self._poll_errors - 1), self.max_backoff_s)
        log.warning("poll of %s failed (%r, %d in a row); retrying in %.1f s",
                    self.name, exc, self._poll_errors, min(wait, timeout_s))
        time.sleep(min(wait, timeout_s))

    def _note_run(self, tp: TopicPartition, first: int, last: int) -> None:
        """Records ``first..last`` of ``tp`` were handed out: report offsets jumped over."""
        expected = self._expected.get(tp)
        if expected is not None and first > expected:
            self._report_gap(tp, expected, first)
        self._expected[tp] = last + 1

    def _note_records(self, records: Iterable[Record]) -> None:
        """:meth:`_note_run` for each run of consecutive offsets of one partition."""
        tp: TopicPartition | None = None
        first = last = 0
        for r in records:
            if tp is None or r.offset != last + 1 or r.partition != tp[1] or r.topic != tp[0]:
                if tp is not None:
                    self._note_run(tp, first, last)
                tp, first = (r.topic, r.partition), r.offset
            last = r.offset
        if tp is not None:
            self._note_run(tp, first, last)

    def _report_gap(self, tp: TopicPartition, expected: int, got: int) -> None:
        self._skipped += got - expected
        # A single skipped offset is usually a transaction marker; more is worth a warning.
        level = logging.DEBUG if got - expected == 1 else logging.WARNING
        log.log(level, "%s[%d]: offsets %d..%d were not delivered (deleted by retention before "
                "they were read, compacted away, or transaction markers); continuing at %d",
                tp[0], tp[1], expected, got - 1, got)

    # -- rebalances -----------------------------------------------------------------------------

    def _revoked(self, partitions: set[TopicPartition]) -> None:
        if partitions:
            log.info("partitions revoked: %s", sorted(partitions))
        for tp in partitions:
            self._expected.pop(tp, None)
        self._run_callback(self._callbacks.revoked, partitions)

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        log.info("partitions assigned: %s", sorted(partitions))
        self._run_callback(self._callbacks.assigned, partitions)

    def _run_callback(
        self, fire: Callable[[Iterable[TopicPartition]], None], partitions: set[TopicPartition]
    ) -> None:
        try:
            fire(partitions)
        except Exception as exc:  # the client would log and drop it: keep it for poll()
            log.exception("rebalance callback failed for %s", sorted(partitions))
            if self._callback_error is None:
                self._callback_error = exc

    # -- checks ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SourceError(f"{self.name} is closed")

    def _check_assigned(self, offsets: Mapping[TopicPartition, int], action: str) -> None:
        missing = sorted(set(offsets) - self.assignment())
        if missing:
            raise PartitionNotAssignedError(
                f"cannot {action} {missing}: not assigned to this member of group "
                f"{self.group_id!r} (assigned: {sorted(self.assignment())})"
            )

    def _check_seekable(self, offsets: Mapping[TopicPartition, int]) -> None:
        for (topic, partition), offset in offsets.items():
            if offset < 0:
                raise SourceConfigError(f"cannot seek {topic}[{partition}] to {offset}")

    def _validate(self) -> None:
        if not self._servers:
            raise SourceConfigError("bootstrap_servers is empty: give 'host:port[,host:port]'")
        if not self._topics:
            raise SourceConfigError("no topic given: give one topic or a comma-separated list")
        if not self.group_id:
            raise SourceConfigError("group_id is empty: workers of one group share partitions")
        for field in ("start_timeout_s", "retry_backoff_s", "max_backoff_s"):
            if getattr(self, field) <= 0:
                raise SourceConfigError(f"{field} must be > 0, got {getattr(self, field)}")
        if self.max_poll_errors < 0:
            raise SourceConfigError(f"max_poll_errors must be >= 0, got {self.max_poll_errors}")


def split_names(names: str | Sequence[str]) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` → ``["a", "b"]`` (blank items dropped)."""
    items = names.split(",") if isinstance(names, str) else list(names)
    return [item.strip() for item in items if item.strip()]
