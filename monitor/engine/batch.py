"""What one processed batch hands to its sink: :class:`Batch`, stored in one transaction.

The pipeline's :class:`~monitor.engine.pipeline.BatchOutput` is what the streams produced (the
records, the offsets read, the streams touched, counts); a :class:`Batch` is what is stored of it,
all or nothing: the records, the detector checkpoints after it, the source offsets they
correspond to, what the transaction is checked against (:class:`Fencing`) and, for HTTP ingest,
the event keys and the request's answer. The worker, HTTP ingest and dead-letter replay build
one; a :class:`~monitor.engine.sink.Sink` (``monitor.db.store.persist_batch`` behind the
database's) stores it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from monitor.engine.pipeline import BatchOutput
from monitor.streams.records import (
    Alarm,
    AlarmEvidence,
    DeadLetter,
    OODWindow,
    PerformanceWindow,
    SourceOffset,
    TracePoint,
)
from monitor.streams.state import Checkpoint

__all__ = ["Batch", "Fencing", "TopicPartition", "checkpoints"]

TopicPartition = tuple[str, int]

_NONE: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Fencing:
    """What a transaction of one writer is checked against: the writer (its source's ``name``
    and consumer group, ``""`` outside Kafka; ``http`` for HTTP ingest), the fencing epochs of
    the partitions it covers by ``(offset key, partition)`` (``Sink.claim``), and the streams it
    writes (bound to it if unbound)."""

    source: str
    group: str
    fences: Mapping[TopicPartition, int] = field(default_factory=dict)
    streams: Sequence[str] = field(default_factory=list)


@dataclass(frozen=True)
class Batch:
    """One batch as a sink stores it, in one transaction (all or nothing).

    Parameters
    ----------
    alarms, trace_points, ood_windows, performance_windows, dead_letters
        New results (with the OOD windows, their flagged events); ones already stored (a
        replay) are skipped.
    alarm_evidence
        Evidence completing stored alarms (a feature attribution), merged into their evidence
        as a new revision of each.
    checkpoints
        Detector state per stream name after the batch (:func:`checkpoints`).
    offsets
        Next offset to read per source partition after the batch.
    fencing
        The writer, fencing tokens and streams the transaction is checked against (``None``:
        unchecked).
    ingested, ingest_request
        HTTP ingest only: the ``(stream, kind, id)`` of the events processed, and the request's
        ``(Idempotency-Key, body SHA-256, answer)``.

    Examples
    --------
    >>> from monitor.engine.pipeline import BatchOutput
    >>> batch = Batch.of(BatchOutput(), offsets=[SourceOffset("file:events.jsonl", 0, 10)])
    >>> batch.offsets, batch.alarms, batch.fencing
    ((SourceOffset(source='file:events.jsonl', partition=0, offset=10),), (), None)
    """

    alarms: Sequence[Alarm] = ()
    trace_points: Sequence[TracePoint] = ()
    ood_windows: Sequence[OODWindow] = ()
    performance_windows: Sequence[PerformanceWindow] = ()
    alarm_evidence: Sequence[AlarmEvidence] = ()
    dead_letters: Sequence[DeadLetter] = ()
    checkpoints: Mapping[str, Checkpoint] = field(default_factory=dict)
    offsets: Sequence[SourceOffset] = ()
    fencing: Fencing | None = None
    ingested: Sequence[tuple[str, str, str]] = ()
    ingest_request: tuple[str, str, Mapping[str, Any]] | None = None

    @classmethod
    def of(
        cls,
        out: BatchOutput,
        states: Mapping[str, dict[str, Any]] = _NONE,
        *,
        offsets: Sequence[SourceOffset] = (),
        fencing: Fencing | None = None,
        ingested: Sequence[tuple[str, str, str]] = (),
        ingest_request: tuple[str, str, Mapping[str, Any]] | None = None,
    ) -> Batch:
        """The pipeline's ``out`` with the streams' detector ``states`` after it
        (``Pipeline.states``) and the rest of what its transaction stores."""
        return cls(
            alarms=tuple(out.alarms),
            trace_points=tuple(out.trace_points),
            ood_windows=tuple(out.ood_windows),
            performance_windows=tuple(out.performance_windows),
            alarm_evidence=tuple(out.alarm_evidence),
            dead_letters=tuple(out.dead_letters),
            checkpoints=checkpoints(states),
            offsets=tuple(offsets),
            fencing=fencing,
            ingested=tuple(ingested),
            ingest_request=ingest_request,
        )

    @property
    def streams(self) -> set[str]:
        """Every stream the batch writes: of its results, checkpoints and :attr:`fencing`."""
        return {*(self.fencing.streams if self.fencing else ()), *self.checkpoints,
                *(a.stream for a in self.alarms), *(t.stream for t in self.trace_points),
                *(w.stream for w in self.ood_windows),
                *(w.stream for w in self.performance_windows),
                *(e.stream for e in self.alarm_evidence)}


def checkpoints(states: Mapping[str, dict[str, Any]]) -> dict[str, Checkpoint]:
    """The checkpoint of each stream's detector state (``StreamMonitor.state_dict``: it carries
    its layout ``version`` and its ``event_index``)."""
    return {
        name: Checkpoint(name, state["version"], state["event_index"], state)
        for name, state in states.items()
    }
