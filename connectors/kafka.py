"""Kafka source on kafka-python's ``KafkaConsumer``, in a consumer group, committing by hand.

Offsets are committed only through :meth:`KafkaSource.commit`, which the worker calls after the
batch's results and offsets are in the database (``enable_auto_commit`` is always off). On
assignment the worker seeks to the offsets stored in the database, so the committed Kafka offsets
only matter for a group that has no database state yet (it then starts at ``earliest``).

Producers should key records by stream name: every event of a stream then lands in one
partition, so exactly one worker of the group owns the stream's detector state, in order.
See ``docs/kafka.md`` for producer settings (partitioner, compression, batch sizes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import (
    CommitFailedError,
    KafkaConfigurationError,
    KafkaError,
    NoBrokersAvailable,
    UnsupportedCodecError,
)
from kafka.structs import OffsetAndMetadata

from connectors.base import Record, TopicPartition
from connectors.errors import (
    OffsetCommitError,
    SourceConfigError,
    SourceError,
    UnsupportedCompressionError,
)
from connectors.group import GroupSource

__all__ = ["DEFAULT_CONSUMER_OPTIONS", "KafkaSource"]

log = logging.getLogger(__name__)

#: Options every ``KafkaSource`` consumer gets unless overridden (``enable_auto_commit`` cannot
#: be). ``receive_message_max_bytes``: kafka-python 2.3 rejects any response frame above it
#: (default 1 000 000 bytes) and closes the connection, but a Fetch response holds up to
#: ``fetch_max_bytes`` (50 MiB) of record batches, and one batch from a librdkafka or Java
#: producer can be 1 MB by itself; kafka-python's own parser limit (100 MB) is used instead.
#: The fetch sizes need no change: a first batch larger than ``max_partition_fetch_bytes`` is
#: still returned whole. ``fetch_max_wait_ms``: kafka-python does not fetch a partition again
#: while records of it are buffered, so when one partition is busy (a single busy model) and the
#: others are empty, the next fetch asks only for the empty ones and the broker holds it for this
#: long (500 ms by default) while the busy partition waits: one stall per ~1 MB read, which capped
#: a one-stream topic at about 4 000 records/s with the default. 20 ms bounds the stall and costs
#: at most 50 empty fetches a second per broker when idle. See docs/kafka.md.
DEFAULT_CONSUMER_OPTIONS: Mapping[str, Any] = MappingProxyType(
    {
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "receive_message_max_bytes": 100_000_000,
        "fetch_max_wait_ms": 20,
    }
)

_CODEC_HELP = (
    "install the codec libraries where the worker runs: pip install lz4 zstandard python-snappy "
    "(kafka-python[lz4,zstd,snappy]), or have producers use compression 'gzip' or 'none'"
)


class KafkaSource(GroupSource):
    """Consume topics as a member of a consumer group, with manual commits.

    Parameters
    ----------
    bootstrap_servers
        ``"host:port"``, a comma-separated list, or a sequence of them.
    topics
        One topic or several.
    group_id
        Consumer group; workers in one group share the topics' partitions.
    start_timeout_s
        How long to keep retrying (with exponential backoff) when no broker answers at start
        before raising :class:`~connectors.errors.SourceUnavailableError`.
    retry_backoff_s
        First wait between start attempts; doubled after each failure, at most ``max_backoff_s``.
    max_backoff_s
        Longest wait between start attempts.
    commit_timeout_s
        Longest wait for the broker to acknowledge a commit.
    max_poll_errors
        Consecutive failed polls tolerated (each logged, then retried at the next ``poll`` after
        a backoff) before :class:`~connectors.errors.SourceError` is raised. Group coordination
        can fail transiently during a rebalance; a persistent failure still surfaces.
    **consumer_options
        Passed to ``kafka.KafkaConsumer`` over :data:`DEFAULT_CONSUMER_OPTIONS`
        (e.g. ``session_timeout_ms``, ``security_protocol``, ``max_partition_fetch_bytes``).

    Notes
    -----
    ``on_revoke`` callbacks run inside ``poll`` before partitions are taken away (and at
    ``close``), ``on_assign`` callbacks after partitions arrive; ``seek`` inside an ``on_assign``
    callback sets where reading resumes. kafka-python swallows exceptions raised by rebalance
    callbacks; this class re-raises the first one from the ``poll`` during which it happened,
    after rewinding so that the records of that poll are not lost.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topics: str | Sequence[str],
        group_id: str,
        start_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.5,
        max_backoff_s: float = 5.0,
        commit_timeout_s: float = 30.0,
        max_poll_errors: int = 5,
        **consumer_options: Any,
    ) -> None:
        super().__init__(bootstrap_servers, topics, group_id, start_timeout_s, retry_backoff_s,
                         max_backoff_s, max_poll_errors)
        self.commit_timeout_s = commit_timeout_s
        self.consumer_options = consumer_options
        _validate(self)
        self._consumer = self._connect(self._new_consumer)
        self._consumer.subscribe(topics=self._topics, listener=_Listener(self))
        log.info("group %r subscribed to %s at %s", group_id, self._topics, self._servers)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s``; rebalance callbacks run
        here."""
        self._check_open()
        batches = self._fetch(max_records, timeout_s)
        if self._callback_error is not None:
            self._rewind(batches)
            error, self._callback_error = self._callback_error, None
            raise error
        records = [_record(r) for batch in batches.values() for r in batch]
        self._note_positions(batches)
        return records

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit next-offset-to-read per partition to the group, synchronously."""
        self._check_open()
        if not offsets:
            return
        self._ledger.check(offsets)
        self._check_assigned(offsets, "commit")
        payload = {
            KafkaTopicPartition(t, p): _offset_and_metadata(offset)
            for (t, p), offset in offsets.items()
        }
        try:
            self._consumer.commit(offsets=payload, timeout_ms=int(self.commit_timeout_s * 1000))
        except CommitFailedError as exc:
            raise OffsetCommitError(
                f"group {self.group_id!r} refused the commit of {dict(offsets)}: the group "
                "rebalanced and these partitions may belong to another member now; their "
                "results are in the database, which the new owner resumes from"
            ) from exc
        except KafkaError as exc:
            raise OffsetCommitError(f"commit of {dict(offsets)} failed: {exc}") from exc
        self._ledger.record(offsets)
        log.debug("committed %s", dict(offsets))

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Read each (assigned) partition from the given offset at the next ``poll``."""
        self._check_open()
        self._check_assigned(offsets, "seek")
        self._check_seekable(offsets)
        for (topic, partition), offset in offsets.items():
            self._consumer.seek(KafkaTopicPartition(topic, partition), offset)
            self._expected[(topic, partition)] = offset
        self._ledger.rewind(offsets)
        log.info("seek %s", dict(offsets))

    def assignment(self) -> set[TopicPartition]:
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def lag(self, timeout_s: float = 2.0) -> dict[TopicPartition, int]:
        """Records between the position and the end of each assigned partition.

        Read-only: asks the broker for the partitions' end offsets and compares them with the
        consumer's positions; nothing is fetched, moved or committed. Call it from the thread
        that polls (the consumer is not thread-safe), at most every few seconds.

        Raises
        ------
        SourceError
            No broker answered within ``timeout_s`` (the broker is unreachable).
        """
        self._check_open()
        partitions = list(self._consumer.assignment())
        if not partitions:
            return {}
        timeout_ms = max(1, int(timeout_s * 1000))
        try:
            fetcher = getattr(self._consumer, "_fetcher", None)
            if fetcher is not None and hasattr(fetcher, "end_offsets"):
                ends = fetcher.end_offsets(partitions, timeout_ms)  # bounded wait
            else:  # pragma: no cover - other kafka-python layouts
                ends = self._consumer.end_offsets(partitions)
            out: dict[TopicPartition, int] = {}
            for tp in partitions:
                position = self._consumer.position(tp, timeout_ms=timeout_ms)
                if position is not None and ends.get(tp) is not None:
                    out[(tp.topic, tp.partition)] = max(0, int(ends[tp]) - int(position))
        except KafkaError as exc:
            raise SourceError(f"cannot read the end offsets of {self.name}: {exc!r}") from exc
        return out

    def _release(self) -> None:
        self._consumer.close(autocommit=False)

    # -- start-up -------------------------------------------------------------------------------

    def _new_consumer(self, remaining_s: float) -> KafkaConsumer | None:
        """A consumer connected to a broker, or None if none answered in ``remaining_s``."""
        options = {**DEFAULT_CONSUMER_OPTIONS, **self.consumer_options}
        # Bound kafka-python's broker probe by the time left, so the deadline holds.
        probe_ms = int(1000 * min(max(remaining_s, 0.1), 2.0))
        options.setdefault("api_version_auto_timeout_ms", probe_ms)
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self._servers, group_id=self.group_id, **options
            )
        except NoBrokersAvailable:
            return None
        except KafkaConfigurationError as exc:
            raise SourceConfigError(f"invalid Kafka consumer option: {exc}") from exc
        # With an explicit api_version kafka-python skips its broker probe and never connects in
        # the constructor: wait for one connection here, so that start_timeout_s holds anyway.
        if "api_version" in self.consumer_options and not _await_connection(consumer, remaining_s):
            consumer.close()
            return None
        return consumer

    # -- polling --------------------------------------------------------------------------------

    def _fetch(
        self, max_records: int, timeout_s: float
    ) -> dict[KafkaTopicPartition, list[ConsumerRecord]]:
        try:
            batches = self._consumer.poll(
                timeout_ms=int(timeout_s * 1000), max_records=max(1, max_records)
            )
        except UnsupportedCodecError as exc:
            raise UnsupportedCompressionError(
                f"records of {self.name} are compressed with a codec kafka-python cannot decode "
                f"here ({exc}): {_CODEC_HELP}"
            ) from exc
        except KafkaError as exc:
            self._poll_failed(exc, timeout_s)
            return {}
        self._poll_errors = 0
        return batches

    def _rewind(self, batches: Mapping[KafkaTopicPartition, list[ConsumerRecord]]) -> None:
        owned = self._consumer.assignment()
        for tp, batch in batches.items():
            if batch and tp in owned:
                self._consumer.seek(tp, batch[0].offset)
                log.debug("rewound %s[%d] to %d", tp.topic, tp.partition, batch[0].offset)

    def _note_positions(self, batches: Mapping[KafkaTopicPartition, list[ConsumerRecord]]) -> None:
        for tp, batch in batches.items():
            if not batch:
                continue
            self._note_run((tp.topic, tp.partition), batch[0].offset, batch[-1].offset)


class _Listener(ConsumerRebalanceListener):
    """Forwards kafka-python's rebalance events to the source's callbacks."""

    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    def on_partitions_revoked(self, revoked: set[KafkaTopicPartition]) -> None:
        self._source._revoked({(tp.topic, tp.partition) for tp in revoked})

    def on_partitions_assigned(self, assigned: set[KafkaTopicPartition]) -> None:
        self._source._assigned({(tp.topic, tp.partition) for tp in assigned})


def _await_connection(consumer: KafkaConsumer, timeout_s: float) -> bool:
    """True once the consumer's client holds one connected broker connection, within timeout."""
    client = consumer._client
    deadline = time.monotonic() + max(timeout_s, 0.1)
    while time.monotonic() < deadline:
        node = client.least_loaded_node()
        if node is not None:
            client.maybe_connect(node)
        client.poll(timeout_ms=100)
        if any(conn.connected() for conn in list(client._conns.values())):
            return True
    return False


def _record(r: ConsumerRecord) -> Record:
    ts = r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None
    value = r.value if r.value is not None else b""  # a tombstone: the pipeline dead-letters it
    return Record(r.topic, r.partition, r.offset, r.key, value, ts)


def _offset_and_metadata(offset: int) -> OffsetAndMetadata:
    # kafka-python >= 2.1 added leader_epoch (-1: unknown, the broker then skips fencing checks).
    if "leader_epoch" in OffsetAndMetadata._fields:
        return OffsetAndMetadata(offset, "", -1)
    return OffsetAndMetadata(offset, "")  # pragma: no cover (kafka-python < 2.1)


def _validate(source: KafkaSource) -> None:
    if source.consumer_options.get("enable_auto_commit"):
        raise SourceConfigError(
            "enable_auto_commit must stay False: offsets are committed after persistence"
        )
    if source.commit_timeout_s <= 0:
        raise SourceConfigError(f"commit_timeout_s must be > 0, got {source.commit_timeout_s}")
