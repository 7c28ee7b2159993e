"""Sources of events: a Kafka topic (read with kafka-python or librdkafka), a JSONL file, or an
in-memory list (tests).

Every source follows :class:`Source`: ``poll`` batches of :class:`Record`, ``commit`` offsets
(last processed + 1) after the results are persisted, ``seek`` to stored offsets when
partitions are assigned. Errors derive from :class:`SourceError` (see :mod:`connectors.errors`).

:class:`KafkaSource` needs the ``kafka`` extra (kafka-python): it is imported on first use, so
the file and memory sources work without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from connectors.memory import MemorySource
from connectors.rdkafka import DEFAULT_RDKAFKA_CONFIG, RdKafkaSource
from connectors.url import kafka_module, kafka_url_parts, open_source

if TYPE_CHECKING:
    from connectors.kafka import DEFAULT_CONSUMER_OPTIONS, KafkaSource

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

#: Names of :mod:`connectors.kafka`, imported on first access (kafka-python is an extra).
_KAFKA_NAMES = {"DEFAULT_CONSUMER_OPTIONS", "KafkaSource"}


def __getattr__(name: str) -> Any:
    if name not in _KAFKA_NAMES:
        raise AttributeError(f"module 'connectors' has no attribute {name!r}")
    value = getattr(kafka_module(f"connectors.{name}"), name)
    globals()[name] = value  # later lookups skip this function
    return value
