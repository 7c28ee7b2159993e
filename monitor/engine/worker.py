"""The processing loop: poll → process → persist (results + offsets, one transaction) → commit.

The database is the source of truth. Offsets are committed to the source only after the results
they cover are durable, and on every partition assignment the worker restores its streams' state
from the database and seeks to the stored offsets, so a crash or rebalance never changes a result
(exactly-once effect on top of at-least-once delivery; see docs/streaming.md).

Failure handling, step by step:

- a batch whose persistence fails with a transient database error (connection lost, server
  restarting, deadlock, serialization failure, SQLite busy) is retried with exponential backoff
  for at most :attr:`RetryPolicy.deadline_s`; nothing is committed to the source meanwhile. Past
  the deadline the worker raises :class:`DatabaseUnavailableError` (``monitor run`` exits
  non-zero) and a restart resumes exactly where the database left off;
- a batch refused because the database holds *later* offsets (another worker of the group wrote
  them: this one is a zombie after a rebalance) is dropped; the worker reloads the streams' state
  from the database and seeks to the stored offsets;
- a refused source commit (the group rebalanced) is logged: the results are in the database, and
  whoever owns the partition next resumes from there;
- bad records never reach here as errors: the pipeline turns them into dead letters. A batch that
  the database refuses for its *content* (a value it cannot store: a deterministic error, so a
  restart would fail on it forever) is processed again one record per transaction, and the
  record whose results cannot be stored becomes a dead letter; the stream goes on without it.

Interval checkpoints (``checkpoint_every=N > 1``): every batch still stores its results, but only
every Nth batch (and at a clean stop, the end-of-source flush, a poll that returns nothing and
before partitions are revoked) stores the detector states and offsets of everything processed
since the previous checkpoint, and commits those offsets to the source. Results are idempotent, so
replaying the batches after the last checkpoint (after a crash or a resynchronisation) stores
nothing twice. Every resynchronisation rewinds to the last checkpoint; alarms already passed to
``on_alarm`` in this process are not passed again, but after a crash the alarms of the batches
after the last checkpoint are delivered again (at-least-once for them; the alarm id and its
revision are the idempotency key: a revision of an alarm is delivered as a version of its own).

Exceptions::

    WorkerError                    base class of the worker's own errors
    └── DatabaseUnavailableError   the database stayed unavailable past the deadline (or a stop
                                   was requested while waiting); nothing was committed
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from threadpoolctl import threadpool_limits

from monitor.engine.pipeline import (
    BatchOutput,
    BatchStepError,
    Pipeline,
    dead_letter,
    unknown_stream_reason,
)
from monitor.engine.sink import Fault, FaultKind, Fencing, NullSink, Sink, TopicPartition
from monitor.errors import MonitorError
from monitor.streams.monitor import FeatureOrderError, StreamMonitor
from monitor.streams.records import Alarm, DeadLetter, SourceOffset

__all__ = [
    "DatabaseUnavailableError",
    "NullSink",
    "RetryPolicy",
    "RunSummary",
    "Sink",
    "StopFlag",
    "Worker",
    "WorkerError",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class WorkerError(MonitorError):
    """Base class of the errors the worker raises on purpose."""


class DatabaseUnavailableError(WorkerError):
    """The database could not be written (or read) before the retry deadline.

    The batch in hand was neither persisted nor committed to the source, so a restarted worker
    resumes exactly at the last durable batch.
    """


@dataclass(frozen=True)
class RetryPolicy:
    """How long the worker keeps retrying an unavailable database, and how often.

    Waits start at ``backoff_s`` and double up to ``max_backoff_s``; after ``deadline_s`` of
    failures the worker gives up with :class:`DatabaseUnavailableError`. Keep ``deadline_s``
    below the Kafka consumer's ``max_poll_interval_ms`` (300 s by default), or the group evicts
    the worker while it waits.

    Examples
    --------
    >>> list(RetryPolicy(deadline_s=10, backoff_s=0.5, max_backoff_s=2).delays(6))
    [0.5, 1.0, 2.0, 2.0, 2.0, 2.0]
    >>> RetryPolicy(deadline_s=0)
    Traceback (most recent call last):
    ...
    ValueError: deadline_s must be > 0, got 0
    """

    deadline_s: float = 60.0
    backoff_s: float = 0.5
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("deadline_s", "backoff_s", "max_backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def delays(self, n: int) -> Iterator[float]:
        """The first ``n`` waits between attempts, in seconds."""
        wait = self.backoff_s
        for _ in range(n):
            yield float(min(wait, self.max_backoff_s))
            wait *= 2


@dataclass
class RunSummary:
    """What a run did (the summary object of ``monitor run --json``, README "Command line").

    ``limit`` bounds the alarms and OOD-flagged ids kept (the most recent ones), for workers that
    run for months; the counters stay exact. ``None`` keeps everything (finite sources). An
    alarm's revision replaces its earlier version in :attr:`alarms` (``alarm_count`` counts
    alarms, not versions).
    """

    events: int = 0
    alarms: list[Alarm] = field(default_factory=list)
    dead_letters: int = 0
    ood_flagged: list[str] = field(default_factory=list)
    batches: int = 0
    seconds: float = 0.0
    alarm_count: int = 0
    ood_flagged_count: int = 0
    limit: int | None = None
    #: Records of streams bound to another writer, by stream: not stored (Worker._drop_refused).
    refused: dict[str, int] = field(default_factory=dict)

    def add(self, out: BatchOutput) -> None:
        self.events += out.events
        self._add_alarms(out.alarms)
        self.dead_letters += len(out.dead_letters)
        self._add_refused(out.refused)
        for window in out.ood_windows:
            self.ood_flagged += window.flagged_ids
            self.ood_flagged_count += len(window.flagged_ids)
        self._trim()

    def merge(self, other: RunSummary) -> None:
        """Add the counts and records of ``other`` (a summary of later batches)."""
        self.events += other.events
        self._add_alarms(other.alarms, count=False)
        self.alarm_count += other.alarm_count
        self.dead_letters += other.dead_letters
        self._add_refused(other.refused)
        self.ood_flagged += other.ood_flagged
        self.ood_flagged_count += other.ood_flagged_count
        self.batches += other.batches
        self._trim()

    def _add_refused(self, refused: Mapping[str, int]) -> None:
        for name, n in refused.items():
            self.refused[name] = self.refused.get(name, 0) + n

    def _add_alarms(self, alarms: Sequence[Alarm], count: bool = True) -> None:
        for alarm in alarms:
            if alarm.revision > 1:
                at = next((i for i in range(len(self.alarms) - 1, -1, -1)
                           if self.alarms[i].id == alarm.id), None)
                if at is not None:
                    self.alarms[at] = alarm
                    continue
            self.alarms.append(alarm)
            if count and alarm.revision == 1:
                self.alarm_count += 1

    def _trim(self) -> None:
        # Trim only at twice the limit, so that keeping the tail costs O(1) amortised per item.
        if self.limit is None:
            return
        for items in (self.alarms, self.ood_flagged):
            if len(items) > 2 * self.limit:
                del items[: len(items) - self.limit]

    def to_json(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "alarms": [a.to_json() for a in self.alarms],
            "dead_letters": self.dead_letters,
            "refused": dict(sorted(self.refused.items())),
            "ood_flagged": self.ood_flagged,
        }

    def print_human(self, stream: Any) -> None:
        rate = self.events / self.seconds if self.seconds > 0 else float("nan")
        print(
            f"{self.events} events in {self.seconds:.2f} s ({rate:,.0f}/s), "
            f"{self.alarm_count} alarms, {self.dead_letters} dead letters, "
            f"{self.ood_flagged_count} OOD flags",
            file=stream,
        )
        for name, n in sorted(self.refused.items()):
            print(f"{n} records of stream {name!r} not stored: the stream is bound to another "
                  "writer", file=stream)


class StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes its batch, persists, commits and stops."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``, waking early when the flag is set; True if it is set."""
        return self._event.wait(timeout_s)

    def __bool__(self) -> bool:
        return self._event.is_set()

    @contextmanager
    def on_signals(self) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, lambda *_: self._requested())
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _requested(self) -> None:
        log.info("stop requested: finishing the current batch")
        self.set()


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
    poll_timeout_s
        Longest wait for records in one poll (also the longest delay before a stop is noticed).
    on_batch
        Called with each batch's output after it is durable (progress, plots).
    retry
        How long to retry an unavailable database before giving up (default: 60 s).
    summary_limit
        Most recent alarms and OOD-flagged ids kept in :attr:`summary` (``None``: all).
    checkpoint_every
        Store detector states and offsets (and commit to the source) every this many batches,
        and whenever a poll returns nothing; the batches in between store their results only.
        1: every batch (the default).

    Notes
    -----
    With ``checkpoint_every > 1`` :attr:`summary` counts a batch once it is covered by a
    checkpoint, so batches replayed after a resynchronisation are counted once; ``on_batch`` is
    called for every batch processed, replays included.

    After :class:`DatabaseUnavailableError` the worker's in-memory state is ahead of the database:
    build a new worker (which restores from the database) rather than calling ``run`` again.

    Examples
    --------
    >>> import tempfile
    >>> from connectors import FileSource
    >>> from monitor.ops.datasets import build_example
    >>> from monitor.cli.runs import build_monitors, read_configs
    >>> paths = build_example(tempfile.mkdtemp(), seed=1, n_calibration=100,
    ...                       phases=[("stable", 50), ("concept", 50)])
    >>> source = FileSource(paths["events"])
    >>> pipeline = Pipeline(build_monitors(read_configs([str(paths["config"])])), source.name)
    >>> summary = Worker(source, pipeline, NullSink(), source_kind="file", batch_size=40).run()
    >>> summary.events, summary.batches, source.committed == {(source.topic, 0): 100}
    (100, 4, True)
    >>> source = FileSource(paths["events"])
    >>> pipeline = Pipeline(build_monitors(read_configs([str(paths["config"])])), source.name)
    >>> worker = Worker(source, pipeline, NullSink(), source_kind="file", batch_size=10,
    ...                 checkpoint_every=4)
    >>> worker.run(max_batches=6).batches, source.committed == {(source.topic, 0): 60}
    (6, True)
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
        retry: RetryPolicy | None = None,
        summary_limit: int | None = None,
        checkpoint_every: int = 1,
        streams_refresh_s: float | None = 5.0,
        housekeeping: tuple[float, Callable[[], Any]] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        if summary_limit is not None and summary_limit < 1:
            raise ValueError(f"summary_limit must be None or >= 1, got {summary_limit}")
        self.source = source
        self.pipeline = pipeline
        self.sink = sink
        self.source_kind = source_kind
        self.batch_size = batch_size
        self.on_alarm = on_alarm
        self.poll_timeout_s = poll_timeout_s
        self.on_batch = on_batch
        self.retry = retry or RetryPolicy()
        self.summary_limit = summary_limit
        self.checkpoint_every = checkpoint_every
        self.streams_refresh_s = streams_refresh_s
        self._next_refresh = time.monotonic() + (streams_refresh_s or 0.0)
        # (interval in seconds, task) run between batches, e.g. retention (monitor.db.retention)
        self.housekeeping = housekeeping
        self._next_housekeeping = time.monotonic()
        self.summary = RunSummary(limit=summary_limit)
        self._stop = StopFlag()
        # Records are processed one at a time, each its own checkpoint, until every partition
        # here has been read up to this (next) offset (see _unstorable).
        self._isolate_until: dict[TopicPartition, int] = {}
        self._refused: dict[TopicPartition, int] = {}  # offsets whose source commit was refused
        self._pending = _Pending()  # progress since the last checkpoint
        # Alarm versions (id, revision) passed to on_alarm that a resync could replay, and what
        # decides when they cannot be replayed any more: the furthest (next) offset read, and
        # the checkpointed one.
        self._delivered: set[tuple[str, int]] = set()
        self._read_to: dict[TopicPartition, int] = {}
        self._stored: dict[TopicPartition, int] = {}
        # One writer per stream (monitor.db.fencing): the offset key of each topic (another
        # group's than the source's first one stores under its own), the fencing epoch of each
        # partition taken at assignment, and the streams bound to another writer (set aside:
        # nothing of their records is stored here).
        self._keys: dict[str, str] = {}
        self._epochs: dict[TopicPartition, int] = {}
        self._elsewhere: dict[str, tuple[str, StreamMonitor]] = {}
        self._group = str(getattr(source, "group_id", "") or "")
        source.on_assign(self._on_assign)
        source.on_revoke(self._on_revoke)

    def offset_key(self, topic: str) -> str:
        return self._keys.get(topic) or f"{self.source_kind}:{topic}"

    def run(self, stop: StopFlag | None = None, max_batches: int | None = None) -> RunSummary:
        """Process until the source is exhausted, ``stop`` is set or ``max_batches`` is reached.

        Raises
        ------
        DatabaseUnavailableError
            The database stayed unavailable past the retry deadline; nothing was committed.
        """
        self._stop = stop if stop is not None else StopFlag()  # an unset flag is falsy
        start = time.perf_counter()
        # One BLAS thread: the detectors' matrix products are small (a poll batch against a
        # calibration bank), and on a busy machine a multi-threaded BLAS spins its threads
        # against the worker itself (the kNN scores of a batch took 4-5 times longer on 2
        # shared cores). Scale with partitions and workers instead (docs/streaming.md).
        try:
            with threadpool_limits(limits=1, user_api="blas"):
                while not self._stop and (
                    max_batches is None
                    or self.summary.batches + self._pending.summary.batches < max_batches
                ):
                    if not self._step():
                        break
                self._checkpoint()  # a clean stop stores the progress since the last one
                self._commit({})  # on a clean stop, retry a commit the source refused earlier
        except BaseException:
            # The in-memory state may be ahead of what was stored: never checkpoint it (the
            # source's close() revokes partitions, which would); a restart replays instead.
            self._pending = _Pending()
            raise
        finally:
            self.summary.seconds += time.perf_counter() - start
        return self.summary

    def _step(self) -> bool:
        """One poll and its batch; False once a finite source is exhausted (and flushed)."""
        if self.streams_refresh_s is not None and time.monotonic() >= self._next_refresh:
            self._refresh_streams()
            self._next_refresh = time.monotonic() + self.streams_refresh_s
        if self.housekeeping is not None and time.monotonic() >= self._next_housekeeping:
            self._housekeep()
        size = 1 if self._isolate_until else self.batch_size
        records = self.source.poll(size, self.poll_timeout_s)
        if records:
            try:
                out = self.pipeline.process(records)
            except BatchStepError as exc:
                log.exception("a stream's batch step failed (%s)", exc)
                self._isolate(records, {exc.stream})
                return True
            self._handle(out, records)
        elif self.source.exhausted:
            self._handle(self.pipeline.flush(), [])
            return False
        else:
            self._checkpoint()  # caught up (an empty poll): store the progress since the last one
        return True

    def _housekeep(self) -> None:
        """Run the housekeeping task between batches; its failure is logged, never fatal (the
        next attempt is an interval later)."""
        assert self.housekeeping is not None
        interval, task = self.housekeeping
        try:
            task()
        except Exception as exc:
            fault = self.sink.fault(exc)
            if fault is None:  # a bug: its traceback
                log.exception("housekeeping failed; retrying in %.0f s", interval)
            else:
                log.warning("housekeeping failed (%s); retrying in %.0f s", fault, interval)
        self._next_housekeeping = time.monotonic() + interval

    # -- streams registered or updated while running ------------------------------------------

    def _refresh_streams(self) -> None:
        """Pick up streams registered, or given a new configuration version, since the worker
        started (every ``streams_refresh_s`` seconds, between batches).

        A new stream is monitored from the next batch on (from its stored state, if any). A new
        version replaces the stream's monitor after the progress so far is checkpointed: the
        detectors restart from the new version's calibration at the current event index, the
        counters and the label store go on (:meth:`StreamMonitor.load_state`).
        """
        versions = self._durably(self.sink.stream_versions, "reading the registered streams")
        for name, version in sorted((versions or {}).items()):
            if name in self._elsewhere:  # bound to another writer: set aside until reassigned
                continue
            current = self.pipeline.streams.get(name)
            if current is not None and current.config_version >= version:
                continue
            stopped = self.pipeline.stopped.get(name)
            if stopped is not None and stopped[0] >= version:  # stopped until a new version
                continue
            try:
                found = self._durably(partial(self.sink.registered_stream, name),
                                      "loading a registered stream")
            except FeatureOrderError as exc:
                self.pipeline.stop(name, version, str(exc))
                continue
            if found is None:
                continue
            config, calibration, version = found
            try:
                monitor = StreamMonitor(config, calibration, version)
            except Exception as exc:  # a configuration this worker cannot run: keep the old one
                log.error("stream %r version %d cannot be monitored (%s); keeping version %s",
                          name, version, exc, None if current is None else current.config_version)
                continue
            if current is None:
                state = self._durably(partial(self.sink.load_state, name),
                                      "loading detector state")
                if self.pipeline.resume(name, monitor, state):
                    log.info("stream %r (configuration version %d) registered while running: "
                             "monitored from now on", name, version)
            else:
                self._checkpoint()  # the old version's progress, stored under the old version
                self.pipeline.resume(name, monitor, current.state_dict())
                log.info("stream %r: configuration version %d in force from event index %d "
                         "(the detectors restart from its calibration)", name, version,
                         monitor.version_since)

    # -- one batch ------------------------------------------------------------------------------

    def _handle(self, out: BatchOutput, records: Sequence[Any]) -> None:
        checkpoint = (
            self._pending.summary.batches + 1 >= self.checkpoint_every
            or not records  # the end-of-source flush
            or bool(self._isolate_until)
        )
        for tp, offset in out.offsets.items():
            self._read_to[tp] = max(offset, self._read_to.get(tp, offset))
        if not self._persist(out, records, checkpoint):
            return
        self._pending.add(out, records)
        self._isolated(records)
        # A resync replays the batches since the last checkpoint: deliver their alarms once.
        fresh = [a for a in out.alarms if (a.id, a.revision) not in self._delivered]
        self._delivered.update((a.id, a.revision) for a in fresh)
        if checkpoint:
            self._checkpointed()
        if self.on_alarm is not None:
            for alarm in fresh:
                self.on_alarm(alarm)
        if self.on_batch is not None:
            self.on_batch(out)

    def _checkpoint(self) -> None:
        """Store the states and offsets of the batches since the last checkpoint, and commit."""
        if self._pending.summary.batches and self._persist(BatchOutput(), [], checkpoint=True):
            self._checkpointed()

    def _checkpointed(self) -> None:
        """The pending progress is stored: commit it to the source and count it."""
        offsets = self._pending.offsets
        self._stored.update(offsets)
        self._commit(offsets)
        self.summary.merge(self._pending.summary)
        self._pending = _Pending()
        if all(self._stored.get(tp, -1) >= offset for tp, offset in self._read_to.items()):
            self._delivered.clear()  # everything read is checkpointed: nothing can replay

    def _isolated(self, records: Sequence[Any]) -> None:
        """Stop isolating the partitions read past the batch that could not be stored."""
        for record in records:
            tp = (record.topic, record.partition)
            if record.offset + 1 >= self._isolate_until.get(tp, record.offset + 2):
                del self._isolate_until[tp]

    def _persist(self, out: BatchOutput, records: Sequence[Any], checkpoint: bool) -> bool:
        """Store the batch (with, at a checkpoint, the states and offsets of every batch since
        the last one); False if it was not stored (and the worker has resynchronised)."""
        offsets: list[SourceOffset] = []
        states: dict[str, dict[str, Any]] = {}
        if checkpoint:
            offsets = [
                SourceOffset(self.offset_key(topic), partition, offset)
                for (topic, partition), offset in sorted(
                    {**self._pending.offsets, **out.offsets}.items()
                )
            ]
            touched = sorted(self._pending.touched | out.touched)
            states = self.pipeline.states(touched)
        fencing = self._fencing({**self._pending.offsets, **out.offsets}, out.touched)
        if self._elsewhere:
            self._drop_refused(out)
        try:
            self._durably(lambda: self.sink.persist(out, offsets, states, fencing),
                          "persisting a batch")
        except Exception as exc:
            fault = self.sink.fault(exc)
            if fault is None or not self._refused_batch(fault, exc, records, out.touched):
                raise
            return False
        return True

    def _refused_batch(
        self, fault: Fault, exc: Exception, records: Sequence[Any], touched: set[str]
    ) -> bool:
        """Act on a batch the sink refused; False if nothing can be done here (raise)."""
        if fault.kind is FaultKind.SUPERSEDED:
            log.warning("batch dropped: %s", fault)
            self._resync(records, touched)
        elif fault.kind is FaultKind.BOUND:
            self._set_aside(fault)
            self._resync(records, touched)
        elif fault.kind is FaultKind.CONTENT and records:  # (a flush has no record to blame)
            self._unstorable(records, touched, exc)
        else:
            return False
        return True

    # -- one writer per stream ------------------------------------------------------------------

    def _fencing(self, read: Mapping[TopicPartition, int], touched: set[str]) -> Fencing:
        """The writer, fencing tokens and streams a transaction covering the partitions ``read``
        is checked against."""
        fences = {(self.offset_key(t), p): self._epochs[(t, p)]
                  for t, p in read if (t, p) in self._epochs}
        return Fencing(self.source.name, self._group, fences, sorted(touched))

    def _set_aside(self, fault: Fault) -> None:
        """A stream bound to another writer: this worker stops writing it, and stores nothing
        of its records (:meth:`_drop_refused`)."""
        log.error("%s; until then its records are not stored here (counted in the run summary's "
                  "\"refused\" and in monitor_worker_refused_records_total)", fault)
        monitor = self.pipeline.drop(fault.stream)
        if monitor is not None:
            self._elsewhere[fault.stream] = (fault.bound, monitor)

    def _drop_refused(self, out: BatchOutput) -> None:
        """Take the records of set-aside streams (the pipeline's ``unknown stream`` dead letters)
        out of the batch and count them in ``out.refused``. The stream's bound writer reads
        these records itself: stored here as dead letters, a replay would feed events it already
        processed into the stream a second time (issue 31)."""
        refused = {unknown_stream_reason(name): name for name in self._elsewhere}
        kept: list[DeadLetter] = []
        for letter in out.dead_letters:
            name = refused.get(letter.reason)
            if name is None:
                kept.append(letter)
            else:
                out.refused[name] = out.refused.get(name, 0) + 1
        out.dead_letters = kept

    def _claim(self, partitions: set[TopicPartition]) -> set[str]:
        """Take the partitions' fencing tokens (a zombie of them is refused from now on) and
        give back the streams set aside (a binding may have moved: each is checked again); the
        names given back."""
        back = set(self._elsewhere)
        for name, (_, monitor) in self._elsewhere.items():
            self.pipeline.add(name, monitor)
        self._elsewhere.clear()
        for topic in sorted({t for t, _ in partitions}):
            ours = {p for t, p in partitions if t == topic}
            source = f"{self.source_kind}:{topic}"

            def take(source: str = source, ours: set[int] = ours) -> tuple[str, dict[int, int]]:
                return self.sink.claim(source, self._group, ours)

            key, epochs = self._durably(take, "claiming partitions")
            self._keys[topic] = key
            self._epochs.update({(topic, p): e for p, e in epochs.items()})
        return back

    def _unstorable(self, records: Sequence[Any], touched: set[str], exc: Exception) -> None:
        """A batch the database refuses for its content (not its availability).

        The error is deterministic, so retrying cannot help and restarting would fail on the
        same batch forever. The worker resynchronises (back to the last checkpoint), then
        processes records one per transaction, each a checkpoint, until past this batch; the
        record whose results cannot be stored becomes a dead letter, its effect on the
        detectors is discarded, and the stream goes on.
        """
        since_checkpoint = bool(self._pending.summary.batches)
        if len(records) > 1 or since_checkpoint:
            log.error("a record of this batch cannot be stored (%s): processing records one at "
                      "a time up to its %d", _short(exc), len(records))
            self._isolate(records, touched)
            return
        self._resync(records, touched)
        record = records[0]
        reason = f"results cannot be stored: {_short(exc)}"
        log.error("%s[%d]@%d: %s; dead-lettered", record.topic, record.partition, record.offset,
                  reason)
        out = BatchOutput(dead_letters=[dead_letter(self.pipeline.source, record, reason)],
                          offsets={(record.topic, record.partition): record.offset + 1})
        offsets = [SourceOffset(self.offset_key(record.topic), record.partition,
                                record.offset + 1)]
        fencing = self._fencing(out.offsets, set())
        self._durably(lambda: self.sink.persist(out, offsets, {}, fencing),
                      "persisting a dead letter")
        self.source.seek(out.offsets)
        self._stored.update(out.offsets)
        self._commit(out.offsets)
        self.summary.add(out)
        self._isolated(records)

    def _isolate(self, records: Sequence[Any], touched: set[str]) -> None:
        """Resynchronise (back to the last checkpoint), then process one record per
        transaction, each a checkpoint, until past ``records``."""
        self._resync(records, touched)
        for record in records:
            tp = (record.topic, record.partition)
            self._isolate_until[tp] = max(record.offset + 1, self._isolate_until.get(tp, 0))

    def _commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        from connectors.errors import OffsetCommitError

        # A refused commit (e.g. during a rebalance) is retried with the next one, for the
        # partitions still owned; offsets only grow, so later values replace earlier ones.
        owned = self.source.assignment()
        pending = {tp: o for tp, o in {**self._refused, **offsets}.items() if tp in owned}
        self._refused = {}
        if not pending:
            return
        try:
            self.source.commit(pending)
        except OffsetCommitError as exc:
            # The results and offsets are durable in the database, which every owner resumes from.
            self._refused = pending
            log.warning("source commit refused (results are stored; retried later): %s", exc)

    def _durably(self, action: Callable[[], T], what: str) -> T:
        """Run a database action, retrying transient failures with backoff until the deadline."""
        deadline = time.monotonic() + self.retry.deadline_s
        for attempt, wait in enumerate(self.retry.delays(1_000_000), start=1):
            try:
                return action()
            except Exception as exc:
                fault = self.sink.fault(exc)
                if fault is None or fault.kind is not FaultKind.TRANSIENT:
                    raise
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0 or self._stop:
                    raise self._gave_up(what, attempt, fault) from exc
                log.warning("%s failed (attempt %d: %s); retrying in %.1f s",
                            what, attempt, _short(exc), wait)
                self._stop.wait(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _gave_up(self, what: str, attempts: int, fault: Fault) -> DatabaseUnavailableError:
        why = "a stop was requested" if self._stop else f"{self.retry.deadline_s:g} s passed"
        return DatabaseUnavailableError(
            f"{what} failed {attempts} times and {why}: {fault}; "
            "nothing was committed to the source, so a restarted worker resumes at the last "
            "stored batch"
        )

    # -- rebalances -----------------------------------------------------------------------------

    def _on_assign(self, partitions: set[TopicPartition]) -> None:
        """Restore every stream from the database and seek to the stored offsets."""
        self._checkpoint()  # (nothing is pending unless partitions arrive without a revoke)
        # Before restoring: no zombie can write after the state is read. Streams given back
        # start afresh unless stored (their monitors advanced on a refused batch).
        back = self._claim(partitions)
        self._restore_streams(reset=back)
        stored = self._durably(
            lambda: self.sink.load_offsets(partitions, self.offset_key), "loading offsets"
        )
        if stored:
            self.source.seek(stored)
        log.info("assigned %s; resuming at %s", sorted(partitions), stored or "committed offsets")

    def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        # Callbacks run inside poll(), and every batch is persisted before the next poll; with
        # interval checkpoints the progress since the last one is stored now, while the
        # partitions are still ours, so that their next owner resumes from it.
        self._checkpoint()
        for tp in partitions:
            for progress in (self._read_to, self._stored, self._isolate_until, self._epochs):
                progress.pop(tp, None)
        log.info("revoked %s", sorted(partitions))

    def _resync(self, records: Sequence[Any], touched: set[str]) -> None:
        """Forget a batch the database refused and every batch since the last checkpoint:
        reload state, seek every partition read since then back to the stored offsets."""
        first = dict(self._pending.first)
        for record in records:
            first.setdefault((record.topic, record.partition), record.offset)
        touched = touched | self._pending.touched
        self._pending = _Pending()
        self._restore_streams(reset=touched)
        stored = self._durably(
            lambda: self.sink.load_offsets(set(first), self.offset_key), "loading offsets"
        )
        owned = self.source.assignment()
        target = {tp: stored.get(tp, offset) for tp, offset in first.items() if tp in owned}
        if target:
            self.source.seek(target)
        log.warning("resynchronised from the database; resuming at %s", target)

    def _restore_streams(self, reset: set[str]) -> None:
        """Load every stream's stored state; streams in ``reset`` without one start afresh."""
        names = sorted(self.pipeline.streams)
        states = self._durably(
            lambda: {name: self.sink.load_state(name) for name in names}, "loading detector state"
        )
        for name, state in states.items():
            monitor = self.pipeline.streams[name]
            if state is None and name in reset:
                monitor = StreamMonitor(monitor.config, monitor.calibration, monitor.config_version)
            self.pipeline.resume(name, monitor, state)


@dataclass
class _Pending:
    """Progress since the last checkpoint: results stored, states and offsets not yet."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)  # next offset to read
    first: dict[TopicPartition, int] = field(default_factory=dict)  # first offset read
    touched: set[str] = field(default_factory=set)
    summary: RunSummary = field(default_factory=RunSummary)  # counted at the checkpoint

    def add(self, out: BatchOutput, records: Sequence[Any]) -> None:
        self.offsets.update(out.offsets)
        for record in records:
            self.first.setdefault((record.topic, record.partition), record.offset)
        self.touched |= out.touched
        self.summary.add(out)
        self.summary.batches += 1


def _short(exc: BaseException) -> str:
    # SQLAlchemy's message embeds the statement and its parameters (a whole batch): keep the cause.
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:200] if lines else ''}"
