"""Dead letters carry their stream when the event names a monitored one, and never stop the
records around them."""

from __future__ import annotations

import json
from pathlib import Path

from connectors import MemorySource
from monitor.db.errors import InvalidRecordError, sink_fault
from monitor.engine.pipeline import Pipeline
from monitor.engine.sink import Batch, Fault, NullSink
from monitor.engine.worker import Worker
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs


def test_dead_letters_name_their_stream_when_known(tmp_path: Path) -> None:
    paths = build_example(tmp_path, seed=2, phases=[("stable", 30)], n_calibration=100)
    good = paths["events"].read_bytes().splitlines()
    event = json.loads(good[0])
    wrong_dim = json.dumps({**event, "id": "x-1", "features": [1.0]}).encode()
    unknown = json.dumps({**event, "id": "x-2", "stream": "ghost"}).encode()
    source = MemorySource([good[0], wrong_dim, b"{not json", unknown, good[1]])
    pipeline = Pipeline(build_monitors(read_configs([str(paths["config"])])), source.name)
    out = pipeline.process(source.poll(10))
    assert out.events == 2
    letters = {letter.offset: letter for letter in out.dead_letters}
    assert sorted(letters) == [1, 2, 3]
    assert letters[1].stream == "shuttle" and "wrong feature dimension" in letters[1].reason
    assert letters[2].stream is None and "not valid JSON" in letters[2].reason
    assert letters[3].stream is None and "unknown stream 'ghost'" in letters[3].reason


class _RefusesFirstBatch(NullSink):
    """A sink whose database refuses the content of the first batch (then stores anything)."""

    def __init__(self) -> None:
        self.stored: list[Batch] = []

    def persist(self, batch: Batch) -> None:
        if not self.stored:
            self.stored.append(Batch())
            raise InvalidRecordError("record 0: field 'x' cannot be stored")
        self.stored.append(batch)

    def fault(self, exc: BaseException) -> Fault | None:
        return sink_fault(exc)  # the database sink's reading of its errors


def test_the_pipeline_and_the_worker_name_a_dead_letters_source_alike() -> None:
    """One record, dead-lettered by the pipeline (it does not decode) and by the worker (its
    results cannot be stored): both name its source as its offsets are keyed."""
    source = MemorySource([b"{not json"], topic="predictions")
    pipeline = Pipeline({}, source.name)
    by_pipeline = pipeline.process(source.poll(10)).dead_letters
    sink = _RefusesFirstBatch()
    Worker(MemorySource([b"{not json"], topic="predictions"), Pipeline({}, source.name), sink,
           source_kind="memory").run()
    by_worker = [letter for out in sink.stored for letter in out.dead_letters]
    assert [letter.reason for letter in by_worker] == [
        "results cannot be stored: InvalidRecordError: record 0: field 'x' cannot be stored"]
    assert {letter.source for letter in by_pipeline + by_worker} == {"memory:predictions"}
