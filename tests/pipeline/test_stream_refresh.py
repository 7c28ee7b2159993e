"""Streams registered or updated while a worker runs (issue #14, "Stream lifecycle").

Reproduces the defect first measured: a stream registered while a worker ran was never picked
up, and all its events became dead letters. Now the worker re-reads the registry between batches
(every ``streams_refresh_s``): a new stream is monitored from the next batch on, and a new
configuration version restarts the stream's detectors from its calibration at the current event
index, with alarms naming the version in force.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from connectors import MemorySource
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import Worker
from monitor.ops.datasets import build_example
from monitor.streams.config import StreamConfig
from monitor.streams.setup import build_monitors, load_calibration, read_configs
from tests.support.streams import canonical


def _examples(tmp_path: Path) -> tuple[Path, Path, list[bytes]]:
    """Two streams, their events interleaved (``a`` first of each pair)."""
    a = build_example(tmp_path, seed=1, n_calibration=150, phases=[("stable", 300)], stream="a",
                      alarm={"rule": "shiryaev_roberts", "threshold": 50})
    b = build_example(tmp_path, seed=2, n_calibration=150, phases=[("stable", 300)], stream="b",
                      alarm={"rule": "shiryaev_roberts", "threshold": 50})
    lines_a = a["events"].read_bytes().splitlines()
    lines_b = b["events"].read_bytes().splitlines()
    values = [v for pair in zip(lines_a, lines_b, strict=True) for v in pair]
    return a["config"], b["config"], values


def _run(url: str, values: list[bytes], streams: list[str],
         after_batch: Callable[[int, DatabaseSink], None] | None = None,
         refresh: float | None = 0.0) -> tuple[Worker, list[BatchOutput]]:
    sink = DatabaseSink(url)
    source = MemorySource(values)
    monitors = build_monitors(read_configs(streams))
    for monitor in monitors.values():
        sink.register(monitor.config, monitor.calibration)
    outputs: list[BatchOutput] = []

    def on_batch(out: BatchOutput) -> None:
        outputs.append(out)
        if after_batch is not None:
            after_batch(len(outputs), sink)

    worker = Worker(source, Pipeline(monitors, source.name), sink, "memory", batch_size=50,
                    on_batch=on_batch, streams_refresh_s=refresh)
    try:
        worker.run()
    finally:
        source.close()
        sink.close()
    return worker, outputs


def test_a_stream_registered_while_running_is_picked_up(tmp_path: Path) -> None:
    config_a, config_b, values = _examples(tmp_path)
    config = read_configs([str(config_b)])[0]

    def register_b(batch: int, sink: DatabaseSink) -> None:
        if batch == 4:
            sink.register(config, load_calibration(config))

    url = f"sqlite:///{tmp_path / 'refresh.db'}"
    worker, outputs = _run(url, values, [str(config_a)], register_b)
    dead = [d for out in outputs for d in out.dead_letters]
    # Batches 1-4 (200 records, 100 of b) came before the registration; later ones are processed.
    assert len(dead) == 100 and {d.reason for d in dead} == {"unknown stream 'b'"}
    assert max(d.offset for d in dead) < 200
    assert worker.summary.events == len(values) - 100
    assert worker.pipeline.streams["b"].event_index == 200

    # Without the refresh (the defect): every later event of b is a dead letter as well.
    url = f"sqlite:///{tmp_path / 'no_refresh.db'}"
    worker, outputs = _run(url, values, [str(config_a)], register_b, refresh=None)
    assert sum(len(out.dead_letters) for out in outputs) == 300


def test_a_new_configuration_version_restarts_the_detectors(tmp_path: Path) -> None:
    config_a, _, values = _examples(tmp_path)
    values = values[::2]  # stream a only
    old = read_configs([str(config_a)])[0]
    changed = StreamConfig.model_validate(
        {**old.model_dump(mode="json"), "alarm": {"rule": "ville", "alpha": 0.05}}
    )

    def update_a(batch: int, sink: DatabaseSink) -> None:
        if batch == 2:
            assert sink.update(changed, load_calibration(old))[0] == 2

    url = f"sqlite:///{tmp_path / 'versions.db'}"
    worker, outputs = _run(url, values, [str(config_a)], update_a)
    monitor = worker.pipeline.streams["a"]
    assert (monitor.config_version, monitor.version_since) == (2, 100)
    assert monitor.config.alarm.rule == "ville"
    assert monitor.event_index == len(values)  # indexes go on: alarm ids never repeat
    # The detectors restarted at event 100: they saw the 200 later events only.
    assert monitor.detectors.covariate.n_seen == len(values) - 100
    alarms = [a for out in outputs for a in out.alarms]
    assert all(a.evidence["config_version"] == (1 if a.event_index < 100 else 2)
               for a in alarms)
    # Trace points name the version too, as stored (labels are inline: same event indexes).
    from sqlalchemy import select

    from monitor.db.engine import make_engine
    from monitor.db.models import TracePointRow

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            stored = connection.execute(
                select(TracePointRow.event_index, TracePointRow.config_version)
            ).all()
    finally:
        engine.dispose()
    assert stored and all(v == (1 if i < 100 else 2) for i, v in stored)
    # A worker restarting from the database resumes under version 2 where the first stopped.
    sink = DatabaseSink(url)
    try:
        stored = sink.load_state("a")
        assert stored is not None and stored["config_version"] == 2
        fresh = build_monitors([changed])["a"]
        fresh.config_version = 2
        fresh.load_state(stored)
        assert canonical(fresh.state_dict()) == canonical(monitor.state_dict())
    finally:
        sink.close()


def test_a_state_of_an_older_version_keeps_counters_and_labels_only(tmp_path: Path) -> None:
    config_a, _, values = _examples(tmp_path)
    config = read_configs([str(config_a)])[0]
    first = build_monitors([config])["a"]
    Pipeline({"a": first}, "memory").process(MemorySource(values[:200:2]).poll(100))
    state: dict[str, Any] = first.state_dict()
    second = build_monitors([config])["a"]
    second.config_version = 2
    second.load_state(state)
    assert (second.event_index, second.version_since) == (first.event_index, 100)
    assert second.detectors.covariate.n_seen == 0
    assert canonical(second.join.state_dict()) == canonical(first.join.state_dict())

