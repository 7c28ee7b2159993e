"""A configuration update with OOD on, through the worker and the database (issue 31, item 1).

Reproduced before the fix: the first OOD window the new version closed raised an ``IndexError``
(every later event of the stream an internal-error dead letter), or, with batches large enough
for the index to wrap, stored its windows with wrong indexes and timestamps. Now the stored
results are identical for any batch size, with the update stored while the worker runs or while
it is down, and with a stop or a kill -9 after the switch; no dead letter.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, func, select

from connectors import FileSource
from monitor.cli.runs import monitors_for_run
from monitor.db.engine import make_engine
from monitor.db.models import SourceOffsetRow
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import StopFlag, Worker
from monitor.ops.datasets import build_example
from monitor.streams.config import StreamConfig
from monitor.streams.setup import load_calibration, read_configs
from tests.support.databases import postgres_database
from tests.support.processes import WorkerProcess, wait_until
from tests.support.streams import Snapshot, differences, snapshot

CUT = 350  # the line after which version 2 is stored
WINDOW = 64


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Events, version 1's and version 2's configuration files (another alarm threshold and
    OOD level); OOD windows of WINDOW events, an extreme covariate shift from event 300."""
    folder = tmp_path_factory.mktemp("update_ood")
    paths = build_example(folder, seed=3, phases=(("stable", 300), ("extreme_covariate", 300)),
                          n_calibration=300, label_delay=5)
    config = yaml.safe_load(paths["config"].read_text())
    config["ood"] = {"window": WINDOW}
    paths["config"].write_text(yaml.safe_dump(config))
    v2 = folder / "v2.yaml"
    v2.write_text(yaml.safe_dump({**config, "ood": {"window": WINDOW, "alpha": 0.2},
                                  "alarm": {"rule": "shiryaev_roberts", "threshold": 1e5}}))
    return paths["events"], paths["config"], v2


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """Five fresh databases of one dialect."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path}/monitor{k}.db" for k in range(5)]
        return
    admin: Engine = request.getfixturevalue("postgres_admin")
    with ExitStack() as stack:
        yield [stack.enter_context(postgres_database(admin)) for _ in range(5)]


def _version2(path: Path) -> tuple[StreamConfig, Any]:
    (config,) = read_configs([str(path)])
    return config, load_calibration(config)


def _run(events: Path, url: str, configs: list[Path], batch: int, upto: int | None = None,
         update: Path | None = None) -> None:
    """A worker over ``events`` (``configs`` registered, or the stored streams), storing
    ``update`` as the next version once line CUT is read, until line ``upto`` (``None``: to the
    end of the file, with its end-of-file flush)."""
    sink = DatabaseSink(url)
    source = FileSource(events)
    monitors, stopped = monitors_for_run([str(p) for p in configs], sink)
    stop = StopFlag()

    def on_batch(_: object) -> None:
        if update is not None and source.position == CUT:
            assert sink.update(*_version2(update)) == (2, True)
        if upto is not None and source.position >= upto:
            stop.set()

    worker = Worker(source, Pipeline(monitors, source.name, stopped=stopped), sink, "file",
                    batch_size=batch, on_batch=on_batch, streams_refresh_s=0.0)
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()


def _stored(url: str) -> Snapshot:
    got = snapshot(url)
    assert got.dead_letters == []
    assert got.ood_windows
    return got


def _same(got: Snapshot, want: Snapshot) -> None:
    assert got.alarms == want.alarms
    assert got.checkpoints == want.checkpoints, [
        differences(got.checkpoints[s], want.checkpoints[s]) for s in want.checkpoints]
    assert got.trace_points == want.trace_points
    assert got.ood_windows == want.ood_windows
    assert got.ood_flags == want.ood_flags


def _offset(url: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.max(SourceOffsetRow.offset))).scalar() or 0)
    finally:
        engine.dispose()


def test_an_update_with_ood_gives_the_same_results_on_every_path(
    files: tuple[Path, Path, Path], databases: list[str], tmp_path: Path
) -> None:
    events, v1, v2 = files
    reference, *others = databases
    _run(events, reference, [v1], batch=50, update=v2)
    want = _stored(reference)
    windows = [(w[1], w[2], w[3]) for w in sorted(want.ood_windows, key=lambda w: w[1])]
    for a, b in itertools.pairwise(windows):  # (window_index, start, end)
        assert b[0] == a[0] + 1 and b[1] == a[2] + 1

    # Any batch size, the update stored while the worker runs.
    for batch, url in ((10, others[0]), (CUT, others[1])):
        _run(events, url, [v1], batch=batch, update=v2)
        _same(_stored(url), want)

    # Stored while the worker is down: the restart takes it up at the same event.
    _run(events, others[2], [v1], batch=50, upto=CUT)
    sink = DatabaseSink(others[2])
    assert sink.update(*_version2(v2)) == (2, True)
    sink.close()
    _run(events, others[2], [], batch=50)
    _same(_stored(others[2]), want)

    # A kill -9 after the switch: the restart from the last checkpoint ends the same.
    _run(events, others[3], [v1], batch=50, upto=CUT, update=v2)
    before = _offset(others[3])
    # batches of one event: hundreds of commits to go when the first one after the switch lands
    worker = WorkerProcess.cli(tmp_path, "killed", others[3], f"file:{events}", "g", [], 1)
    try:
        wait_until(lambda: _offset(others[3]) > before, "a batch after the update", [worker])
        worker.kill()
        assert worker.proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
    finally:
        worker.ensure_dead()
    # killed with lines left to read: the restart below resumes inside the file
    assert before < _offset(others[3]) < len(events.read_bytes().splitlines())
    _run(events, others[3], [], batch=50)
    _same(_stored(others[3]), want)
