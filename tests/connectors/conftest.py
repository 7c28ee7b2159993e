"""Fixtures of the connector tests: the mock Kafka cluster from connectors/mock_kafka.py."""

from tests.support.kafka import kafka_broker, kafka_broker_module, kafka_client  # noqa: F401
