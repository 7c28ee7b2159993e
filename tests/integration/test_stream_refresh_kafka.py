"""A stream registered while a Kafka worker runs is picked up (issue #14, "Stream lifecycle"),
over the Kafka wire protocol (librdkafka's mock broker) into PostgreSQL: its records read before
the registration are dead letters (``unknown stream``), every later one is processed, and its
checkpoint is stored with the others'."""

from __future__ import annotations

from pathlib import Path

from connectors import KafkaSource
from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS, produce_kafka_python
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import StopFlag, Worker
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, load_calibration, read_configs


def test_a_stream_registered_while_a_kafka_worker_runs_is_processed(
    kafka_broker: str, pg_url: str, tmp_path: Path
) -> None:
    paths = {
        name: build_example(tmp_path, seed=seed, n_calibration=150, phases=[("stable", 300)],
                            stream=name)
        for seed, name in ((1, "bikes"), (2, "taxis"))
    }
    values, keys = [], []
    for name, p in paths.items():
        lines = p["events"].read_bytes().splitlines()
        values += lines
        keys += [name] * len(lines)
    produce_kafka_python(kafka_broker, "late-stream", values, keys)
    late = read_configs([str(paths["taxis"]["config"])])[0]

    sink = DatabaseSink(pg_url)
    source = KafkaSource(kafka_broker, "late-stream", "g-late", **MOCK_CONSUMER_OPTIONS)
    pipeline = Pipeline(build_monitors(read_configs([str(paths["bikes"]["config"])])),
                        source.name)
    sink.register(pipeline.streams["bikes"].config, pipeline.streams["bikes"].calibration)
    stop = StopFlag()
    seen = {"records": 0, "registered": False}

    def on_batch(out: BatchOutput) -> None:
        seen["records"] += out.events + len(out.dead_letters)
        if not seen["registered"] and any(d.stream is None for d in out.dead_letters):
            sink.register(late, load_calibration(late))  # `monitor streams create` meanwhile
            seen["registered"] = True
        if seen["records"] >= len(values):
            stop.set()

    worker = Worker(source, pipeline, sink, "kafka", batch_size=50, on_batch=on_batch,
                    streams_refresh_s=0.0)
    try:
        worker.run(stop)
    finally:
        source.close()
    try:
        state = sink.load_state("taxis")
    finally:
        sink.close()
    dead = worker.summary.dead_letters
    assert seen["registered"] and 0 < dead < 300  # only the records read before registering
    assert "taxis" in worker.pipeline.streams
    assert worker.pipeline.streams["taxis"].event_index == 300 - dead
    assert state is not None and state["event_index"] == 300 - dead
