"""The log of a file run speaks of the file's lines, not of Kafka's partitions, committed offsets
and revocations."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from monitor.cli.main import main
from monitor.ops.datasets import build_example

KAFKA_WORDS = ("assigned", "revoked", "committed offsets", "partition")


def _run(url: str, paths: dict[str, Path], caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    argv = ["--db", url, "run", "--source", f"file:{paths['events']}", "--config",
            str(paths["config"]), "--json"]
    assert main(argv) == 0
    return [r.getMessage() for r in caplog.records if r.name == "monitor.engine.worker"]


def test_a_file_run_logs_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = build_example(tmp_path, seed=1, n_calibration=100, phases=[("stable", 120)])
    path = str(paths["events"].resolve())
    lines = len(paths["events"].read_bytes().splitlines())
    url = f"sqlite:///{tmp_path / 'm.db'}"
    caplog.set_level(logging.INFO, logger="monitor.engine.worker")
    first = _run(url, paths, caplog)
    assert first == [f"reading {path} from its first line", f"stopped reading {path}"]
    again = _run(url, paths, caplog)  # resumes after the stored offset
    assert again == [
        f"reading {path}: resuming after line {lines} (stored in the database)",
        f"stopped reading {path}",
    ]
    assert not [m for m in first + again if any(w in m for w in KAFKA_WORDS)]
