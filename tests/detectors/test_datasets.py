from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from monitor.ops.datasets import (
    DEMO_PHASES,
    SHUTTLE_FEATURES,
    build_example,
    load_shuttle,
    load_shuttle_regression,
    make_stream,
)
from monitor.streams.config import load_stream_config


@pytest.fixture(scope="module")
def task():  # type: ignore[no-untyped-def]
    return load_shuttle_regression()


def test_shuttle_is_the_bundled_file() -> None:
    data = load_shuttle()
    assert data.shape == (49_097, 10)
    assert not data.flags.writeable


def test_regression_task_is_real_and_heteroscedastic(task) -> None:  # type: ignore[no-untyped-def]
    assert task.X.shape == (39_097, 5) and task.feature_names == SHUTTLE_FEATURES
    resid = task.y - task.pred
    assert 1 - resid.var() / task.y.var() > 0.85  # a real model ...
    low, high = np.quantile(task.pred, [0.25, 0.75])
    ratio = np.abs(resid[task.pred >= high]).mean() / np.abs(resid[task.pred <= low]).mean()
    assert ratio > 5  # ... whose errors depend strongly on x
    np.testing.assert_array_equal(task.predict(task.X[:50]), task.pred[:50])
    assert load_shuttle_regression() is task  # cached


def test_stable_stream_rows_are_distinct_held_out_rows(task) -> None:  # type: ignore[no-untyped-def]
    s = make_stream(task, [("stable", 2000)], n_calibration=1000, seed=3)
    rows = np.vstack([s.X_calibration, s.X])
    assert len(s) == 2000 and s.change_points == ()
    pool = {(*r, y) for r, y in zip(task.X.tolist(), task.y.tolist(), strict=True)}
    labels = np.r_[s.y_calibration, s.y].tolist()
    assert all((*r, y) in pool for r, y in zip(rows.tolist(), labels, strict=True))
    np.testing.assert_array_equal(s.pred, task.predict(s.X))


def test_benign_tilt_moves_inputs_not_the_conditional(task) -> None:  # type: ignore[no-untyped-def]
    s = make_stream(task, [("stable", 3000), ("benign_covariate", 3000)], seed=1)
    f1 = s.X[:, 1] - s.X[:, 4]
    assert f1[3000:].mean() < f1[:3000].mean() - 2.0  # tilted towards low f3 - f7 (= f1)
    resid = np.abs(s.y - s.pred)
    assert np.median(resid[3000:]) > 1.2 * np.median(resid[:3000])  # where the model is worse
    lo, hi = s.X_calibration[:, 1].min(), s.X_calibration[:, 1].max()
    assert np.mean((s.X[3000:, 1] >= lo) & (s.X[3000:, 1] <= hi)) > 0.99


def test_concept_shift_changes_labels_only_in_the_region(task) -> None:  # type: ignore[no-untyped-def]
    s = make_stream(task, [("concept", 2000)], seed=2)
    f7_cut = np.median(s.X_calibration[:, 4])
    inside = s.X[:, 4] >= f7_cut
    model_err = np.abs(s.y - s.pred)
    assert np.median(model_err[inside]) > 3 * np.median(model_err[~inside])
    assert np.median(model_err[~inside]) < 1.0


def test_extreme_shift_leaves_the_support_and_breaks_the_model(task) -> None:  # type: ignore[no-untyped-def]
    s = make_stream(task, [("extreme_covariate", 500)], seed=4)
    assert s.X[:, 1].min() >= task.X[:, 1].max()
    assert np.median(np.abs(s.y - s.pred)) > 50


def test_phases_combine_and_validate(task) -> None:  # type: ignore[no-untyped-def]
    s = make_stream(task, [("stable", 10), ("benign_covariate+concept", 20)], n_calibration=50)
    assert [(p.kind, p.start, p.stop) for p in s.phases] == [
        ("stable", 0, 10),
        ("benign_covariate+concept", 10, 30),
    ]
    with pytest.raises(ValueError, match="phase kind"):
        make_stream(task, [("drift", 10)])
    with pytest.raises(ValueError, match="calibration"):
        make_stream(task, [("stable", 40_000)])


def test_seeded(task) -> None:  # type: ignore[no-untyped-def]
    a, b, c = (make_stream(task, DEMO_PHASES, seed=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)


@pytest.mark.parametrize("delay", [0, 25])
def test_build_example_writes_the_wire_format(tmp_path: Path, delay: int) -> None:
    phases = [("stable", 40), ("extreme_covariate", 20)]
    paths = build_example(tmp_path, seed=1, phases=phases, n_calibration=30, label_delay=delay)
    config = load_stream_config(paths["config"])
    assert config.task == "regression" and Path(str(config.calibration)).exists()
    cal = [json.loads(line) for line in paths["calibration"].read_text().splitlines()]
    assert len(cal) == 30 and all("label" in e and len(e["features"]) == 5 for e in cal)
    events = [json.loads(line) for line in paths["events"].read_text().splitlines()]
    predictions = [e for e in events if e["kind"] == "prediction"]
    assert [e["id"] for e in predictions] == [f"e-{i:06d}" for i in range(60)]
    if delay == 0:
        assert all("label" in e for e in predictions) and len(events) == 60
    else:
        position = {(e["kind"], e["id"]): i for i, e in enumerate(events)}
        labels = [e for e in events if e["kind"] == "label"]
        assert len(labels) == 60 and all("label" not in e for e in predictions)
        assert all(position[("label", e["id"])] > position[("prediction", e["id"])] for e in labels)
        assert position[("label", "e-000000")] > position[("prediction", f"e-{delay:06d}")]
    truth = json.loads(paths["truth"].read_text())
    assert truth["change_points"] == [40] and truth["phases"][1]["kind"] == "extreme_covariate"
