"""The PostgreSQL server goes away under ``monitor run`` and comes back.

The worker writes to a private cluster (pgcluster.py) that the test stops with ``pg_ctl stop``:
``fast`` (the server disconnects every client and shuts down cleanly) or ``immediate`` (a crash:
the restart replays the WAL). Meanwhile the worker must wait and retry with a growing backoff,
log it, commit no Kafka offset past what the database holds, and once the server is back carry
on by itself to results equal to an uninterrupted run's.

To compare the group's committed Kafka offsets with the database *during* the outage, the server
is first brought back reachable through its Unix socket only: the worker (TCP) still sees the
outage while the test reads ``source_offsets``. Then TCP is opened again.

tests/integration/test_worker_failures.py (streaming engineer) covers the in-process worker with
a database that refuses connections (``ALLOW_CONNECTIONS false``) and the retry deadline; here it
is the real command line against a server that really stops (the ``slow`` test: past the 60 s
default deadline, ``monitor run`` exits non-zero and a restart resumes exactly).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from bench.pgcluster import PrivatePostgres
from tests.support.processes import (
    MOCK_URL_OPTIONS,
    OffsetWatch,
    WorkerProcess,
    group_offsets,
    wait_until,
)
from tests.support.streams import Example, Snapshot, end_offsets, snapshot
from tests.support.workloads import differences, produce

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

TOPIC, GROUP = "events", "outage"
RETRY_LINE = re.compile(r"persisting a batch failed \(attempt (\d+): .*\); retrying in ([\d.]+) s")


def halves(example: Example) -> tuple[slice, slice]:
    n = len(example.values) // 2
    return slice(0, n), slice(n, None)


def retries(worker: WorkerProcess) -> list[tuple[int, float]]:
    return [(int(a), float(w)) for a, w in RETRY_LINE.findall(worker.logs())]


def committed(bootstrap: str, end: dict[int, int]) -> dict[int, int]:
    return group_offsets(bootstrap, GROUP, TOPIC, sorted(end))


def stored_offsets(url: str) -> dict[int, int]:
    watch = OffsetWatch(url, f"kafka:{TOPIC}")
    try:
        return watch()
    finally:
        watch.close()


def assert_backoff_grows(waits: list[float]) -> None:
    """0.5 s doubling up to 5 s (RetryPolicy defaults), the last one cut by the deadline."""
    expected = [min(0.5 * 2**i, 5.0) for i in range(len(waits))]
    assert waits[:-1] == expected[:-1], waits
    assert waits[-1] <= expected[-1], waits


@pytest.mark.parametrize("mode", [
    "immediate", pytest.param("fast", marks=pytest.mark.slow),
])
def test_worker_waits_for_the_database_and_resumes(
    mode: str, example: Example, reference: Snapshot, private_postgres: PrivatePostgres,
    kafka_broker: str, tmp_path: Path,
) -> None:
    db = private_postgres.url
    first, second = halves(example)
    placed = produce(kafka_broker, TOPIC, example.values[first], example.keys[first])
    stored = OffsetWatch(db, f"kafka:{TOPIC}")
    source = f"kafka://{kafka_broker}/{TOPIC}?{MOCK_URL_OPTIONS}"
    worker = WorkerProcess.cli(tmp_path, "worker", db, source, GROUP, example.config_args,
                               batch_size=100)
    try:
        end = end_offsets(placed)
        wait_until(lambda: stored() == end, "the first half stored", [worker], timeout_s=90)
        before = stored()
        private_postgres.stop(mode)
        placed += produce(kafka_broker, TOPIC, example.values[second], example.keys[second])
        end = end_offsets(placed)
        wait_until(lambda: len(retries(worker)) >= 4, "four failed attempts", [worker],
                   timeout_s=60)
        # Still down for the worker (TCP closed), readable by the test (Unix socket).
        private_postgres.start(tcp=False)
        during = stored_offsets(private_postgres.socket_url)
        kafka = committed(kafka_broker, end)
        assert during == before, "nothing can have been stored during the outage"
        assert all(o <= during.get(p, 0) for p, o in kafka.items()), (kafka, during)
        assert kafka == before, "Kafka holds exactly what the database holds"
        private_postgres.stop("fast")
        private_postgres.start()
        wait_until(lambda: stored() == end, "everything stored after the outage", [worker],
                   timeout_s=90)
        assert worker.terminate() == 0, worker.tail()
    finally:
        worker.ensure_dead()
        stored.close()
    assert differences(snapshot(db), reference) == []
    assert committed(kafka_broker, end) == end
    attempts = retries(worker)
    assert [a for a, _ in attempts] == list(range(1, len(attempts) + 1))
    assert_backoff_grows([w for _, w in attempts])
    assert "Traceback" not in worker.logs()


@pytest.mark.slow
def test_an_outage_past_the_deadline_stops_the_worker_and_a_restart_resumes(
    example: Example, reference: Snapshot, private_postgres: PrivatePostgres,
    kafka_broker: str, tmp_path: Path,
) -> None:
    db = private_postgres.url
    first, second = halves(example)
    placed = produce(kafka_broker, TOPIC, example.values[first], example.keys[first])
    stored = OffsetWatch(db, f"kafka:{TOPIC}")
    source = f"kafka://{kafka_broker}/{TOPIC}?{MOCK_URL_OPTIONS}"
    worker = WorkerProcess.cli(tmp_path, "worker", db, source, GROUP, example.config_args,
                               batch_size=100)
    restarted = None
    try:
        end = end_offsets(placed)
        wait_until(lambda: stored() == end, "the first half stored", [worker], timeout_s=90)
        before = stored()
        private_postgres.stop("immediate")
        placed += produce(kafka_broker, TOPIC, example.values[second], example.keys[second])
        end = end_offsets(placed)
        began = time.monotonic()
        code = worker.proc.wait(120)  # the default RetryPolicy deadline is 60 s
        waited = time.monotonic() - began
        assert code != 0
        assert 60 <= waited < 90, waited
        print(json.dumps({"exit_code": code, "seconds_to_exit": round(waited, 1),
                          "attempts": len(retries(worker))}))
        assert "DatabaseUnavailableError" in worker.logs()
        assert "nothing was committed to the source" in worker.logs()
        assert "Traceback" not in worker.logs()
        assert committed(kafka_broker, end) == before
        private_postgres.start()
        restarted = WorkerProcess.cli(tmp_path, "restarted", db, source, GROUP,
                                      example.config_args, batch_size=100)
        wait_until(lambda: stored() == end, "everything stored after the restart", [restarted],
                   timeout_s=90)
        assert restarted.terminate() == 0, restarted.tail()
    finally:
        worker.ensure_dead()
        if restarted is not None:
            restarted.ensure_dead()
        stored.close()
    assert differences(snapshot(db), reference) == []
    assert committed(kafka_broker, end) == end
