"""Kafka source on librdkafka (confluent-kafka's ``Consumer``), in a consumer group, committing by
hand: the same contract as :class:`connectors.KafkaSource`, with librdkafka's fetcher.

librdkafka fetches and decompresses in its own C threads, so the worker's thread only takes
ready records off a queue in batches (``consume(num_messages, timeout)``): the poll costs a few
microseconds per record instead of kafka-python's parsing on the calling thread
(docs/kafka.md, "Client"). Offsets are committed only through :meth:`RdKafkaSource.commit`
(``enable.auto.commit`` and ``enable.auto.offset.store`` are always off); on assignment the worker
seeks to the offsets stored in the database, which this source hands to librdkafka's
``assign`` (librdkafka cannot seek a partition before it is assigned).

confluent-kafka is imported when a source is built, so that ``connectors`` imports without it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from connectors.base import Record
from connectors.errors import (
    OffsetCommitError,
    SourceConfigError,
    SourceError,
    SourceUnavailableError,
)
from connectors.group import GroupSource, TopicPartition

__all__ = ["DEFAULT_RDKAFKA_CONFIG", "RdKafkaSource"]

log = logging.getLogger(__name__)

#: librdkafka properties every ``RdKafkaSource`` consumer gets unless overridden (the two
#: ``enable.*`` cannot be). ``fetch.wait.max.ms``: librdkafka fetches every partition whose
#: prefetch queue is below ``queued.min.messages``, so a busy partition is not held back by
#: empty ones as in kafka-python; 20 ms is kept for the same idle cost (50 empty fetches a
#: second per broker) and the same latency at the tail of a topic. ``allow.auto.create.topics``:
#: as kafka-python does, a subscription to a topic that does not exist yet asks the broker to
#: create it (which a broker does only with ``auto.create.topics.enable``); librdkafka's default
#: waits for someone else to create it.
DEFAULT_RDKAFKA_CONFIG: Mapping[str, Any] = MappingProxyType(
    {
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 20,
        "allow.auto.create.topics": True,
    }
)

#: Seconds between two WARNING lines of one kind of client error (a broker that is gone is
#: reported at every reconnect attempt).
_ERROR_LOG_EVERY_S = 10.0

_FIXED = {"enable.auto.commit": False, "enable.auto.offset.store": False}


class RdKafkaSource(GroupSource):
    """Consume topics as a member of a consumer group with librdkafka, with manual commits.

    Parameters
    ----------
    bootstrap_servers, topics, group_id, start_timeout_s, retry_backoff_s, max_backoff_s, \
    max_poll_errors
        As for :class:`connectors.KafkaSource`; each start-up attempt asks for the subscribed
        topics' metadata.
    **config
        librdkafka properties (``session.timeout.ms``, ``security.protocol``,
        ``sasl.mechanism``, ...) over :data:`DEFAULT_RDKAFKA_CONFIG`; a Python keyword cannot
        hold a dot, so pass them as ``**{"session.timeout.ms": 6000}`` (a source URL's query
        carries them as they are).

    Notes
    -----
    ``on_revoke`` callbacks run inside ``poll`` before partitions are taken away (also when
    librdkafka reports them lost, and at ``close``), ``on_assign`` callbacks after partitions
    arrive, before any of their records is fetched; ``seek`` inside an ``on_assign`` callback
    sets where reading starts. An exception raised by a callback is re-raised from the ``poll``
    during which it happened, after rewinding so that the records of that poll are not lost.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topics: str | Sequence[str],
        group_id: str,
        start_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.5,
        max_backoff_s: float = 5.0,
        max_poll_errors: int = 5,
        **config: Any,
    ) -> None:
        super().__init__(bootstrap_servers, topics, group_id, start_timeout_s, retry_backoff_s,
                         max_backoff_s, max_poll_errors)
        self.config = config
        for name, fixed in _FIXED.items():
            if name in config and _truthy(config[name]) != fixed:
                raise SourceConfigError(
                    f"{name} must stay false: offsets are committed after persistence"
                )
        self._kafka = _confluent_kafka()
        self._owned: set[TopicPartition] = set()
        # Offsets given to seek() inside an on_assign callback: handed to assign() after it.
        self._assigning: dict[TopicPartition, int] | None = None
        self._fatal: Any = None
        self._error_logged: dict[int, float] = {}  # error code → when last logged at WARNING
        self._consumer = self._new_consumer()
        try:
            self._connect(self._metadata)
        except SourceUnavailableError:
            self._consumer.close()
            raise
        self._consumer.subscribe(self._topics, on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_revoke)
        log.info("group %r subscribed to %s at %s (librdkafka %s)", group_id, self._topics,
                 self._servers, self._kafka.libversion()[0])

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one;
        rebalance callbacks run here."""
        self._check_open()
        messages = self._fetch(max(1, max_records), timeout_s)
        records = [_record(m) for m in messages if m.error() is None]
        if len(records) < len(messages):
            self._message_errors([m for m in messages if m.error() is not None])
        if self._callback_error is not None:
            self._rewind(records)
            error, self._callback_error = self._callback_error, None
            raise error
        self._note_records(records)
        return records

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit next-offset-to-read per partition to the group, synchronously."""
        self._check_open()
        if not offsets:
            return
        self._ledger.check(offsets)
        self._check_assigned(offsets, "commit")
        payload = [self._kafka.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            answer = self._consumer.commit(offsets=payload, asynchronous=False)
        except self._kafka.KafkaException as exc:
            raise OffsetCommitError(_commit_refusal(self.group_id, offsets, exc)) from exc
        failed = [tp for tp in answer or [] if tp.error is not None]
        if failed:
            raise OffsetCommitError(_commit_refusal(self.group_id, offsets, failed[0].error))
        self._ledger.record(offsets)
        log.debug("committed %s", dict(offsets))

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Read each (assigned) partition from the given offset at the next ``poll``."""
        self._check_open()
        self._check_assigned(offsets, "seek")
        self._check_seekable(offsets)
        for (topic, partition), offset in offsets.items():
            if self._assigning is not None:
                self._assigning[(topic, partition)] = offset
            else:
                self._seek_one(topic, partition, offset)
            self._expected[(topic, partition)] = offset
        self._ledger.rewind(offsets)
        log.info("seek %s", dict(offsets))

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    def lag(self, timeout_s: float = 2.0) -> dict[TopicPartition, int]:
        """Records between the position and the end of each assigned partition.

        Read-only: asks the broker for the partitions' end offsets (never librdkafka's cached
        ones) and compares them with the position of the records handed out; nothing is
        fetched, moved or committed. Call it from the thread that polls, at most every few
        seconds.

        Raises
        ------
        SourceError
            No broker answered within ``timeout_s`` (the broker is unreachable).
        """
        self._check_open()
        out: dict[TopicPartition, int] = {}
        for tp in sorted(self._owned):
            try:
                low, high = self._consumer.get_watermark_offsets(
                    self._kafka.TopicPartition(*tp), timeout=timeout_s, cached=False)
                position = self._position(tp, low, timeout_s)
            except self._kafka.KafkaException as exc:
                raise SourceError(f"cannot read the end offsets of {self.name}: {exc}") from exc
            out[tp] = max(0, high - position)
        return out

    # -- start-up -------------------------------------------------------------------------------

    def _new_consumer(self) -> Any:
        config = {
            **DEFAULT_RDKAFKA_CONFIG,
            **self.config,
            **_FIXED,
            "bootstrap.servers": ",".join(self._servers),
            "group.id": self.group_id,
            "logger": logging.getLogger("rdkafka"),
            "error_cb": self._error,
        }
        try:
            return self._kafka.Consumer(config)
        except (self._kafka.KafkaException, ValueError, TypeError) as exc:
            raise SourceConfigError(
                f"invalid librdkafka consumer property: {exc} (give librdkafka names, e.g. "
                "session.timeout.ms, https://github.com/confluentinc/librdkafka/blob/master/"
                "CONFIGURATION.md)"
            ) from exc

    def _metadata(self, remaining_s: float) -> Any:
        """The subscribed topics' metadata, or None if no broker answered within
        ``remaining_s`` (at most 1 s: librdkafka connects in the background, the answer proves
        it did). Asking for a topic by name is what has a broker create a missing one
        (``allow.auto.create.topics``); the subscription alone would wait for the next metadata
        refresh (``topic.metadata.refresh.interval.ms``, 5 min) to see it appear."""
        timeout = max(0.1, min(remaining_s, 1.0))
        try:
            return [self._consumer.list_topics(topic=topic, timeout=timeout)
                    for topic in self._topics]
        except self._kafka.KafkaException:
            return None

    # -- polling --------------------------------------------------------------------------------

    def _fetch(self, max_records: int, timeout_s: float) -> list[Any]:
        """What is queued now, or else whatever arrives first within ``timeout_s`` with what
        is queued by then (librdkafka's own batch call would wait for all of ``max_records``)."""
        try:
            messages = self._consumer.consume(max_records, 0)
            if not messages and timeout_s > 0:
                messages = self._consumer.consume(1, timeout_s)
                if messages and max_records > 1:
                    messages += self._consumer.consume(max_records - 1, 0)
        except self._kafka.KafkaException as exc:
            self._poll_failed(exc, timeout_s)
            return []
        if self._fatal is not None:
            raise SourceError(f"the Kafka consumer of {self.name} failed for good: "
                              f"{self._fatal}; restart the worker")
        self._poll_errors = 0
        return messages

    def _message_errors(self, messages: list[Any]) -> None:
        for message in messages:
            error = message.error()
            if error.fatal():
                raise SourceError(f"the Kafka consumer of {self.name} failed for good: {error}")
            if error.code() != self._kafka.KafkaError._PARTITION_EOF:
                log.warning("%s: %s", self.name, error)

    def _error(self, error: Any) -> None:
        """librdkafka's error callback (inside ``consume``): broker trouble is retried by
        librdkafka itself and only logged, each kind at most every ``_ERROR_LOG_EVERY_S`` at
        WARNING (librdkafka's own lines go to the ``rdkafka`` logger); a fatal error ends the
        next ``poll``."""
        if error.fatal():
            self._fatal = error
        now = time.monotonic()
        quiet = now - self._error_logged.get(error.code(), -math.inf) < _ERROR_LOG_EVERY_S
        if not quiet:
            self._error_logged[error.code()] = now
        log.log(logging.DEBUG if quiet else logging.WARNING, "Kafka client of %s: %s",
                self.name, error)

    def _rewind(self, records: list[Record]) -> None:
        first: dict[TopicPartition, int] = {}
        for r in records:
            first.setdefault((r.topic, r.partition), r.offset)
        for (topic, partition), offset in first.items():
            if (topic, partition) in self._owned:
                self._seek_one(topic, partition, offset)
                log.debug("rewound %s[%d] to %d", topic, partition, offset)

    def _seek_one(self, topic: str, partition: int, offset: int) -> None:
        try:
            self._consumer.seek(self._kafka.TopicPartition(topic, partition, offset))
        except self._kafka.KafkaException as exc:
            raise SourceError(f"cannot seek {topic}[{partition}] to {offset}: {exc}") from exc

    def _position(self, tp: TopicPartition, low: int, timeout_s: float) -> int:
        """Next offset this source hands out: known once it has read or sought the partition,
        else the committed offset, else the log start (``auto.offset.reset`` earliest)."""
        if tp in self._expected:
            return self._expected[tp]
        committed = self._consumer.committed([self._kafka.TopicPartition(*tp)],
                                             timeout=timeout_s)[0].offset
        return committed if committed >= 0 else low

    # -- rebalances (librdkafka calls these inside consume) ------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        gained = {(tp.topic, tp.partition) for tp in partitions}
        self._owned |= gained
        self._assigning = {}
        try:
            self._assigned(gained)
            start = self._assigning
        finally:
            self._assigning = None
        consumer.assign([self._kafka.TopicPartition(tp.topic, tp.partition, start.get(
            (tp.topic, tp.partition), self._kafka.OFFSET_STORED)) for tp in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        lost = {(tp.topic, tp.partition) for tp in partitions} & self._owned
        try:
            self._revoked(lost)  # (at close the revoke callbacks already ran: nothing is left)
        finally:
            self._owned -= lost
            consumer.unassign()

    def _release(self) -> None:
        self._owned.clear()  # the revoke callbacks ran: librdkafka's revoke at close is the last
        self._consumer.close()


def _confluent_kafka() -> Any:
    """confluent-kafka, imported on first use: ``connectors`` imports without it."""
    try:
        import confluent_kafka
    except ImportError as exc:
        raise SourceConfigError(
            "the confluent Kafka client needs confluent-kafka where the worker runs (the kafka "
            "extra): pip install 'conformal-monitor[kafka]', or read with kafka-python "
            "(?client=kafka-python, MONITOR_KAFKA_CLIENT=kafka-python)"
        ) from exc
    return confluent_kafka


def _record(m: Any) -> Record:
    kind, ts = m.timestamp()
    value = m.value()
    return Record(m.topic(), m.partition(), m.offset(), m.key(),
                  value if value is not None else b"",  # a tombstone: the pipeline dead-letters it
                  ts if kind != 0 and ts >= 0 else None)  # 0: TIMESTAMP_NOT_AVAILABLE


def _commit_refusal(group: str, offsets: Mapping[TopicPartition, int], error: Any) -> str:
    return (f"group {group!r} refused the commit of {dict(offsets)} ({error}): the group may "
            "have rebalanced and these partitions belong to another member now; their results "
            "are in the database, which the new owner resumes from")


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"
