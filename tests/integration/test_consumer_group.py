"""Two workers in one consumer group share a 4-partition topic; one is stopped midway.

The three example streams are keyed onto three partitions. Both workers join before anything is
produced, so each owns two partitions (and at least one stream). Worker B is stopped with SIGTERM
while its partitions are partly processed: it finishes and commits its batch and leaves; worker
A is assigned B's partitions, restores the streams' state from PostgreSQL and seeks to the
offsets B stored. The results equal one uninterrupted run.

The stop is midway by construction, not by speed: only the first two thirds of the events are
produced before it, and the rest after B has left, so B cannot finish its partitions however
fast it runs (or however slowly the test polls). Every wait counts stored offsets or logged
assignments, with a timeout far above what the work takes on a loaded machine.

Both workers start with ``--config`` at the same moment, so both register the streams at once
(the registration race must not stop either). Migrations run once beforehand, as an operator
runs ``monitor db upgrade`` before starting a group. With interval checkpoints, B stores its
progress since its last checkpoint when its partitions are revoked, and A resumes from there.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from connectors.mock_kafka import produce_kafka_python
from monitor.db.migrate import upgrade
from tests.support.processes import (
    PATIENCE_S,
    OffsetWatch,
    WorkerProcess,
    assignments,
    group_offsets,
    owned,
    wait_until,
)
from tests.support.streams import (
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    snapshot,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

TopicPartition = tuple[str, int]

@pytest.mark.parametrize(
    ("client", "checkpoint_every"),
    [("kafka-python", 1), ("kafka-python", 3), ("confluent", 1), ("confluent", 3)],
    ids=["every-batch", "checkpoint-every-3", "confluent-every-batch",
         "confluent-checkpoint-every-3"],
)
def test_two_workers_share_partitions_and_one_stops_midway(
    client: str, checkpoint_every: int, kafka_broker_module: str, pg_url: str, example: Example,
    reference: Snapshot, tmp_path: Path
) -> None:
    topic, group = f"group-{client}-{checkpoint_every}", f"g-group-{client}-{checkpoint_every}"
    upgrade(pg_url)
    source = f"kafka://{kafka_broker_module}/{topic}?client={client}"
    a, b = (WorkerProcess.patient(tmp_path, name, pg_url, source, group, example.config_args,
                                  batch_size=20, checkpoint_every=checkpoint_every)
            for name in ("a", "b"))
    stored = OffsetWatch(pg_url, f"kafka:{topic}")
    before = len(example.values) * 2 // 3
    try:
        wait_until(lambda: len(owned(a)) == 2 and len(owned(b)) == 2, "a 2 + 2 split", [a, b])
        assert owned(a) | owned(b) == {0, 1, 2, 3}
        placed = produce_kafka_python(kafka_broker_module, topic, example.values[:before],
                                      example.keys[:before])
        b_partitions = owned(b)
        b_before = sum(end_offsets(placed).get(p, 0) for p in b_partitions)
        assert b_before > 0 and sum(end_offsets(placed).values()) > b_before  # each has work
        b_done = lambda: sum(stored().get(p, 0) for p in b_partitions)  # noqa: E731
        wait_until(lambda: b_done() >= b_before // 2, "b halfway through what exists", [a, b])
        b.proc.send_signal(signal.SIGTERM)
        # B's last offsets once it has left the group: its process takes seconds more to exit,
        # and A may take the partitions over meanwhile (librdkafka rejoins within ~2 s).
        wait_until(lambda: "left group" in b.logs(), "b left the group", [a])
        at_stop = stored()
        assert b.proc.wait(PATIENCE_S) == 0, b.tail()
        placed += produce_kafka_python(kafka_broker_module, topic, example.values[before:],
                                       example.keys[before:])
        end = end_offsets(placed)
        assert b_done() < sum(end.get(p, 0) for p in b_partitions)  # b stopped midway
        wait_until(lambda: stored() == end, "stored offsets at the end", [a])
        assert a.terminate(timeout_s=PATIENCE_S) == 0, a.tail()
    finally:
        for worker in (a, b):
            worker.ensure_dead()
        stored.close()
    assert_same_results(snapshot(pg_url), reference)
    assert group_offsets(kafka_broker_module, group, topic, range(4)) == end
    assert owned(a) == {0, 1, 2, 3}  # a took over b's partitions ...
    takeover = assignments(a)[-1][1]
    for p in b_partitions & set(at_stop):  # ... and resumed where b's last batch ended
        assert f"('{topic}', {p}): {at_stop[p]}" in takeover, takeover
    assert "stop requested" in b.logs() and f"revoked [('{topic}'," in b.logs()
