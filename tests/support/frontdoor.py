"""The front door's test data and runs: river's ImageSegments (bundled, no download) as dict
columns with string class labels, and ``monitor run`` in-process on an events file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.cli.main import main


@dataclass(frozen=True)
class Split:
    """Columns (dict of lists) of a train, a held-out (calibration) and a live part."""

    train: dict[str, list[Any]]
    held_out: dict[str, list[Any]]
    live: dict[str, list[Any]]
    features: tuple[str, ...]


def segments(seed: int = 0, n_train: int = 800, n_held_out: int = 600) -> Split:
    """ImageSegments (2 310 rows, 18 numeric features, 7 named classes) shuffled by ``seed``;
    the label column is ``label``. The live part is every row left."""
    from river.datasets import ImageSegments

    rows = [x | {"label": y} for x, y in ImageSegments()]
    order = np.random.default_rng(seed).permutation(len(rows))
    names = tuple(k for k in rows[0] if k != "label")

    def columns(idx: np.ndarray) -> dict[str, list[Any]]:
        return {k: [rows[i][k] for i in idx] for k in (*names, "label")}

    cut = n_train + n_held_out
    return Split(columns(order[:n_train]), columns(order[n_train:cut]),
                 columns(order[cut:]), names)


def feature_matrix(columns: dict[str, list[Any]], names: tuple[str, ...]) -> np.ndarray:
    return np.column_stack([np.asarray(columns[n], dtype=float) for n in names])


def run(capsys: pytest.CaptureFixture[str], db: Path, config: Path, events: Path
        ) -> dict[str, Any]:
    """``monitor --db sqlite:///DB run --config CONFIG --source file:EVENTS --json``: its
    summary (the last line)."""
    capsys.readouterr()
    code = main(["--db", f"sqlite:///{db}", "run", "--config", str(config), "--source",
                 f"file:{events}", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out.splitlines()[-1]))
