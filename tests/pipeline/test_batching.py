"""Poll-batch boundaries never change a result (issue #5: each batch's inputs are scored at once).

A replay after a crash or a rebalance polls other batches than the first run did; the detectors'
results must not depend on them, down to the last bit of every trace value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from connectors import FileSource
from monitor.datasets import build_example
from monitor.pipeline import BatchOutput, Pipeline
from monitor.runner import build_monitors, read_configs
from monitor.worker import NullSink, Worker


def run(paths: dict[str, Path], batch_size: int) -> dict[str, list[Any]]:
    source = FileSource(paths["events"])
    pipeline = Pipeline(build_monitors(read_configs([str(paths["config"])])), source.name)
    worker = Worker(source, pipeline, NullSink(), "file", batch_size=batch_size)
    got: dict[str, list[Any]] = {"alarms": [], "traces": [], "windows": []}

    def keep(out: BatchOutput) -> None:
        got["alarms"] += [a.to_json() for a in out.alarms]
        got["traces"] += [repr(t) for t in out.trace_points]  # repr: nan == nan, exact floats
        got["windows"] += [repr(w) for w in out.ood_windows]

    worker.on_batch = keep
    worker.run()
    source.close()
    return got


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_example(tmp_path_factory.mktemp("batching"), seed=3, n_calibration=200,
                         phases=[("stable", 150), ("extreme_covariate", 100)], label_delay=7)


def test_results_do_not_depend_on_batch_boundaries(example: dict[str, Path]) -> None:
    whole = run(example, batch_size=500)
    assert whole["alarms"], "the example's shift should raise an alarm"
    for batch_size in (1, 37):
        assert run(example, batch_size) == whole, f"batches of {batch_size}"
