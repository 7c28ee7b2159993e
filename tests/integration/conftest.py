"""Fixtures of the integration tests: a Kafka wire-protocol broker on loopback (librdkafka's mock
cluster, connectors/mock_kafka.py), fresh PostgreSQL databases, the example streams and the
reference results of processing them from a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.support.databases import postgres_database
from tests.support.kafka import kafka_broker, kafka_broker_module  # noqa: F401
from tests.support.streams import Example, Snapshot, build_examples, reference_run

#: data/ holds fixtures and the script that made them with the previous release (not tests).
collect_ignore_glob = ["data/*"]


@pytest.fixture
def pg_url(postgres_admin: Engine) -> Iterator[str]:
    """A fresh, empty PostgreSQL database (migrated by the worker that opens it)."""
    with postgres_database(postgres_admin) as url:
        yield url


@pytest.fixture(scope="session")
def example(tmp_path_factory: pytest.TempPathFactory) -> Example:
    """Three streams on three partitions, with delayed labels and poison records."""
    return build_examples(Path(tmp_path_factory.mktemp("streams")))


@pytest.fixture(scope="session")
def reference(example: Example, postgres_admin: Engine) -> Snapshot:
    """What a single uninterrupted run over the events file stores in PostgreSQL."""
    with postgres_database(postgres_admin) as url:
        return reference_run(example, url)


@pytest.fixture(scope="session")
def named_example(tmp_path_factory: pytest.TempPathFactory) -> Example:
    """The example streams with object features (``FEATURE_NAMES``: orders JSONB does not keep)."""
    return build_examples(Path(tmp_path_factory.mktemp("named")), named=True)


@pytest.fixture(scope="session")
def named_reference(named_example: Example, postgres_admin: Engine) -> Snapshot:
    """One uninterrupted run over the named example's events file, in PostgreSQL."""
    with postgres_database(postgres_admin) as url:
        return reference_run(named_example, url)
