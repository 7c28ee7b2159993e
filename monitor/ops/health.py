"""The worker's own health and metrics: ``monitor run --metrics-port PORT``.

A small HTTP server on a thread of its own answers

- ``GET /healthz``: ``200 ok`` while the worker is healthy, else ``503`` and one line saying why
  (rules below);
- ``GET /metrics``: the worker's Prometheus registry (text format 0.0.4).

The worker itself is not changed: :func:`monitor.cli.runs.run_source` hands it a
:class:`WatchedSource` and a :class:`WatchedSink` wrapping the real ones, which record every
poll, every database call and their errors in a :class:`WorkerHealth`, and a batch callback
that measures processing latency.

Health rules (``bound_s``, 30 s by default, ``MONITOR_WORKER_HEALTH_BOUND_S``):

1. the worker loop is alive: a poll returned (with or without records) within ``bound_s``;
2. the database works: its last successful call (a batch written, or the registry read the
   worker does every 5 s) is within ``bound_s``, and it has not been failing for longer than
   ``bound_s`` (not checked with ``--no-store``);
3. the broker answers: the source has not been failing (polls or end-offset reads) for longer
   than ``bound_s``;
4. the run has not ended (a stopped or crashed worker answers 503 until the process exits).

Worker metrics (labels in braces; ``stream`` is a monitored stream's name, ``source`` the
source kind):

- ``monitor_worker_events_total{stream,kind}``: events the worker's streams have processed
  (``prediction``, ``label``), from their restored checkpoint on
- ``monitor_worker_batches_total``: batches processed and written
- ``monitor_worker_dead_letters_total{source}``: records dead-lettered by this worker
- ``monitor_worker_refused_records_total{stream}``: records of a stream bound to another writer
  (another consumer group, another file): not stored, not even as dead letters
- ``monitor_worker_batch_seconds``: histogram of the time from a poll's return to its batch
  being durable; ``monitor_worker_event_seconds``: histogram of that time divided by the
  batch's events (one observation per batch)
- ``monitor_worker_last_poll_timestamp_seconds``, ``monitor_worker_last_database_success_
  timestamp_seconds``: Unix times of the last poll and last successful database call
- ``monitor_worker_database_errors_total``, ``monitor_worker_source_errors_total``: failed
  database calls and failed polls or end-offset reads
- ``monitor_worker_healthy``: 1 when ``/healthz`` answers 200
- ``monitor_consumer_lag{topic,partition}``: records between the consumer's position and the
  partition's end (Kafka only; refreshed every ``lag_every_s``, 5 s)
- the standard ``process_*`` and ``python_*`` metrics of prometheus-client
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.engine.pipeline import BatchOutput
from monitor.ops.metrics import SOURCE_KINDS, UNKNOWN, source_kind

__all__ = ["HealthServer", "WatchedSink", "WatchedSource", "WorkerHealth"]

log = logging.getLogger(__name__)

DEFAULT_BOUND_S = 30.0
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_EVENT_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)


class WorkerHealth:
    """What the worker did and when, its metrics, and the health rules over them.

    Parameters
    ----------
    bound_s
        How long the loop may go without a poll, the database or the broker may fail, and the
        database may go without a successful call, before the worker is unhealthy.
    uses_database
        False for ``--no-store`` runs (rule 2 is not checked).
    clock
        Seconds (monotonic), replaceable in tests.

    Examples
    --------
    >>> now = [100.0]
    >>> health = WorkerHealth(bound_s=30, clock=lambda: now[0])
    >>> health.polled(); health.database_ok()
    >>> health.check()
    (True, 'ok')
    >>> health.database_failed(OSError("connection refused")); now[0] = 131.0; health.polled()
    >>> health.check()
    (False, 'database failing for 31 s: OSError: connection refused')
    """

    def __init__(
        self,
        bound_s: float = DEFAULT_BOUND_S,
        uses_database: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not bound_s > 0:
            raise ValueError(f"bound_s must be > 0, got {bound_s}")
        self.bound_s = bound_s
        self.uses_database = uses_database
        self.clock = clock
        self.started = clock()
        self.last_poll: float | None = None
        self.last_database_ok: float | None = None
        self.database_failing_since: float | None = None
        self.database_error = ""
        self.source_failing_since: float | None = None
        self.source_error = ""
        self.ended: str | None = None
        self._poll_returned: float | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.batches = Counter("monitor_worker_batches", "Batches processed and written.",
                               registry=r)
        self.dead_letters = Counter(
            "monitor_worker_dead_letters", "Records dead-lettered by this worker, by source kind.",
            ["source"], registry=r,
        )
        for kind in (*SOURCE_KINDS, UNKNOWN):
            self.dead_letters.labels(kind)
        # A series appears when a stream is first refused (the worker does not know before).
        self.refused = Counter(
            "monitor_worker_refused_records",
            "Records of streams bound to another writer, not stored, by stream.",
            ["stream"], registry=r,
        )
        self.batch_seconds = Histogram(
            "monitor_worker_batch_seconds",
            "Seconds from a poll's return to its batch being durable.",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.event_seconds = Histogram(
            "monitor_worker_event_seconds",
            "Seconds per event of each batch (batch seconds / events).",
            buckets=_EVENT_BUCKETS, registry=r,
        )
        self.poll_time = Gauge("monitor_worker_last_poll_timestamp_seconds",
                               "Unix time of the last poll that returned.", registry=r)
        self.database_time = Gauge(
            "monitor_worker_last_database_success_timestamp_seconds",
            "Unix time of the last successful database call.", registry=r,
        )
        self.database_errors = Counter("monitor_worker_database_errors",
                                       "Failed database calls.", registry=r)
        self.source_errors = Counter("monitor_worker_source_errors",
                                     "Failed polls or end-offset reads of the source.", registry=r)
        self.lag = Gauge("monitor_consumer_lag",
                         "Records between the consumer's position and the partition's end.",
                         ["topic", "partition"], registry=r)
        healthy = Gauge("monitor_worker_healthy", "1 when /healthz answers 200.", registry=r)
        healthy.set_function(lambda: float(self.check()[0]))
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self._lag_keys: set[tuple[str, str]] = set()

    # -- what happened --------------------------------------------------------------------------

    def polled(self, records: int = 0) -> None:
        now = self.clock()
        self.last_poll = now
        self._poll_returned = now if records else None
        self.poll_time.set_to_current_time()

    def source_ok(self) -> None:
        self.source_failing_since = None

    def source_failed(self, exc: BaseException) -> None:
        self.source_errors.inc()
        if self.source_failing_since is None:
            self.source_failing_since = self.clock()
        self.source_error = _one_line(exc)

    def database_ok(self) -> None:
        self.last_database_ok = self.clock()
        self.database_failing_since = None
        self.database_time.set_to_current_time()

    def database_failed(self, exc: BaseException) -> None:
        self.database_errors.inc()
        if self.database_failing_since is None:
            self.database_failing_since = self.clock()
        self.database_error = _one_line(exc)

    def lag_read(self, lag: Mapping[tuple[str, int], int]) -> None:
        keys = {(topic, str(partition)) for topic, partition in lag}
        for gone in self._lag_keys - keys:  # partitions revoked: their series go
            self.lag.remove(*gone)
        for (topic, partition), value in lag.items():
            self.lag.labels(topic, str(partition)).set(value)
        self._lag_keys = keys

    def batch_done(self, out: BatchOutput) -> None:
        """A batch is durable (the worker's ``on_batch``): count it and time it."""
        self.batches.inc()
        for letter in out.dead_letters:
            self.dead_letters.labels(source_kind(letter.source)).inc()
        for stream, n in out.refused.items():
            self.refused.labels(stream).inc(n)
        if self._poll_returned is not None:
            seconds = max(0.0, self.clock() - self._poll_returned)
            self.batch_seconds.observe(seconds)
            if out.events:
                self.event_seconds.observe(seconds / out.events)
            self._poll_returned = None

    def end(self, why: str) -> None:
        self.ended = why

    # -- the rules ------------------------------------------------------------------------------

    def check(self) -> tuple[bool, str]:
        """``(healthy, reason)``; the reason is one line."""
        now, bound = self.clock(), self.bound_s
        if self.ended is not None:
            return False, f"worker stopped: {self.ended}"
        since_poll = now - (self.last_poll if self.last_poll is not None else self.started)
        if since_poll > bound:
            return False, f"worker loop stalled: no poll returned for {since_poll:.0f} s"
        if self.source_failing_since is not None and now - self.source_failing_since > bound:
            return False, (f"broker failing for {now - self.source_failing_since:.0f} s: "
                           f"{self.source_error}")
        if self.uses_database:
            if (self.database_failing_since is not None
                    and now - self.database_failing_since > bound):
                return False, (f"database failing for {now - self.database_failing_since:.0f} "
                               f"s: {self.database_error}")
            last = self.last_database_ok if self.last_database_ok is not None else self.started
            if now - last > bound:
                return False, f"no successful database call for {now - last:.0f} s"
        return True, "ok"


class StreamEvents(Collector):
    """``monitor_worker_events_total{stream,kind}`` read from the pipeline's streams."""

    def __init__(self, streams: Callable[[], Mapping[str, Any]]) -> None:
        self.streams = streams

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "monitor_worker_events", "Events the worker's streams have processed, by kind.",
            labels=["stream", "kind"],
        )
        for name, monitor in sorted(list(self.streams().items())):
            join = monitor.join
            labels = join.joined + join.pending_labels + join.expired_labels
            family.add_metric([name, "prediction"], float(monitor.event_index))
            family.add_metric([name, "label"], float(labels))
        yield family


class WatchedSink:
    """A worker sink that records each call's success or failure in ``health``."""

    def __init__(self, sink: Any, health: WorkerHealth) -> None:
        self.sink = sink
        self.health = health

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            result = getattr(self.sink, name)(*args, **kwargs)
        except Exception as exc:
            self.health.database_failed(exc)
            raise
        self.health.database_ok()
        return result

    def load_offsets(self, keys: Any, source: Any) -> Any:
        return self._call("load_offsets", keys, source)

    def load_state(self, stream: str) -> Any:
        return self._call("load_state", stream)

    def persist(self, batch: Any) -> None:
        self._call("persist", batch)

    def claim(self, source: str, group: str, partitions: set[int]) -> Any:
        return self.sink.claim(source, group, partitions)

    def fault(self, exc: BaseException) -> Any:
        return self.sink.fault(exc)

    def stream_versions(self) -> Any:
        return self._call("stream_versions")

    def registered_stream(self, name: str) -> Any:
        return self._call("registered_stream", name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sink, name)


class WatchedSource:
    """A worker source that records polls and their errors in ``health``, and reads the
    consumer lag (sources with a ``lag`` method) at most every ``lag_every_s``."""

    def __init__(
        self,
        source: Any,
        health: WorkerHealth,
        lag_every_s: float = 5.0,
        lag_timeout_s: float = 2.0,
    ) -> None:
        self.source = source
        self.health = health
        self.lag_every_s = lag_every_s
        self.lag_timeout_s = lag_timeout_s
        self._next_lag = 0.0

    def poll(self, max_records: int, timeout_s: float) -> Any:
        try:
            records = self.source.poll(max_records, timeout_s)
        except Exception as exc:
            self.health.polled()
            self.health.source_failed(exc)
            raise
        self.health.polled(len(records))
        self._read_lag()
        return records

    def _read_lag(self) -> None:
        lag = getattr(self.source, "lag", None)
        now = time.monotonic()
        if lag is None:
            self.health.source_ok()
            return
        if now < self._next_lag:
            return
        self._next_lag = now + self.lag_every_s
        try:
            self.health.lag_read(lag(timeout_s=self.lag_timeout_s))
        except Exception as exc:  # the broker does not answer: polls just come back empty
            log.warning("consumer lag not read: %s", _one_line(exc))
            self.health.source_failed(exc)
            return
        self.health.source_ok()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)


class HealthServer:
    """Serves ``/healthz`` and ``/metrics`` of ``health`` on ``host:port`` from a daemon thread
    (port 0: any free port, see :attr:`port`)."""

    def __init__(self, health: WorkerHealth, port: int, host: str = "0.0.0.0") -> None:
        self.health = health
        handler = _handler(health)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="monitor-health", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        log.info("worker health and metrics on port %d (/healthz, /metrics)", self.port)
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(health: WorkerHealth) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                ok, reason = health.check()
                self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain")
            elif path == "/metrics":
                self._send(200, generate_latest(health.registry), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found: /healthz or /metrics\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("health server: " + format, *args)

    return Handler


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:200] if lines else ''}"
