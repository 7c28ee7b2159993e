"""What a run did: :class:`RunSummary` (the summary of ``monitor run --json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.engine.pipeline import BatchOutput
from monitor.streams.records import Alarm

__all__ = ["RunSummary"]


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
    #: Records of streams bound to another writer, by stream: not stored
    #: (:meth:`monitor.engine.fencing.Claims.drop_refused`).
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
