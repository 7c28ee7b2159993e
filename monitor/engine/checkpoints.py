"""The worker's checkpoints: progress since the last one, and the offset commits after it.

Every batch stores its results; a checkpoint (every ``checkpoint_every`` batches, and at a clean
stop, the end-of-source flush, an empty poll and before partitions are revoked) also stores the
detector states and offsets of every batch since the previous one. Only then are those offsets
committed to the source (:meth:`Checkpoints.commit`): offsets only ever move forward, a commit the
source refuses (a rebalance) is retried with the next one for the partitions still owned.

Alarms passed to ``on_alarm`` are remembered until everything read is checkpointed, so that the
batches a resynchronisation replays deliver no alarm twice (:meth:`Checkpoints.fresh`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.engine.batch import TopicPartition
from monitor.engine.pipeline import BatchOutput
from monitor.engine.summary import RunSummary
from monitor.streams.records import Alarm, SourceOffset

__all__ = ["Checkpoints", "Pending"]

log = logging.getLogger(__name__)


@dataclass
class Pending:
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


class Checkpoints:
    """What the worker has read, stored and committed of its ``source``'s partitions.

    Parameters
    ----------
    source
        A ``connectors.Source`` (its ``assignment`` and ``commit``).
    every
        A checkpoint every this many batches (1: every batch).
    """

    def __init__(self, source: Any, every: int) -> None:
        self.source = source
        self.every = every
        self.pending = Pending()
        # Alarm versions (id, revision) passed to on_alarm that a resync could replay, and what
        # decides when they cannot be replayed any more: the furthest (next) offset read, and
        # the checkpointed one.
        self._delivered: set[tuple[str, int]] = set()
        self._read_to: dict[TopicPartition, int] = {}
        self._stored: dict[TopicPartition, int] = {}
        self._refused: dict[TopicPartition, int] = {}  # offsets whose source commit was refused

    @property
    def batches(self) -> int:
        """Batches stored since the last checkpoint."""
        return self.pending.summary.batches

    def due(self, records: Sequence[Any], isolating: bool) -> bool:
        """Whether the batch of ``records`` is a checkpoint: the Nth since the last one, the
        end-of-source flush (no records), or a record processed on its own."""
        return self.batches + 1 >= self.every or not records or isolating

    def read(self, out: BatchOutput) -> None:
        """Note the offsets ``out`` read up to."""
        for tp, offset in out.offsets.items():
            self._read_to[tp] = max(offset, self._read_to.get(tp, offset))

    def since(self, out: BatchOutput) -> dict[TopicPartition, int]:
        """The next offsets of every partition read since the last checkpoint, ``out``'s too."""
        return {**self.pending.offsets, **out.offsets}

    def to_store(
        self, out: BatchOutput, offset_key: Callable[[str], str]
    ) -> tuple[list[SourceOffset], list[str]]:
        """The offsets a checkpoint after ``out`` stores (under ``offset_key`` of each topic),
        and the streams whose states it stores."""
        offsets = [SourceOffset(offset_key(topic), partition, offset)
                   for (topic, partition), offset in sorted(self.since(out).items())]
        return offsets, sorted(self.pending.touched | out.touched)

    def fresh(self, alarms: Sequence[Alarm]) -> list[Alarm]:
        """The alarm versions of ``alarms`` not delivered yet (a resync replays the batches since
        the last checkpoint: their alarms are delivered once); now counted as delivered."""
        fresh = [a for a in alarms if (a.id, a.revision) not in self._delivered]
        self._delivered.update((a.id, a.revision) for a in fresh)
        return fresh

    def checkpointed(self) -> RunSummary:
        """The pending progress is stored: commit it to the source; what it counted."""
        offsets = self.pending.offsets
        self._stored.update(offsets)
        self.commit(offsets)
        summary = self.rewind().summary
        if all(self._stored.get(tp, -1) >= offset for tp, offset in self._read_to.items()):
            self._delivered.clear()  # everything read is checkpointed: nothing can replay
        return summary

    def stored(self, offsets: Mapping[TopicPartition, int]) -> None:
        """``offsets`` are stored outside a checkpoint (a dead-lettered record): commit them."""
        self._stored.update(offsets)
        self.commit(offsets)

    def rewind(self) -> Pending:
        """Forget the progress since the last checkpoint (it is stored, or to be replayed);
        what it was."""
        pending, self.pending = self.pending, Pending()
        return pending

    def forget(self, tp: TopicPartition) -> None:
        """A partition revoked: nothing of it is read or stored here any more."""
        self._read_to.pop(tp, None)
        self._stored.pop(tp, None)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (stored) to the source, with any it refused before."""
        from connectors.errors import OffsetCommitError  # (connectors imports the Kafka client)

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
