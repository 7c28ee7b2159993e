"""Sources of events: a Kafka topic (read with kafka-python or librdkafka), a JSONL file, or an
in-memory list (tests).

Every source follows :class:`Source`: ``poll`` batches of :class:`Record`, ``commit`` offsets
(last processed + 1) after the results are persisted, ``seek`` to stored offsets when
partitions are assigned. Errors derive from :class:`SourceError` (see :mod:`connectors.errors`).
"""

from connectors.base import PartitionsCallback, Record, Source, TopicPartition
from connectors.errors import (
    OffsetCommitError,
    OffsetRegressionError,
    PartitionNotAssignedError,
    SourceConfigError,
    SourceError,
    SourceUnavailableError,
    UnsupportedCompressionError,
)
from connectors.file import FileSource
from connectors.kafka import DEFAULT_CONSUMER_OPTIONS, KafkaSource
from connectors.memory import MemorySource
from connectors.rdkafka import DEFAULT_RDKAFKA_CONFIG, RdKafkaSource
from connectors.url import kafka_url_parts, open_source

__all__ = [
    "DEFAULT_CONSUMER_OPTIONS",
    "DEFAULT_RDKAFKA_CONFIG",
    "FileSource",
    "KafkaSource",
    "MemorySource",
    "OffsetCommitError",
    "OffsetRegressionError",
    "PartitionNotAssignedError",
    "PartitionsCallback",
    "RdKafkaSource",
    "Record",
    "Source",
    "SourceConfigError",
    "SourceError",
    "SourceUnavailableError",
    "TopicPartition",
    "UnsupportedCompressionError",
    "kafka_url_parts",
    "open_source",
]
