"""A writer refused for a stream leaves nothing a replay could count twice (issue 31, item 2).

Two consumer groups read one topic into one database: the first binds every stream, the second
is refused for each of them. Before, each record the second group read became a dead letter
(``stream 'S' is bound to …``) and ``monitor dead-letters replay`` fed these events, already
processed by the first group, into the streams again (checkpoint counts doubled, trace points
378 → 762, new alarms). Now the refused group stores no dead letter for them (it logs one line
per stream and counts the records), and a replay of dead letters an older version stored so is
refused for each of them; results equal one worker's throughout.

Through librdkafka's mock cluster (connectors/mock_kafka.py) into PostgreSQL (and SQLite for the
first test).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connectors import KafkaSource
from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS, produce_kafka_python
from monitor.cli.dead_letters import DeadLetterFilter, replay_dead_letters
from monitor.cli.main import main
from monitor.cli.runs import registered_monitors
from monitor.db.migrate import upgrade
from monitor.db.sink import DatabaseSink
from monitor.engine.batch import Batch
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import RunSummary, StopFlag, Worker
from monitor.streams.records import DeadLetter
from monitor.streams.setup import load_calibration, read_configs
from tests.support.streams import (
    POISON,
    STREAMS,
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    snapshot,
)

pytestmark = [pytest.mark.postgres, pytest.mark.kafka]

TOPIC = "refused-replay"


def register(sink: DatabaseSink, example: Example) -> None:
    """``monitor streams create`` of the example streams (replay runs registered streams)."""
    for config in read_configs(map(str, example.configs)):
        sink.register(config, load_calibration(config))


def run_group(bootstrap: str, url: str, group: str, end: dict[int, int]) -> RunSummary:
    """A worker of ``group`` over the topic, stopped once it has committed ``end``."""
    sink = DatabaseSink(url)
    source = KafkaSource(bootstrap, TOPIC, group, **MOCK_CONSUMER_OPTIONS)
    pipeline = Pipeline(registered_monitors(sink, sink.registered()[0]), source.name)
    stop = StopFlag()
    want = {(TOPIC, p): o for p, o in end.items()}

    def at_end(_: BatchOutput) -> None:
        if all(source.committed.get(tp, 0) >= o for tp, o in want.items()):
            stop.set()

    worker = Worker(source, pipeline, sink, "kafka", batch_size=50, on_batch=at_end)
    try:
        return worker.run(stop)
    finally:
        source.close()
        sink.close()


def results(snap: Snapshot) -> tuple[object, ...]:
    return snap.alarms, snap.trace_points, snap.checkpoints, snap.ood_windows, snap.ood_flags


def test_a_refused_group_leaves_nothing_to_replay(
    kafka_broker: str, empty_database_url: str, example: Example, reference: Snapshot
) -> None:
    """On PostgreSQL and SQLite (the reference run is PostgreSQL's)."""
    url = empty_database_url
    upgrade(url)
    sink = DatabaseSink(url)
    try:
        register(sink, example)
        end = end_offsets(produce_kafka_python(kafka_broker, TOPIC, example.values,
                                               example.keys))
        run_group(kafka_broker, url, "blue", end)
        single = snapshot(url)
        if url.startswith("postgresql"):
            assert_same_results(single, reference)

        refused = run_group(kafka_broker, url, "green", end)
        both = snapshot(url)
        assert results(both) == results(single)

        report = replay_dead_letters(sink, DeadLetterFilter())
        after = snapshot(url)
        assert (len(after.alarms), len(after.trace_points)) == (
            len(single.alarms), len(single.trace_points)), report.to_json()["by_stream"]
        assert results(after) == results(single)
        assert report.replayed == 0

        assert not [d for d in both.dead_letters if " is bound to " in d[1]]
        assert both.dead_letter_rows == len(POISON)  # the poison records, once each
        # Every record that names the stream: its predictions and labels, and for loans the
        # poison record with two features (the stream's writer dead-letters it, once).
        assert refused.refused == {"bikes": 1200, "taxis": 500, "loans": 801}
        assert refused.to_json()["refused"] == refused.refused
    finally:
        sink.close()


def test_dead_letters_of_a_refused_writer_are_not_replayed(
    kafka_broker: str, pg_url: str, example: Example, reference: Snapshot
) -> None:
    """Dead letters stored by a refused writer (as versions before this one did) are skipped by
    the replay, and its dry run says which and why."""
    upgrade(pg_url)
    sink = DatabaseSink(pg_url)
    try:
        register(sink, example)
        end = end_offsets(placed := produce_kafka_python(kafka_broker, TOPIC, example.values,
                                                         example.keys))
        run_group(kafka_broker, pg_url, "blue", end)
        single = snapshot(pg_url)
        ts = datetime(2026, 1, 1, tzinfo=UTC)
        stored = [
            DeadLetter(f"kafka:{TOPIC}#green", p, o,
                       f"stream {key!r} is bound to kafka:{TOPIC} (consumer group 'blue')",
                       value, ts, stream=key)
            for (p, o), key, value in zip(placed, example.keys, example.values, strict=True)
            if (key, value) not in POISON
        ]
        with sink.sessions() as session:
            from monitor.db.store import persist_batch

            persist_batch(session, Batch(dead_letters=stored))

        dry = replay_dead_letters(sink, DeadLetterFilter(), dry_run=True)
        assert (dry.replayed, dry.skipped) == (0, len(stored))
        assert {s.reason for s in dry.skips} == {
            f"stored by a writer refused for stream {s.name!r}: the stream's own writer reads "
            "this record" for s in STREAMS
        }
        done = replay_dead_letters(sink, DeadLetterFilter())
        assert (done.replayed, done.skipped) == (0, len(stored))
        after = snapshot(pg_url)
        assert results(after) == results(single)
        assert after.dead_letter_rows == single.dead_letter_rows + len(stored)  # kept, unchanged
    finally:
        sink.close()


def test_a_rebind_to_a_group_that_read_ahead_says_what_it_leaves_out(
    kafka_broker: str, pg_url: str, example: Example, capsys: pytest.CaptureFixture[str]
) -> None:
    """Blue read the first half of the topic, green (refused) all of it: rebound to green, the
    streams resume at green's positions, and the command says which offsets neither group
    processes for them (docs/operations.md, "A refused writer and replays")."""
    upgrade(pg_url)
    sink = DatabaseSink(pg_url)
    try:
        register(sink, example)
    finally:
        sink.close()
    half = len(example.values) // 2
    first = end_offsets(produce_kafka_python(kafka_broker, TOPIC, example.values[:half],
                                             example.keys[:half]))
    run_group(kafka_broker, pg_url, "blue", first)
    end = {**first, **end_offsets(produce_kafka_python(
        kafka_broker, TOPIC, example.values[half:], example.keys[half:]))}
    run_group(kafka_broker, pg_url, "green", end)
    capsys.readouterr()
    assert main(["--db", pg_url, "streams", "rebind", "bikes", "--group", "green"]) == 0
    out, err = capsys.readouterr()
    assert "stream 'bikes' is bound to kafka:refused-replay (consumer group 'green')" in out
    gaps = ", ".join(f"partition {p}: {first[p]} → {end[p]}" for p in sorted(end))
    assert err == (f"warning: the new group has already read past the old one's positions "
                   f"({gaps}); it resumes at its own, so the stream's records in between are "
                   "processed by neither (docs/operations.md, \"A refused writer and "
                   "replays\")\n")
