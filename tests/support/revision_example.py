"""The example stream of the revision tests: frequent Ville alarms (alpha 0.5), a short
re-baseline (20 events) and labels 7 events late, so that when the extreme shift starts
(event 150) alarms are raised with fewer than ``MIN_EVENTS`` labelled events of evidence and
are revised once they arrive; attribution windows of ``WINDOW`` predictions. Also the worker
run of the configuration-update tests: a new version stored between two batches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from monitor.ops.datasets import build_example
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.monitor import StreamMonitor

MIN_EVENTS = 15
WINDOW = 30


def revision_example(folder: Path) -> tuple[Path, list[bytes]]:
    """The stream's configuration file and its events (JSONL lines)."""
    paths = build_example(folder, seed=4, phases=(("stable", 150), ("extreme_covariate", 250)),
                          n_calibration=300, label_delay=7, alarm={"rule": "ville", "alpha": 0.5})
    config = yaml.safe_load(paths["config"].read_text())
    config |= {"rebaseline": 20, "diagnosis": {"min_events": MIN_EVENTS},
               "attribution": {"window": WINDOW}}
    paths["config"].write_text(yaml.safe_dump(config))
    return paths["config"], paths["events"].read_bytes().splitlines()


def run_worker_with_update(
    config: StreamConfig, values: list[bytes], database_url: str, batch_size: int,
    update_after: int, version2: tuple[StreamConfig, Calibration],
    before_update: Callable[[StreamMonitor], None] = lambda monitor: None,
) -> StreamMonitor:
    """A worker over ``values`` (batches of ``batch_size``) writing to ``database_url``, where
    ``config`` is registered as version 1; after its ``update_after``-th batch ``version2`` is
    stored (``before_update`` sees the stream's monitor first) and the worker takes it up.
    Returns the stream's monitor at the end."""
    from connectors import MemorySource
    from monitor.db.sink import DatabaseSink
    from monitor.engine.pipeline import BatchOutput, Pipeline
    from monitor.engine.worker import Worker
    from monitor.streams.setup import build_monitors

    sink = DatabaseSink(database_url)
    source = MemorySource(values)
    monitors = build_monitors([config])
    sink.register(config, monitors[config.name].calibration)
    batches = 0

    def on_batch(out: BatchOutput) -> None:
        nonlocal batches
        batches += 1
        if batches == update_after:
            before_update(monitors[config.name])
            assert sink.update(*version2)[0] == 2

    worker = Worker(source, Pipeline(monitors, source.name), sink, "memory",
                    batch_size=batch_size, on_batch=on_batch, streams_refresh_s=0.0)
    try:
        worker.run()
    finally:
        source.close()
        sink.close()
    return worker.pipeline.streams[config.name]
