"""The processing loop: poll → process → persist (results + offsets, one transaction) → commit.

The database is the source of truth. Offsets are committed to the source only after the results
they cover are durable, and on every partition assignment the worker restores its streams' state
from the database and seeks to the stored offsets, so a crash or rebalance never changes a result
(exactly-once effect on top of at-least-once delivery).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitor.pipeline import BatchOutput, Pipeline
from monitor.records import Alarm, SourceOffset

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Sink(Protocol):
    """Where batches go: the database, or nowhere (``NullSink``)."""

    def load_offsets(self, keys: set[TopicPartition], source: Callable[[str], str]) -> dict[TopicPartition, int]: ...

    def load_state(self, stream: str) -> dict[str, Any] | None: ...

    def persist(self, out: BatchOutput, offsets: list[SourceOffset], states: Mapping[str, dict[str, Any]]) -> None: ...


class NullSink:
    """Keeps nothing: for ``monitor run --no-store`` and benchmarks of the bare pipeline."""

    def load_offsets(self, keys: set[TopicPartition], source: Callable[[str], str]) -> dict[TopicPartition, int]:
        return {}

    def load_state(self, stream: str) -> dict[str, Any] | None:
        return None

    def persist(self, out: BatchOutput, offsets: list[SourceOffset], states: Mapping[str, dict[str, Any]]) -> None:
        return None


@dataclass
class RunSummary:
    """What a run did (DESIGN.md: the summary object of ``monitor run --json``)."""

    events: int = 0
    alarms: list[Alarm] = field(default_factory=list)
    dead_letters: int = 0
    ood_flagged: list[str] = field(default_factory=list)
    batches: int = 0
    seconds: float = 0.0

    def add(self, out: BatchOutput) -> None:
        self.events += out.events
        self.alarms += out.alarms
        self.dead_letters += len(out.dead_letters)
        for window in out.ood_windows:
            self.ood_flagged += window.flagged_ids

    def to_json(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "alarms": [a.to_json() for a in self.alarms],
            "dead_letters": self.dead_letters,
            "ood_flagged": self.ood_flagged,
        }

    def print_human(self, stream: Any) -> None:
        rate = self.events / self.seconds if self.seconds > 0 else float("nan")
        print(
            f"{self.events} events in {self.seconds:.2f} s ({rate:,.0f}/s), "
            f"{len(self.alarms)} alarms, {self.dead_letters} dead letters, "
            f"{len(self.ood_flagged)} OOD flags",
            file=stream,
        )


class StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes its batch, persists, commits and stops."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    @contextmanager
    def on_signals(self) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, lambda *_: self.set())
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Worker:
    """Drives one source through the pipeline into a sink.

    Parameters
    ----------
    source
        A ``connectors.Source``.
    pipeline
        The pipeline with every monitored stream.
    sink
        Persistence (``DatabaseSink``) or ``NullSink``.
    source_kind
        Prefix of stored offset keys, e.g. ``kafka`` or ``file``.
    batch_size
        Records per poll, processed and persisted as one transaction.
    on_alarm
        Called with each alarm after it is durable.
    on_batch
        Called with each batch's output after it is durable (progress, plots).
    """

    def __init__(
        self,
        source: Any,
        pipeline: Pipeline,
        sink: Sink,
        source_kind: str,
        batch_size: int = 500,
        on_alarm: Callable[[Alarm], None] | None = None,
        poll_timeout_s: float = 1.0,
        on_batch: Callable[[BatchOutput], None] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.source = source
        self.pipeline = pipeline
        self.sink = sink
        self.source_kind = source_kind
        self.batch_size = batch_size
        self.on_alarm = on_alarm
        self.poll_timeout_s = poll_timeout_s
        self.on_batch = on_batch
        self.summary = RunSummary()
        self._committed: dict[TopicPartition, int] = {}
        source.on_assign(self._on_assign)
        source.on_revoke(self._on_revoke)

    def offset_key(self, topic: str) -> str:
        return f"{self.source_kind}:{topic}"

    def run(self, stop: StopFlag | None = None, max_batches: int | None = None) -> RunSummary:
        """Process until the source is exhausted, ``stop`` is set or ``max_batches`` is reached."""
        stop = stop or StopFlag()
        start = time.perf_counter()
        while not stop and (max_batches is None or self.summary.batches < max_batches):
            records = self.source.poll(self.batch_size, self.poll_timeout_s)
            if records:
                self._handle(self.pipeline.process(records))
            elif self.source.exhausted:
                self._handle(self.pipeline.flush())
                break
        self.summary.seconds += time.perf_counter() - start
        return self.summary

    def _handle(self, out: BatchOutput) -> None:
        offsets = [
            SourceOffset(self.offset_key(topic), partition, offset)
            for (topic, partition), offset in sorted(out.offsets.items())
        ]
        states = {name: self.pipeline.streams[name].state_dict() for name in sorted(out.touched)}
        self.sink.persist(out, offsets, states)
        if out.offsets:
            self.source.commit(out.offsets)
            self._committed.update(out.offsets)
        self.summary.add(out)
        self.summary.batches += 1
        if self.on_alarm is not None:
            for alarm in out.alarms:
                self.on_alarm(alarm)
        if self.on_batch is not None:
            self.on_batch(out)

    def _on_assign(self, partitions: set[TopicPartition]) -> None:
        """Restore every stream from the database and seek to the stored offsets."""
        for name, monitor in self.pipeline.streams.items():
            state = self.sink.load_state(name)
            if state is not None:
                monitor.load_state(state)
        stored = self.sink.load_offsets(partitions, self.offset_key)
        if stored:
            self.source.seek(stored)
        log.info("assigned %s; resuming at %s", sorted(partitions), stored or "committed offsets")

    def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        # Every processed batch is already persisted and committed before poll() returns control,
        # so there is nothing in flight to save here; log for operators.
        log.info("revoked %s", sorted(partitions))
