"""Pytest fixtures of the librdkafka mock cluster (``connectors.mock_kafka``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connectors.mock_kafka import mock_kafka_cluster


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
