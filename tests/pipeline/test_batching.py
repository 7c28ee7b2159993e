"""Poll-batch boundaries never change a result (issue #5: each batch's inputs are scored at once).

A replay after a crash or a rebalance polls other batches than the first run did; the detectors'
results must not depend on them, down to the last bit of every trace value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from connectors import FileSource
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import NullSink, Worker
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs


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


def test_checkpoint_every_comes_from_the_flag_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``monitor run --checkpoint-every N`` over ``MONITOR_CHECKPOINT_EVERY`` over 5, as for
    ``--batch-size``; each run ends with the same summary."""
    import monitor.cli.runs
    from monitor.cli.main import main

    given: list[int] = []

    class Recording(Worker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            given.append(kwargs["checkpoint_every"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(monitor.cli.runs, "Worker", Recording)
    paths = build_example(tmp_path, seed=1, n_calibration=100, phases=[("stable", 120)])

    def argv(run: int) -> list[str]:
        return ["--db", f"sqlite:///{tmp_path / f'{run}.db'}", "run", "--source",
                f"file:{paths['events']}", "--config", str(paths["config"]), "--batch-size",
                "10", "--json"]

    assert main(argv(1)) == 0
    monkeypatch.setenv("MONITOR_CHECKPOINT_EVERY", "7")
    assert main(argv(2)) == 0
    assert main([*argv(3), "--checkpoint-every", "3"]) == 0
    assert given == [5, 7, 3]
    summaries = [line for line in capsys.readouterr().out.splitlines() if '"events"' in line]
    assert len(summaries) == 3 and len(set(summaries)) == 1


def test_checkpoint_every_must_be_positive() -> None:
    from pydantic import ValidationError

    from monitor.settings import Settings

    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(checkpoint_every=0)
    with pytest.raises(ValueError, match="checkpoint_every must be >= 1, got 0"):
        Worker(FileSource(Path(__file__)), Pipeline({}, "x"), NullSink(), "file",
               checkpoint_every=0)
