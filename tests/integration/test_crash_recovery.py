"""SIGKILL ``monitor run`` at random points of a replay, restart it: nothing changes.

The worker persists each batch (results, detector checkpoints, offsets) in one transaction and
commits the Kafka offsets afterwards, so a kill can land before, inside or after either step.
Whatever the point, the restarted worker restores from PostgreSQL and seeks to the stored
offsets: the final alarms, checkpoints, traces, OOD windows and dead letters equal an
uninterrupted run's, and no alarm or dead letter is stored twice.

With interval checkpoints (``--checkpoint-every 3``) a kill also lands between checkpoints, after
results were stored without the states and offsets that cover them: the restarted worker replays
those batches (their results are stored once) and nothing changes either. No worker process
delivers an alarm twice; across a kill, at-least-once (docs/streaming.md).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from connectors.mock_kafka import produce_kafka_python
from tests.support.kafka import MOCK_URL_OPTIONS_BY_CLIENT
from tests.support.processes import (
    OffsetWatch,
    WorkerProcess,
    group_offsets,
    wait_until,
)
from tests.support.streams import (
    POISON,
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    snapshot,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]



@pytest.mark.parametrize(
    ("client", "kills", "batch_size", "checkpoint_every"),
    [
        # Small batches (a hundred or more transactions per replay), so that kills land mid-replay.
        pytest.param("kafka-python", 3, 20, 1, id="3-kills"),
        pytest.param("kafka-python", 3, 20, 3, id="3-kills-checkpoint-every-3"),
        pytest.param("confluent", 3, 20, 1, id="confluent-3-kills"),
        pytest.param("confluent", 3, 20, 3, id="confluent-3-kills-checkpoint-every-3"),
        pytest.param("kafka-python", 8, 7, 1, id="8-kills", marks=pytest.mark.slow),
    ],
)
def test_sigkill_at_random_points_then_restart_changes_nothing(
    client: str, kills: int, batch_size: int, checkpoint_every: int, kafka_broker_module: str,
    pg_url: str, example: Example, reference: Snapshot, tmp_path: Path,
) -> None:
    topic = f"crash-{client}-{kills}-{checkpoint_every}"
    group = f"g-{topic}"
    end = end_offsets(produce_kafka_python(kafka_broker_module, topic, example.values,
                                           example.keys))
    total = sum(end.values())
    source = f"kafka://{kafka_broker_module}/{topic}?{MOCK_URL_OPTIONS_BY_CLIENT[client]}"
    rng = np.random.default_rng(2026 + kills)
    thresholds = np.sort(rng.uniform(0.1, 0.7, size=kills) * total)
    stored = OffsetWatch(pg_url, f"kafka:{topic}")
    at_kill: list[int] = []
    try:
        for i, threshold in enumerate(thresholds):
            worker = WorkerProcess.cli(tmp_path, f"killed-{i}", pg_url, source, group,
                                       example.config_args, batch_size=batch_size,
                                       checkpoint_every=checkpoint_every)
            try:
                reached = lambda n=threshold: stored.total() >= n  # noqa: E731
                wait_until(reached, f"{threshold:.0f} records stored", [worker])
                worker.kill()
            finally:
                worker.ensure_dead()
            offsets = stored()
            at_kill.append(sum(offsets.values()))
            committed = group_offsets(kafka_broker_module, group, topic, range(4))
            # Kafka's committed offsets never run ahead of the results in the database.
            assert all(o <= offsets.get(p, 0) for p, o in committed.items()), (committed, offsets)
        assert at_kill[0] > 0 and at_kill[-1] < total, (at_kill, total)  # killed mid-replay
        final = WorkerProcess.cli(tmp_path, "final", pg_url, source, group, example.config_args,
                                  batch_size=batch_size, checkpoint_every=checkpoint_every)
        try:
            wait_until(lambda: stored() == end, "stored offsets at the end", [final])
            assert final.terminate() == 0, final.tail()
        finally:
            final.ensure_dead()
    finally:
        stored.close()
    got = snapshot(pg_url)
    assert_same_results(got, reference)  # includes: exactly len(POISON) dead-letter rows
    assert len(set(got.alarm_keys)) == len(got.alarms) == len(reference.alarms)
    assert got.dead_letter_rows == len(POISON)
    assert group_offsets(kafka_broker_module, group, topic, range(4)) == end
    resumed = [line for line in final.logs().splitlines() if "resuming at {" in line]
    assert resumed, "the restarted worker did not seek to the stored offsets"
    # `monitor run` prints each alarm it delivers: never twice within one process.
    outs = [tmp_path / f"killed-{i}.out" for i in range(kills)] + [final.out]
    for out in outs:
        assert [i for i, n in Counter(delivered_ids(out)).items() if n > 1] == [], out.name
    assert sum(len(delivered_ids(out)) for out in outs) >= len(got.alarms) // 2  # it printed


def delivered_ids(out: Path) -> list[str]:
    """``id:revision`` of the alarm versions a ``monitor run`` process printed (a killed one may
    end mid-line); a revision is the same alarm id delivered again with ``revision`` 2."""
    ids = []
    for line in out.read_text().splitlines():
        try:
            alarm = json.loads(line)
            ids.append(f"{alarm['id']}:{alarm['revision']}")
        except ValueError:
            continue
    return ids
