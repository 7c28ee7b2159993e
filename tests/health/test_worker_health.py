"""``monitor run --metrics-port``: the worker's /healthz and /metrics, fed by wrapping its
source and sink (database and broker loss included) and the Kafka consumer lag."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from connectors.mock_kafka import mock_kafka_cluster, produce_kafka_python
from monitor.cli.run_commands import _metrics_port
from monitor.cli.runs import run_source
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import BatchOutput
from monitor.ops.datasets import build_example
from monitor.ops.health import HealthServer, WatchedSink, WatchedSource, WorkerHealth
from monitor.settings import Settings
from tests.support.databases import postgres_database
from tests.support.http import http_get
from tests.support.kafka import CLIENTS, mock_source

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])




def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_run_serves_health_and_metrics_while_it_runs(
    tmp_path: Path, postgres_admin: Engine
) -> None:
    paths = build_example(tmp_path, seed=1, phases=[("stable", 300)], n_calibration=200)
    port = _free_port()
    seen: list[tuple[int, str, int, str]] = []

    def scrape(out: BatchOutput) -> None:  # runs in the worker's thread, between batches
        if len(seen) < 2:
            seen.append((*http_get(f"http://127.0.0.1:{port}/healthz"),
                         *http_get(f"http://127.0.0.1:{port}/metrics")))

    with postgres_database(postgres_admin) as url:
        summary = run_source(
            f"file:{paths['events']}", [str(paths["config"])], "g", Settings(database_url=url),
            batch_size=100, on_batch=scrape, metrics_port=port, metrics_host="127.0.0.1",
        )
    assert summary.events == 300
    status, body, metrics_status, metrics = seen[-1]
    assert (status, body, metrics_status) == (200, "ok\n", 200)
    got = _values(metrics)
    stream = next(iter(k for k in got if k[0] == "monitor_worker_events_total"))[1]
    name = dict(stream)["stream"]
    assert got[("monitor_worker_events_total", (("kind", "prediction"), ("stream", name)))] > 0
    assert ("monitor_worker_events_total", (("kind", "label"), ("stream", name))) in got
    assert got[("monitor_worker_batches_total", ())] >= 1
    assert got[("monitor_worker_batch_seconds_count", ())] >= 1
    assert got[("monitor_worker_event_seconds_count", ())] >= 1
    assert got[("monitor_worker_dead_letters_total", (("source", "file"),))] == 0
    assert got[("monitor_worker_healthy", ())] == 1
    assert ("process_cpu_seconds_total", ()) in got
    with pytest.raises(OSError):  # the server stops with the run
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_database_loss_turns_healthz_503_after_the_bound() -> None:
    now = [1000.0]
    health = WorkerHealth(bound_s=30, clock=lambda: now[0])
    sink = WatchedSink(DatabaseSink(UNREACHABLE, migrate=False), health)
    server = HealthServer(health, 0, "127.0.0.1").start()
    try:
        health.polled()
        health.database_ok()
        assert http_get(f"http://127.0.0.1:{server.port}/healthz") == (200, "ok\n")
        with pytest.raises(Exception, match=r"127\.0\.0\.1"):
            sink.stream_versions()  # a real connection failure, not a mock
        now[0] += 10
        health.polled()
        assert http_get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200  # within the bound
        now[0] += 25
        health.polled()
        status, body = http_get(f"http://127.0.0.1:{server.port}/healthz")
        assert status == 503
        assert body.startswith("database failing for 35 s: OperationalError")
        assert body.count("\n") == 1
        metrics = _values(http_get(f"http://127.0.0.1:{server.port}/metrics")[1])
        assert metrics[("monitor_worker_database_errors_total", ())] == 1
        assert metrics[("monitor_worker_healthy", ())] == 0
    finally:
        server.close()
        sink.close()


def test_a_stalled_loop_and_an_ended_run_are_unhealthy() -> None:
    now = [0.0]
    health = WorkerHealth(bound_s=30, uses_database=False, clock=lambda: now[0])
    health.polled()
    assert health.check() == (True, "ok")
    now[0] = 31.0
    assert health.check() == (False, "worker loop stalled: no poll returned for 31 s")
    health.polled()
    health.end("DatabaseUnavailableError: gave up")
    assert health.check() == (False, "worker stopped: DatabaseUnavailableError: gave up")


@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_lag_per_partition_and_broker_loss(client: str) -> None:
    now = [0.0]
    health = WorkerHealth(bound_s=30, uses_database=False, clock=lambda: now[0])
    with mock_kafka_cluster() as bootstrap:
        values = [b'{"n": %d}' % i for i in range(200)]
        produce_kafka_python(bootstrap, "lagging", values, [b"k%d" % (i % 8) for i in range(200)])
        kafka = mock_source(client, bootstrap, "lagging", "g-lag")
        source = WatchedSource(kafka, health, lag_every_s=0.0)
        read = 0
        for _ in range(1_000):  # counted: a poll returns up to 10 records of the 200 produced
            read += len(source.poll(10, 0.5))
            if read >= 50:
                break
        assert read >= 50, f"1 000 polls read {read} of 200 records"
        lag = kafka.lag()
        assert sum(lag.values()) == 200 - read
        assert {topic for topic, _ in lag} == {"lagging"}
        metrics = _values(_get_registry(health))
        gauges = {k: v for k, v in metrics.items() if k[0] == "monitor_consumer_lag"}
        assert sum(gauges.values()) == 200 - read
        assert all(dict(k[1])["topic"] == "lagging" for k in gauges)
    # The cluster is gone: polls come back empty, the end-offset read fails within its bound.
    assert source.lag_timeout_s == 2.0
    returned = _returns_within(lambda: source.poll(10, 0.2), LIVENESS_S)
    assert returned, f"a poll with the broker gone did not return within {LIVENESS_S:g} s"
    assert health.source_failing_since is not None
    now[0] = 31.0
    source.poll(10, 0.2)
    ok, reason = health.check()
    assert not ok and reason.startswith("broker failing for 31 s: SourceError")
    kafka._closed = True  # closing would wait for the vanished broker


#: A liveness bound, not a speed bound: the lag read waits at most ``lag_timeout_s`` (2 s) for
#: the vanished broker, while an unbounded read would wait for kafka-python's request timeout
#: (305 s) — a factor of 60 either side of this bound, whatever the machine's load.
LIVENESS_S = 120.0


def _returns_within(call: Callable[[], object], seconds: float) -> bool:
    """Whether ``call()`` returns within ``seconds`` (it runs in a thread of its own, the only
    one that touches the consumer meanwhile)."""
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


def _get_registry(health: WorkerHealth) -> Any:
    from prometheus_client import generate_latest

    return generate_latest(health.registry).decode()


def test_metrics_port_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONITOR_WORKER_METRICS_PORT", raising=False)
    assert _metrics_port(None) is None
    monkeypatch.setenv("MONITOR_WORKER_METRICS_PORT", "9464")
    assert _metrics_port(None) == 9464
    assert _metrics_port(9000) == 9000
