"""Pytest fixtures of the librdkafka mock cluster (``connectors.mock_kafka``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from connectors import KafkaSource, RdKafkaSource
from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS, MOCK_RDKAFKA_CONFIG, mock_kafka_cluster

#: The Kafka clients a source can read with (``?client=`` of a source URL), for parametrised
#: tests, and each one's source class and options for the mock cluster.
CLIENTS = ("kafka-python", "confluent")
_MOCK_SOURCES: dict[str, tuple[type[KafkaSource] | type[RdKafkaSource], Any]] = {
    "kafka-python": (KafkaSource, MOCK_CONSUMER_OPTIONS),
    "confluent": (RdKafkaSource, MOCK_RDKAFKA_CONFIG),
}

#: Mock-broker options a source URL can carry, per client (connectors/mock_kafka.py explains
#: them; the patient assignor of kafka-python needs code: see tests/integration/worker_main.py).
MOCK_URL_OPTIONS_BY_CLIENT = {
    "kafka-python": "session_timeout_ms=3000&heartbeat_interval_ms=500&api_version=2.3",
    "confluent": "client=confluent&session.timeout.ms=3000&heartbeat.interval.ms=500",
}


def mock_source(
    client: str, bootstrap: str, topics: str | Sequence[str], group: str, **options: Any
) -> KafkaSource | RdKafkaSource:
    """A Kafka source of ``client`` on the mock cluster, with the mock's options."""
    kind, mock_options = _MOCK_SOURCES[client]
    return kind(bootstrap, topics, group, **{**mock_options, **options})


@pytest.fixture(params=CLIENTS)
def kafka_client(request: pytest.FixtureRequest) -> str:
    """Each Kafka client in turn: ``kafka-python``, then ``confluent`` (librdkafka)."""
    return str(request.param)


@pytest.fixture
def kafka_broker() -> Iterator[str]:
    """A fresh mock Kafka cluster per test; yields ``"127.0.0.1:PORT"``."""
    with mock_kafka_cluster() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def kafka_broker_module() -> Iterator[str]:
    """One mock Kafka cluster shared by a test module (use distinct topics and groups)."""
    with mock_kafka_cluster() as bootstrap:
        yield bootstrap
