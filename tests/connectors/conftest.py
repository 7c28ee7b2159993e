"""Fixtures of the connector tests: the mock Kafka cluster from tests/kafka_harness.py."""

from tests.kafka_harness import kafka_broker, kafka_broker_module  # noqa: F401
