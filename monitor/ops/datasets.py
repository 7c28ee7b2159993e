"""Real bundled data with scripted, documented shifts (no downloads).

The data and the fitted models are the tasks of :mod:`monitor.ops.tasks` (the Shuttle
regression task, the Banana classification task); this module draws calibration sets and
streams from their held-out pools and writes them out as example streams
(:func:`build_example`).

Scripted shifts (WATCH-style, Prinster et al. 2025, Sec. 5; see ``docs/detectors.md``):

``stable``
    Rows drawn uniformly from the pool (exchangeable with the calibration rows).
``benign_covariate``
    Rows drawn without replacement with probability ∝ exp(λ·g(x)), g(x) = −(f3 − f7)
    standardised on the calibration rows (``f3 − f7`` is ``f1``). The rows are real, so p(y | x)
    is unchanged and every row lies in the calibration support; the tilt favours inputs with
    large residuals, so an unweighted CTM sees worse scores although nothing harmful happened.
``concept``
    Rows drawn uniformly; in the region ``f7 ≥ median`` (of the calibration rows) each label is
    replaced by the label of another random pool row of the same region (labels permuted within
    the region): p(x) is unchanged, p(y | x) is not.
``extreme_covariate``
    Rows drawn uniformly, then ``f3`` and the target are both moved up by ``extreme_shift`` times
    the range of ``f3`` in the data, so every shifted ``f3`` is at least the largest in the data
    (the identity ``f9 = f3 − f7 − f5`` moves the target with ``f3``). Every input lies outside
    the calibration support and the model, which saturates beyond the range it was trained on,
    fails.

Kinds combine with ``+`` (``"benign_covariate+concept"``: tilted inputs with permuted labels).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from monitor.ops.tasks import (
    BANANA_FEATURES,
    SHUTTLE_COLUMNS,
    SHUTTLE_FEATURES,
    SHUTTLE_TARGET,
    ClassificationTask,
    FloatArray,
    RegressionTask,
    banana_path,
    load_banana,
    load_banana_classification,
    load_shuttle,
    load_shuttle_regression,
    shuttle_path,
)

__all__ = [
    "BANANA_FEATURES",
    "DEMO_PHASES",
    "SHIFT_KINDS",
    "SHUTTLE_COLUMNS",
    "SHUTTLE_FEATURES",
    "SHUTTLE_TARGET",
    "ClassificationTask",
    "Phase",
    "RegressionTask",
    "ScriptedStream",
    "banana_path",
    "build_example",
    "load_banana",
    "load_banana_classification",
    "load_shuttle",
    "load_shuttle_regression",
    "make_stream",
    "shuttle_path",
]

SHIFT_KINDS: tuple[str, ...] = ("stable", "benign_covariate", "concept", "extreme_covariate")

#: Phases of the example stream used by ``monitor demo`` and the README.
DEMO_PHASES: tuple[tuple[str, int], ...] = (
    ("stable", 600),
    ("benign_covariate", 900),
    ("benign_covariate+concept", 700),
    ("extreme_covariate", 700),
)

_START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Phase:
    """A regime of a scripted stream: events ``start <= i < stop`` (stream positions)."""

    kind: str
    start: int
    stop: int


@dataclass(frozen=True, eq=False)
class ScriptedStream:
    """A calibration set and a stream of events with scripted shifts, all with predictions."""

    X_calibration: FloatArray
    y_calibration: FloatArray
    pred_calibration: FloatArray
    X: FloatArray
    y: FloatArray
    pred: FloatArray
    phases: tuple[Phase, ...]
    feature_names: tuple[str, ...] = field(default=SHUTTLE_FEATURES)

    @property
    def change_points(self) -> tuple[int, ...]:
        """Stream positions where a new phase starts (the first phase excluded)."""
        return tuple(p.start for p in self.phases[1:])

    def __len__(self) -> int:
        return int(self.y.shape[0])


def make_stream(
    task: RegressionTask,
    phases: Sequence[tuple[str, int]] = (("stable", 1000),),
    n_calibration: int = 1000,
    seed: int = 0,
    tilt: float = 1.0,
    extreme_shift: float = 1.0,
) -> ScriptedStream:
    """Draw a calibration set and a stream with the scripted ``phases`` from ``task``'s pool.

    Parameters
    ----------
    task
        The fitted model and its pool (:func:`load_shuttle_regression`).
    phases
        ``(kind, n_events)`` pairs in stream order; ``kind`` is one of :data:`SHIFT_KINDS` or
        several joined by ``+``.
    n_calibration
        Calibration rows, drawn uniformly from the pool and never reused in the stream.
    seed
        Seed of every random draw (rows, tilt, label permutation).
    tilt
        λ of the benign covariate tilt exp(λ·g(x)).
    extreme_shift
        Shift of ``f3`` (and the target) in the extreme phase, in ranges of ``f3`` over the pool.

    Examples
    --------
    >>> task = load_shuttle_regression()
    >>> s = make_stream(task, [("stable", 100), ("extreme_covariate", 50)], n_calibration=200)
    >>> len(s), s.change_points, bool(s.X[100:, 1].min() >= s.X_calibration[:, 1].max())
    (150, (100,), True)
    """
    _check_phases(phases, n_calibration, task.y.shape[0])
    rng = np.random.default_rng(seed)
    order = rng.permutation(task.y.shape[0])
    cal, free = order[:n_calibration], order[n_calibration:]
    shifts = _Shifts(task, cal, tilt, extreme_shift)
    used = np.zeros(task.y.shape[0], dtype=bool)
    used[cal] = True
    parts, spans, start = [], [], 0
    for kind, n in phases:
        parts.append(shifts.draw(kind, n, free, used, rng))
        spans.append(Phase(kind, start, start + n))
        start += n
    empty = (np.empty((0, task.X.shape[1])), np.empty(0), np.empty(0))
    X, y, pred = (np.concatenate([p[i] for p in [empty, *parts]]) for i in range(3))
    return ScriptedStream(
        task.X[cal].copy(),
        task.y[cal].copy(),
        task.pred[cal].copy(),
        X,
        y,
        pred,
        tuple(spans),
        task.feature_names,
    )


def _check_phases(phases: Sequence[tuple[str, int]], n_calibration: int, n_pool: int) -> None:
    for kind, n in phases:
        for part in kind.split("+"):
            if part not in SHIFT_KINDS:
                raise ValueError(f"phase kind must be one of {list(SHIFT_KINDS)}, got {kind!r}")
        if not isinstance(n, int | np.integer) or n < 0:
            raise ValueError(f"phase length must be an integer >= 0, got {n!r}")
    total = n_calibration + sum(n for _, n in phases)
    if n_calibration < 2 or total > n_pool:
        raise ValueError(f"need 2 <= calibration + stream rows <= {n_pool}, got {total}")


class _Shifts:
    """The scripted shifts, parameterised on the calibration rows."""

    def __init__(self, task: RegressionTask, cal: np.ndarray, tilt: float, extreme: float) -> None:
        self.task = task
        f3, f7 = task.X[:, task.column("f3")], task.X[:, task.column("f7")]
        f1 = f3 - f7
        # g(x) = −(f1 − mean)/sd on the calibration rows: a tilt that is linear in the features,
        # so the density ratio is exactly a logistic model (the WCTM's estimator is well specified).
        self.log_tilt = -tilt * (f1 - f1[cal].mean()) / f1[cal].std()
        region_cut = np.median(f7[cal])
        self.region = f7 >= region_cut
        # The range of the whole pool, so that every shifted f3 is >= the largest f3 in the data.
        self.offset = extreme * (f3.max() - f3.min())

    def draw(
        self, kind: str, n: int, free: np.ndarray, used: np.ndarray, rng: np.random.Generator
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Features, labels and predictions of ``n`` rows of the regime ``kind``."""
        parts = set(kind.split("+"))
        candidates = free[~used[free]]
        if "benign_covariate" in parts:
            rows = _weighted_sample(candidates, self.log_tilt[candidates], n, rng)
        else:
            rows = rng.choice(candidates, size=n, replace=False)
        used[rows] = True
        X, y, pred = self.task.X[rows].copy(), self.task.y[rows].copy(), self.task.pred[rows].copy()
        if "concept" in parts:
            y = self._permute_labels(rows, y, rng)
        if "extreme_covariate" in parts and n:
            X[:, self.task.column("f3")] += self.offset
            y += self.offset
            pred = self.task.predict(X)
        return X, y, pred

    def _permute_labels(
        self, rows: np.ndarray, y: FloatArray, rng: np.random.Generator
    ) -> FloatArray:
        inside = self.region[rows]
        donors = np.flatnonzero(self.region)
        y[inside] = self.task.y[rng.choice(donors, size=int(inside.sum()))]
        return y


def _weighted_sample(
    candidates: np.ndarray, log_w: FloatArray, n: int, rng: np.random.Generator
) -> np.ndarray:
    # Efraimidis & Spirakis (2006): the n largest log(U)/w, i.e. the n smallest Exp(1)/w keys,
    # are a weighted sample without replacement; computed in log space to avoid overflow.
    keys = np.log(rng.exponential(size=candidates.shape[0])) - log_w
    chosen = candidates[np.argsort(keys)[:n]]
    return rng.permutation(chosen)


# ---------------------------------------------------------------------------------------------
# Wire-format writer (README "Event format" and "Stream configuration")


def build_example(
    out_dir: str | Path,
    seed: int = 0,
    phases: Sequence[tuple[str, int]] = DEMO_PHASES,
    n_calibration: int = 1000,
    label_delay: int = 0,
    stream: str = "shuttle",
    alarm: dict[str, Any] | None = None,
    covariate_alarm: dict[str, Any] | None = None,
    named: bool = False,
    performance_window: int | None = None,
) -> dict[str, Path]:
    """Write an example stream from the Shuttle task as wire-format files (README "Event format").

    Writes ``<stream>_calibration.jsonl`` (labeled prediction events), ``<stream>_events.jsonl``
    (prediction events; labels inline when ``label_delay`` is 0, else as separate label events
    ``label_delay`` predictions later), ``<stream>.yaml`` (the stream configuration) and
    ``<stream>_truth.json`` (the phases and change points, as event indices).

    The configuration uses Shiryaev–Roberts with ARL 10 000 for the conditional (harmful)
    alarms and ARL 1 000 for the covariate alarms (``alarm`` / ``covariate_alarm`` override
    them): a covariate alarm is informational — it names the shift and never pages anyone — and
    the x-only score detects a within-support tilt too slowly at ARL 10 000 to show it.

    ``named`` writes the features as an object by the dataset's names (``f2``, ``f3``, …;
    reports and attributions then name them so) instead of a list; the monitors see the same
    values in the same order. ``performance_window`` sets the stream's labels per performance
    window (``performance.window``; default: the configuration's default).

    Returns
    -------
    dict
        Paths under the keys ``calibration``, ``events``, ``config`` and ``truth``.

    Examples
    --------
    >>> import tempfile, json
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     paths = build_example(tmp, phases=[("stable", 5), ("concept", 5)], n_calibration=20)
    ...     first = json.loads(paths["events"].read_text().splitlines()[0])
    ...     truth = json.loads(paths["truth"].read_text())
    >>> first["kind"], first["id"], len(first["features"]), truth["change_points"]
    ('prediction', 'e-000000', 5, [5])
    """
    if label_delay < 0:
        raise ValueError(f"label_delay must be >= 0, got {label_delay}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = make_stream(load_shuttle_regression(), phases, n_calibration, seed)
    paths = {
        "calibration": out / f"{stream}_calibration.jsonl",
        "events": out / f"{stream}_events.jsonl",
        "config": out / f"{stream}.yaml",
        "truth": out / f"{stream}_truth.json",
    }
    names = data.feature_names if named else None
    _write_jsonl(paths["calibration"], _calibration_events(stream, data, names))
    _write_jsonl(paths["events"], _stream_events(stream, data, label_delay, names))
    config = _config(stream, paths, seed, alarm, covariate_alarm, performance_window)
    paths["config"].write_text(yaml.safe_dump(config, sort_keys=False))
    paths["truth"].write_text(json.dumps(_truth(data, seed, label_delay), indent=2) + "\n")
    return paths


def _features(row: np.ndarray, names: Sequence[str] | None) -> list[float] | dict[str, float]:
    values = row.tolist()
    return values if names is None else dict(zip(names, values, strict=True))


def _calibration_events(
    stream: str, data: ScriptedStream, names: Sequence[str] | None
) -> Iterator[dict[str, Any]]:
    for i in range(data.y_calibration.shape[0]):
        yield {
            "kind": "prediction",
            "stream": stream,
            "id": f"cal-{i:06d}",
            "features": _features(data.X_calibration[i], names),
            "prediction": float(data.pred_calibration[i]),
            "label": float(data.y_calibration[i]),
        }


def _stream_events(
    stream: str, data: ScriptedStream, delay: int, names: Sequence[str] | None
) -> Iterator[dict[str, Any]]:
    pending: list[dict[str, Any]] = []
    for i in range(len(data)):
        ts = _START + timedelta(seconds=i)
        event = {
            "kind": "prediction",
            "stream": stream,
            "id": f"e-{i:06d}",
            "ts": _iso(ts),
            "features": _features(data.X[i], names),
            "prediction": float(data.pred[i]),
        }
        label = {"kind": "label", "stream": stream, "id": event["id"], "label": float(data.y[i])}
        if delay == 0:
            yield event | {"label": label["label"]}
            continue
        yield event
        pending.append(label)
        if len(pending) > delay:
            yield pending.pop(0) | {"ts": _iso(ts)}
    end = _START + timedelta(seconds=len(data))
    yield from (label | {"ts": _iso(end)} for label in pending)


def _config(
    stream: str,
    paths: dict[str, Path],
    seed: int,
    alarm: dict[str, Any] | None,
    covariate_alarm: dict[str, Any] | None,
    performance_window: int | None = None,
) -> dict[str, Any]:
    from monitor.streams.config import StreamConfig

    config = {
        "name": stream,
        "task": "regression",
        "calibration": paths["calibration"].name,
        "score": "abs_residual",
        "covariate_score": "knn",
        "alarm": alarm or {"rule": "shiryaev_roberts", "threshold": 10_000},
        "covariate_alarm": covariate_alarm or {"rule": "shiryaev_roberts", "threshold": 1_000},
        "seed": seed,
    }
    if performance_window is not None:
        config["performance"] = {"window": performance_window}
    StreamConfig.model_validate(config)  # fail here, not in the reader, if the contract moved
    return config


def _truth(data: ScriptedStream, seed: int, delay: int) -> dict[str, Any]:
    return {
        "dataset": "river Shuttle (shuttle.csv.gz): predict f9 from f2, f3, f4, f6, f7",
        "seed": seed,
        "label_delay": delay,
        "phases": [{"kind": p.kind, "start": p.start, "stop": p.stop} for p in data.phases],
        "change_points": list(data.change_points),
    }


def _write_jsonl(path: Path, rows: Iterator[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")

