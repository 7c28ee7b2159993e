"""Fixtures of the reliability tests: fresh PostgreSQL databases on the shared server, private
PostgreSQL clusters that a test may stop, and mock Kafka clusters (in process, or in a process of
their own that a test may freeze or kill)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from bench.pgcluster import PrivatePostgres
from tests.support.broker import BrokerProcess
from tests.support.databases import postgres_database
from tests.support.kafka import kafka_broker, kafka_broker_module  # noqa: F401
from tests.support.streams import Example, Snapshot, reference_run
from tests.support.workloads import build_workload


@pytest.fixture(scope="session")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Example:
    """Four real-data streams (~3 000 events: predictions, delayed labels, shifts, alarms)."""
    return build_workload(tmp_path_factory.mktemp("workload"), 3000, n_streams=4, seed=5)


@pytest.fixture(scope="session")
def workload_reference(workload: Example, postgres_admin: Engine) -> Snapshot:
    """What one uninterrupted worker stores for ``workload`` (the file run, before the flush)."""
    with postgres_database(postgres_admin) as url:
        reference = reference_run(workload, url, batch_size=100)
    assert reference.alarms, "the workload must raise alarms for comparisons to mean something"
    return reference


@pytest.fixture
def example(workload: Example) -> Example:
    """The shared workload under the name the integration helpers use (a module may override)."""
    return workload


@pytest.fixture
def reference(workload_reference: Snapshot) -> Snapshot:
    """The workload's uninterrupted results under the integration helpers' name."""
    return workload_reference


@pytest.fixture
def pg_url(postgres_admin: Engine) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the shared server."""
    with postgres_database(postgres_admin) as url:
        yield url


@pytest.fixture
def ref_url(postgres_admin: Engine) -> Iterator[str]:
    """A second fresh database, for a reference run."""
    with postgres_database(postgres_admin) as url:
        yield url


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running PostgreSQL cluster of this test alone (stop and start it at will). Its folder
    is outside pytest's (which the ``postgres`` system user cannot enter when tests run as
    root)."""
    cluster = PrivatePostgres(Path(tempfile.mkdtemp(prefix="monitor-pgcluster-")))
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A mock Kafka cluster in a process of its own (SIGSTOP/SIGCONT/SIGKILL it at will)."""
    broker = BrokerProcess.start(tmp_path / "broker.log")
    try:
        yield broker
    finally:
        broker.stop()
