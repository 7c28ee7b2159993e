"""Kill ``monitor run`` at random points of a Kafka replay, restart it, and record what happened.

The worker is the real command line (``monitor --db URL run --source kafka://... --group G
--config ...``) in its own process; "progress" is the sum of the next-offsets it stored in the
database. Each kill waits until the current incarnation has stored at least one batch past a random
threshold, then waits a random fraction of a batch time more (so kills land anywhere: in a poll,
in the pipeline, inside the database transaction, between the transaction and the Kafka commit,
in the alarm printing), then sends SIGKILL. At every kill the group's committed Kafka offsets are
checked against the database's: Kafka may lag the database, never lead it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.processes import (
    MOCK_URL_OPTIONS,
    OffsetWatch,
    WorkerProcess,
    group_offsets,
    wait_until,
)
from tests.support.streams import Example, end_offsets
from tests.support.workloads import produce


@dataclass
class KillRecord:
    """One SIGKILL: when, how far the database was, and Kafka's committed offsets then."""

    incarnation: int
    seconds_after_start: float
    stored: dict[int, int]
    committed: dict[int, int]

    @property
    def kafka_behind(self) -> bool:
        """Kafka's commit lagged the database (the kill fell between the two)."""
        return any(self.committed.get(p, 0) < o for p, o in self.stored.items())


@dataclass
class CrashRun:
    """What a replay with kills did."""

    end: dict[int, int]
    kills: list[KillRecord] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)
    seconds: float = 0.0

    def printed_alarm_ids(self) -> list[str]:
        """``id:revision`` of the alarm versions printed on stdout by every incarnation, in
        order (JSON lines; a revision is its alarm's id printed again with ``revision`` 2)."""
        ids = []
        for worker in self.workers:
            for line in worker.out.read_text().splitlines():
                if line.startswith("{"):
                    alarm = json.loads(line)
                    ids.append(f"{alarm['id']}:{alarm['revision']}")
        return ids

    def summary(self) -> dict[str, Any]:
        return {
            "kills": len(self.kills),
            "kills_with_kafka_behind_db": sum(k.kafka_behind for k in self.kills),
            "restarts": len(self.workers) - 1,
            "seconds": round(self.seconds, 1),
        }


def spawn(folder: Path, incarnation: int, db: str, bootstrap: str, topic: str, group: str,
          example: Example, batch_size: int) -> WorkerProcess:
    source = f"kafka://{bootstrap}/{topic}?{MOCK_URL_OPTIONS}"
    return WorkerProcess.cli(folder, f"worker-{incarnation:02d}", db, source, group,
                             example.config_args, batch_size=batch_size)


def replay_with_kills(
    example: Example, bootstrap: str, db: str, folder: Path, *, kills: int, seed: int,
    batch_size: int, startup_kills: int = 0, topic: str = "events", group: str = "monitor",
    timeout_s: float = 120.0,
) -> CrashRun:
    """Produce the example, then run/kill/restart the worker ``kills`` times after progress and
    ``startup_kills`` times at a random moment of its start (imports, migrations, building the
    monitors, joining the group, restoring state), in a seeded random order; a last incarnation
    finishes the topic and stops on SIGTERM (exit code 0 asserted)."""
    start = time.monotonic()
    run = CrashRun(end_offsets(produce(bootstrap, topic, example.values, example.keys)))
    total = sum(run.end.values())
    rng = np.random.default_rng(seed)
    thresholds = list(np.sort(rng.uniform(0.02, 0.95, size=kills)) * total)
    plan = _plan(thresholds, startup_kills, rng)
    stored = OffsetWatch(db, f"kafka:{topic}")
    try:
        for k, threshold in enumerate(plan):
            worker = spawn(folder, k, db, bootstrap, topic, group, example, batch_size)
            run.workers.append(worker)
            began, at_start = time.monotonic(), stored.total()
            if threshold is None:
                time.sleep(float(rng.uniform(0.3, 6.0)))  # somewhere in the start-up
            else:
                target = max(threshold, at_start + 1)
                wait_until(lambda t=target: stored.total() >= t,  # type: ignore[misc]
                           f"progress past {int(threshold)} of {total} (kill {k})", [worker],
                           timeout_s=timeout_s)
                time.sleep(float(rng.uniform(0.0, 0.25)))  # land anywhere in the next batch
            worker.kill()
            record = KillRecord(k, time.monotonic() - began, stored(),
                                group_offsets(bootstrap, group, topic, sorted(run.end)))
            _check_kafka_never_leads(record)
            run.kills.append(record)
        last = spawn(folder, len(plan), db, bootstrap, topic, group, example, batch_size)
        run.workers.append(last)
        wait_until(lambda: stored() == run.end, "stored offsets at the end of the topic",
                   [last], timeout_s=timeout_s)
        code = last.terminate()
        assert code == 0, last.tail()
    finally:
        for worker in run.workers:
            worker.ensure_dead()
        stored.close()
    run.seconds = time.monotonic() - start
    return run


def _plan(thresholds: list[float], startup_kills: int, rng: np.random.Generator
          ) -> list[float | None]:
    """Progress thresholds in increasing order, with ``None`` (a start-up kill) mixed in."""
    plan: list[float | None] = list(thresholds)
    for _ in range(startup_kills):
        plan.insert(int(rng.integers(0, len(plan) + 1)), None)
    return plan


def _check_kafka_never_leads(record: KillRecord) -> None:
    ahead = {p: (o, record.stored.get(p, 0)) for p, o in record.committed.items()
             if o > record.stored.get(p, 0)}
    assert not ahead, f"Kafka committed past the database at kill {record.incarnation}: {ahead}"


def duplicates(items: Sequence[str]) -> list[str]:
    return sorted(item for item, n in Counter(items).items() if n > 1)
