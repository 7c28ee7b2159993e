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

The loop is here; its parts are modules of their own: checkpoints and offset commits
(:mod:`monitor.engine.checkpoints`), fencing and claims (:mod:`monitor.engine.fencing`), retries
(:mod:`monitor.engine.retry`), the stop flag (:mod:`monitor.engine.signals`) and the run summary
(:mod:`monitor.engine.summary`); the worker reaches storage only through its
:class:`~monitor.engine.sink.Sink`.

Exceptions (:mod:`monitor.engine.retry`)::

    WorkerError                    base class of the worker's own errors
    └── DatabaseUnavailableError   the database stayed unavailable past the deadline (or a stop
                                   was requested while waiting); nothing was committed
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from threadpoolctl import threadpool_limits

from monitor.engine.batch import Batch
from monitor.engine.checkpoints import Checkpoints
from monitor.engine.fencing import Claims
from monitor.engine.pipeline import BatchOutput, BatchStepError, Pipeline, dead_letter
from monitor.engine.positions import log_words
from monitor.engine.retry import (
    DatabaseUnavailableError,
    RetryPolicy,
    WorkerError,
    durably,
    short,
)
from monitor.engine.signals import StopFlag
from monitor.engine.sink import Fault, FaultKind, NullSink, Sink, TopicPartition
from monitor.engine.summary import RunSummary
from monitor.streams.monitor import FeatureOrderError, StreamMonitor
from monitor.streams.records import Alarm, SourceOffset

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
        self.words = log_words(source_kind)  # how the log names positions (lines of a file)
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
        self.checkpoints = Checkpoints(source, checkpoint_every)
        self.claims = Claims(sink, pipeline, source, source_kind)
        source.on_assign(self._on_assign)
        source.on_revoke(self._on_revoke)

    def offset_key(self, topic: str) -> str:
        return self.claims.offset_key(topic)

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
                    or self.summary.batches + self.checkpoints.batches < max_batches
                ):
                    if not self._step():
                        break
                self._checkpoint()  # a clean stop stores the progress since the last one
                self.checkpoints.commit({})  # on a clean stop, retry a commit refused earlier
        except BaseException:
            # The in-memory state may be ahead of what was stored: never checkpoint it (the
            # source's close() revokes partitions, which would); a restart replays instead.
            self.checkpoints.rewind()
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
            if self.claims.is_set_aside(name):  # bound to another writer: until reassigned
                continue
            current = self.pipeline.monitor(name)
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
        checkpoint = self.checkpoints.due(records, bool(self._isolate_until))
        self.checkpoints.read(out)
        if not self._persist(out, records, checkpoint):
            return
        self.checkpoints.pending.add(out, records)
        self._isolated(records)
        fresh = self.checkpoints.fresh(out.alarms)
        if checkpoint:
            self.summary.merge(self.checkpoints.checkpointed())
        if self.on_alarm is not None:
            for alarm in fresh:
                self.on_alarm(alarm)
        if self.on_batch is not None:
            self.on_batch(out)

    def _checkpoint(self) -> None:
        """Store the states and offsets of the batches since the last checkpoint, and commit."""
        if self.checkpoints.batches and self._persist(BatchOutput(), [], checkpoint=True):
            self.summary.merge(self.checkpoints.checkpointed())

    def _persist(self, out: BatchOutput, records: Sequence[Any], checkpoint: bool) -> bool:
        """Store the batch (with, at a checkpoint, the states and offsets of every batch since
        the last one); False if it was not stored (and the worker has resynchronised)."""
        offsets: list[SourceOffset] = []
        states: dict[str, dict[str, Any]] = {}
        if checkpoint:
            offsets, touched = self.checkpoints.to_store(out, self.offset_key)
            states = self.pipeline.states(touched)
        fencing = self.claims.fencing(self.checkpoints.since(out), out.touched)
        self.claims.drop_refused(out)
        batch = Batch.of(out, states, offsets=offsets, fencing=fencing)
        try:
            self._durably(partial(self.sink.persist, batch), "persisting a batch")
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
            self.claims.set_aside(fault)
            self._resync(records, touched)
        elif fault.kind is FaultKind.CONTENT and records:  # (a flush has no record to blame)
            self._unstorable(records, touched, exc)
        else:
            return False
        return True

    # -- a batch the sink refuses for its content -----------------------------------------------

    def _unstorable(self, records: Sequence[Any], touched: set[str], exc: Exception) -> None:
        """A batch the database refuses for its content (not its availability).

        The error is deterministic, so retrying cannot help and restarting would fail on the
        same batch forever. The worker resynchronises (back to the last checkpoint), then
        processes records one per transaction, each a checkpoint, until past this batch; the
        record whose results cannot be stored becomes a dead letter, its effect on the
        detectors is discarded, and the stream goes on.
        """
        if len(records) > 1 or self.checkpoints.batches:
            log.error("a record of this batch cannot be stored (%s): processing records one at "
                      "a time up to its %d", short(exc), len(records))
            self._isolate(records, touched)
            return
        self._resync(records, touched)
        record = records[0]
        reason = f"results cannot be stored: {short(exc)}"
        where = self.words.record(record.topic, record.partition, record.offset)
        log.error("%s: %s; dead-lettered", where, reason)
        out = BatchOutput(dead_letters=[dead_letter(self.pipeline.source, record, reason)],
                          offsets={(record.topic, record.partition): record.offset + 1})
        offsets = [SourceOffset(self.offset_key(record.topic), record.partition,
                                record.offset + 1)]
        batch = Batch.of(out, offsets=offsets, fencing=self.claims.fencing(out.offsets, set()))
        self._durably(partial(self.sink.persist, batch), "persisting a dead letter")
        self.source.seek(out.offsets)
        self.checkpoints.stored(out.offsets)
        self.summary.add(out)
        self._isolated(records)

    def _isolate(self, records: Sequence[Any], touched: set[str]) -> None:
        """Resynchronise (back to the last checkpoint), then process one record per
        transaction, each a checkpoint, until past ``records``."""
        self._resync(records, touched)
        for record in records:
            tp = (record.topic, record.partition)
            self._isolate_until[tp] = max(record.offset + 1, self._isolate_until.get(tp, 0))

    def _isolated(self, records: Sequence[Any]) -> None:
        """Stop isolating the partitions read past the batch that could not be stored."""
        for record in records:
            tp = (record.topic, record.partition)
            if record.offset + 1 >= self._isolate_until.get(tp, record.offset + 2):
                del self._isolate_until[tp]

    def _durably(self, action: Callable[[], T], what: str) -> T:
        """Run a sink action, retrying transient failures with backoff until the deadline."""
        return durably(action, what, self.retry, self.sink.fault, self._stop)

    # -- rebalances -----------------------------------------------------------------------------

    def _on_assign(self, partitions: set[TopicPartition]) -> None:
        """Restore every stream from the database and seek to the stored offsets."""
        self._checkpoint()  # (nothing is pending unless partitions arrive without a revoke)
        # Before restoring: no zombie can write after the state is read. Streams given back
        # start afresh unless stored (their monitors advanced on a refused batch).
        back = self.claims.claim(partitions, self._durably)
        self._restore_streams(reset=back)
        stored = self._durably(
            lambda: self.sink.load_offsets(partitions, self.offset_key), "loading offsets"
        )
        if stored:
            self.source.seek(stored)
        log.info("%s", self.words.assigned(partitions, stored))

    def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        # Callbacks run inside poll(), and every batch is persisted before the next poll; with
        # interval checkpoints the progress since the last one is stored now, while the
        # partitions are still ours, so that their next owner resumes from it.
        self._checkpoint()
        for tp in partitions:
            self.checkpoints.forget(tp)
            self.claims.forget(tp)
            self._isolate_until.pop(tp, None)
        log.info("%s", self.words.revoked(partitions))

    def _resync(self, records: Sequence[Any], touched: set[str]) -> None:
        """Forget a batch the database refused and every batch since the last checkpoint:
        reload state, seek every partition read since then back to the stored offsets."""
        pending = self.checkpoints.rewind()
        first = dict(pending.first)
        for record in records:
            first.setdefault((record.topic, record.partition), record.offset)
        self._restore_streams(reset=touched | pending.touched)
        stored = self._durably(
            lambda: self.sink.load_offsets(set(first), self.offset_key), "loading offsets"
        )
        owned = self.source.assignment()
        target = {tp: stored.get(tp, offset) for tp, offset in first.items() if tp in owned}
        if target:
            self.source.seek(target)
        log.warning("%s", self.words.resynchronised(target))

    def _restore_streams(self, reset: set[str]) -> None:
        """Load every stream's stored state; streams in ``reset`` without one start afresh."""
        names = self.pipeline.names()
        states = self._durably(
            lambda: {name: self.sink.load_state(name) for name in names}, "loading detector state"
        )
        self.pipeline.restore(states, afresh=reset)
