"""One writer per stream, as the worker holds it: :class:`Claims`.

On assignment the worker claims its partitions through the sink (``Sink.claim``): each gets a new
fencing epoch, so a zombie that held them before is refused from then on, and each topic the
offset key it is stored under. Every transaction is checked against the writer, those epochs and
the streams it writes (:class:`~monitor.engine.batch.Fencing`). A stream the sink says is bound to
another writer (:attr:`~monitor.engine.sink.FaultKind.BOUND`) is set aside: this worker stores
nothing of its records until its partitions are assigned again, when the binding is checked anew.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

from monitor.engine.batch import Fencing, TopicPartition
from monitor.engine.pipeline import BatchOutput, Pipeline, unknown_stream_reason
from monitor.engine.retry import Durably
from monitor.engine.sink import Fault, Sink
from monitor.streams.monitor import StreamMonitor
from monitor.streams.records import DeadLetter

__all__ = ["Claims"]

log = logging.getLogger(__name__)


class Claims:
    """The worker's partitions' fencing epochs and offset keys, and the streams set aside.

    Parameters
    ----------
    sink
        Where partitions are claimed.
    pipeline
        The worker's pipeline: a stream set aside leaves it, and comes back on assignment.
    source
        The worker's ``connectors.Source``: its ``name`` is the writer, with its consumer group
        (``group_id``; ``""`` outside Kafka).
    source_kind
        Prefix of stored offset keys, e.g. ``kafka`` or ``file``.
    """

    def __init__(self, sink: Sink, pipeline: Pipeline, source: Any, source_kind: str) -> None:
        self.sink = sink
        self.pipeline = pipeline
        self.source = source
        self.group = str(getattr(source, "group_id", "") or "")
        self.source_kind = source_kind
        # The offset key of each topic (another group's than the source's first one stores
        # under its own), the fencing epoch of each partition taken at assignment, and the
        # streams bound to another writer: name → (that writer, the monitor set aside).
        self._keys: dict[str, str] = {}
        self._epochs: dict[TopicPartition, int] = {}
        self._elsewhere: dict[str, tuple[str, StreamMonitor]] = {}

    def offset_key(self, topic: str) -> str:
        """The key the offsets of ``topic`` are stored under."""
        return self._keys.get(topic) or f"{self.source_kind}:{topic}"

    def fencing(self, read: Mapping[TopicPartition, int], touched: set[str]) -> Fencing:
        """The writer, fencing tokens and streams a transaction covering the partitions ``read``
        and writing the streams ``touched`` is checked against."""
        fences = {(self.offset_key(t), p): self._epochs[(t, p)]
                  for t, p in read if (t, p) in self._epochs}
        return Fencing(self.source.name, self.group, fences, sorted(touched))

    def set_aside(self, fault: Fault) -> None:
        """A stream bound to another writer: this worker stops writing it, and stores nothing
        of its records (:meth:`drop_refused`)."""
        log.error("%s; until then its records are not stored here (counted in the run summary's "
                  "\"refused\" and in monitor_worker_refused_records_total)", fault)
        monitor = self.pipeline.drop(fault.stream)
        if monitor is not None:
            self._elsewhere[fault.stream] = (fault.bound, monitor)

    def is_set_aside(self, stream: str) -> bool:
        return stream in self._elsewhere

    def drop_refused(self, out: BatchOutput) -> None:
        """Take the records of set-aside streams (the pipeline's ``unknown stream`` dead letters)
        out of the batch and count them in ``out.refused``. The stream's bound writer reads
        these records itself: stored here as dead letters, a replay would feed events it already
        processed into the stream a second time (issue 31)."""
        if not self._elsewhere:
            return
        refused = {unknown_stream_reason(name): name for name in self._elsewhere}
        kept: list[DeadLetter] = []
        for letter in out.dead_letters:
            name = refused.get(letter.reason)
            if name is None:
                kept.append(letter)
            else:
                out.refused[name] = out.refused.get(name, 0) + 1
        out.dead_letters = kept

    def claim(self, partitions: set[TopicPartition], durably: Durably) -> set[str]:
        """Take the partitions' fencing tokens (a zombie of them is refused from now on) and
        give back the streams set aside (a binding may have moved: each is checked again); the
        names given back."""
        back = set(self._elsewhere)
        for name, (_, monitor) in self._elsewhere.items():
            self.pipeline.add(name, monitor)
        self._elsewhere.clear()
        for topic in sorted({t for t, _ in partitions}):
            ours = {p for t, p in partitions if t == topic}
            take = partial(self.sink.claim, f"{self.source_kind}:{topic}", self.group, ours)
            key, epochs = durably(take, "claiming partitions")
            self._keys[topic] = key
            self._epochs.update({(topic, p): e for p, e in epochs.items()})
        return back

    def forget(self, tp: TopicPartition) -> None:
        """A partition revoked: its fencing epoch is no longer this worker's."""
        self._epochs.pop(tp, None)
