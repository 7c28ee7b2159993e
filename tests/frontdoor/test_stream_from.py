"""monitor.stream_from / monitor.to_events: from a fitted scikit-learn model and its held-out
data to files ``monitor run`` monitors, string class labels included, and a shift after a known
event raising an alarm there."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import Ridge

import monitor
from monitor.frontdoor import FrontDoorError, calibration_advice, detection_floor, ood_floor
from monitor.streams.config import load_stream_config
from monitor.streams.events import LabelEvent, PredictionEvent, decode_event
from monitor.streams.setup import load_calibration
from tests.support.frontdoor import feature_matrix, run, segments

SHIFT = 300  # live events before the injected shift


def _events(path: Path) -> list[Any]:
    return [decode_event(line) for line in path.read_bytes().splitlines()]


def _rotated(labels: list[str], classes: list[str]) -> list[str]:
    """Each label replaced by the next class: a concept shift the model cannot follow."""
    return [classes[(classes.index(v) + 1) % len(classes)] for v in labels]


def test_string_labels_end_to_end_with_a_random_forest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = segments(seed=0)
    clf = RandomForestClassifier(n_estimators=30, random_state=0)
    clf.fit(feature_matrix(data.train, data.features), data.train["label"])
    files = monitor.stream_from(data.held_out, target="label", model=clf, name="segments",
                                out_dir=tmp_path / "stream")

    config = load_stream_config(files.config_path)
    classes = [str(c) for c in clf.classes_]
    assert config.task == "classification" and config.classes == classes
    assert files.classes == tuple(classes) and files.warnings == ()
    calibration = load_calibration(config)
    assert calibration.feature_names == data.features and len(calibration) == 600
    expected = [classes.index(v) for v in data.held_out["label"]]
    assert calibration.labels.tolist() == expected

    live = dict(data.live)
    live["label"] = live["label"][:SHIFT] + _rotated(live["label"][SHIFT:], classes)
    events = files.to_events(live, label_delay=20)
    decoded = _events(events)
    predictions = [e for e in decoded if isinstance(e, PredictionEvent)]
    labels = [e for e in decoded if isinstance(e, LabelEvent)]
    assert len(predictions) == len(labels) == len(live["label"])
    # the label of prediction i follows prediction i + 20; its index is its class's position
    assert [e.id for e in decoded[:22]][-2:] == ["e-000020", "e-000000"]
    assert labels[0].label == classes.index(live["label"][0])

    summary = run(capsys, tmp_path / "m.db", files.config_path, events)
    assert summary["events"] == len(decoded) and summary["dead_letters"] == 0
    harmful = [a for a in summary["alarms"] if a["detector"] == "conditional"]
    assert harmful, summary["alarms"]
    assert all(a["event_index"] >= SHIFT for a in summary["alarms"])
    assert harmful[0]["event_index"] < SHIFT + 60
    assert harmful[-1]["kind"] == "concept_shift"


def test_regression_from_arrays_with_feature_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = load_diabetes()
    X, y, names = d.data, d.target, list(d.feature_names)
    model = Ridge().fit(X[:150], y[:150])
    files = monitor.stream_from(X[150:300], target=y[150:300], model=model, features=names,
                                name="diabetes", out_dir=tmp_path)
    assert files.task == "regression" and files.classes is None
    assert files.features == tuple(names)
    y_live = y[300:].copy()
    y_live[40:] += 200.0  # the model's errors jump after 40 events
    events = monitor.to_events(X[300:], files.config_path, tmp_path / "live.jsonl",
                               target=y_live, model=model)
    first = json.loads(events.read_text().splitlines()[0])
    assert first["label"] == pytest.approx(y_live[0])
    assert list(first["features"]) == names
    assert first["prediction"] == pytest.approx(float(model.predict(X[300:301])[0]))

    summary = run(capsys, tmp_path / "m.db", files.config_path, events)
    harmful = [a for a in summary["alarms"] if a["detector"] == "conditional"]
    assert harmful and all(a["event_index"] >= 40 for a in summary["alarms"])
    assert harmful[0]["event_index"] < 60


def test_probability_columns_and_predicted_class_names_map_string_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 40
    labels = rng.choice(["cat", "dog", "owl"], size=n).tolist()
    p = rng.dirichlet([1.0, 1.0, 1.0], size=n)
    data = {"x": rng.normal(size=n).tolist(), "colour": rng.choice(["red", "blue"], n).tolist(),
            "p_cat": p[:, 0].tolist(), "p_dog": p[:, 1].tolist(), "p_owl": p[:, 2].tolist(),
            "y": labels}
    files = monitor.stream_from(data, target="y", proba=["p_cat", "p_dog", "p_owl"],
                                out_dir=tmp_path / "proba")
    assert files.classes == ("cat", "dog", "owl") and files.features == ("x", "colour")
    rows = [json.loads(line) for line in files.calibration_path.read_text().splitlines()]
    assert [r["label"] for r in rows] == [["cat", "dog", "owl"].index(v) for v in labels]
    assert rows[0]["features"]["colour"] in ("red", "blue")

    hard = {"x": data["x"], "y": labels, "y_hat": labels[1:] + labels[:1]}
    files = monitor.stream_from(hard, target="y", prediction="y_hat", out_dir=tmp_path / "hard")
    assert files.task == "classification" and files.classes == ("cat", "dog", "owl")
    first = json.loads(files.calibration_path.read_text().splitlines()[0])
    assert first["prediction"] == [float(c == labels[1]) for c in ("cat", "dog", "owl")]


def test_an_unknown_class_and_mismatched_probabilities_are_refused_by_name(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(2)
    n = 30
    p = rng.dirichlet([1.0, 1.0], size=n)
    data = {"x": rng.normal(size=n).tolist(), "p0": p[:, 0].tolist(), "p1": p[:, 1].tolist(),
            "y": ["a", "b", "c"] * 10}
    with pytest.raises(FrontDoorError, match=r"3 classes but the probability vectors have 2"):
        monitor.stream_from(data, target="y", proba=["p0", "p1"], out_dir=tmp_path)
    data["y"] = ["a", "b"] * 15
    files = monitor.stream_from(data, target="y", proba=["p0", "p1"], out_dir=tmp_path)
    live = dict(data, y=["a", "zebra"] * 15)
    with pytest.raises(FrontDoorError, match=r"row 1: label 'zebra' is not one of the "
                                             r"stream's classes \['a', 'b'\]"):
        files.to_events(live)
    with pytest.raises(FrontDoorError, match="exactly one of prediction="):
        monitor.stream_from(data, target="y", out_dir=tmp_path)


def test_tabular_features_and_event_times_pass_through(tmp_path: Path) -> None:
    n = 30
    data = {
        "amount": [float(i) if i % 7 else None for i in range(n)],
        "country": ["DE", "FR", None] * 10,
        "card_present": [True, False] * 15,
        "ts": [1_767_225_600 + 60 * i for i in range(n)],
        "order": [f"o-{i}" for i in range(n)],
        "y": [float(i % 5) for i in range(n)],
        "y_hat": [float(i % 4) for i in range(n)],
    }
    files = monitor.stream_from(data, target="y", prediction="y_hat", ts="ts", ids="order",
                                out_dir=tmp_path)
    config = load_stream_config(files.config_path)
    assert config.task == "regression" and config.alarm.false_alarm_every == 7 * 86_400.0
    assert files.features == ("amount", "country", "card_present")
    events = [json.loads(line) for line in files.to_events(data, label_delay=3)
              .read_text().splitlines()]
    assert events[0]["ts"] == "2026-01-01T00:00:00Z" and events[0]["id"] == "o-0"
    assert events[0]["features"] == {"amount": None, "country": "DE", "card_present": True}
    label = next(e for e in events if e["kind"] == "label")
    assert label == {"kind": "label", "stream": "my-stream", "id": "o-0",
                     "label": 0.0, "ts": "2026-01-01T00:03:00Z"}
    assert all(isinstance(decode_event(json.dumps(e)), PredictionEvent | LabelEvent)
               for e in events)
    without_labels = dict(data)
    del without_labels["y"]  # a default column the live data lacks is left out
    assert all("label" not in json.loads(line) for line in
               files.to_events(without_labels).read_text().splitlines())


def test_without_event_times_the_budget_is_in_events(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    data = {"x": rng.normal(size=25).tolist(), "y": rng.normal(size=25).tolist(),
            "y_hat": rng.normal(size=25).tolist()}
    files = monitor.stream_from(data, target="y", prediction="y_hat", out_dir=tmp_path)
    alarm = load_stream_config(files.config_path).alarm
    assert alarm.events == 50_000 and alarm.fixed_threshold == 100_000.0


def test_a_small_calibration_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(4)

    def held_out(m: int) -> dict[str, list[float]]:
        return {"x": rng.normal(size=m).tolist(), "y": rng.normal(size=m).tolist(),
                "y_hat": rng.normal(size=m).tolist()}

    with caplog.at_level(logging.WARNING, logger="monitor.frontdoor"):
        small = monitor.stream_from(held_out(100), target="y", prediction="y_hat",
                                    out_dir=tmp_path / "small")
    (warning,) = small.warnings
    assert "100 rows, fewer than the 500 advised" in warning
    assert f"at least {detection_floor(100)} events" in warning
    assert f"needs {ood_floor(100)} flags" in warning
    assert [r.getMessage() for r in caplog.records] == [f"stream 'my-stream': {warning}"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="monitor.frontdoor"):
        enough = monitor.stream_from(held_out(500), target="y", prediction="y_hat",
                                     out_dir=tmp_path / "enough")
    assert enough.warnings == () and caplog.records == []
    assert calibration_advice(499) is not None and calibration_advice(500) is None


def test_the_floors_follow_the_p_value_resolution() -> None:
    # an OOD flag needs R >= n / (alpha (m + 1)) flags in its window (docs/algorithms.md)
    assert [ood_floor(m) for m in (50, 100, 200, 1000, 2559)] == [51, 26, 13, 3, 1]
    floors = [detection_floor(m) for m in (100, 500, 2000)]
    assert floors == sorted(floors, reverse=True) and floors[0] > floors[-1]


def test_a_dataframe_with_strings_and_nulls(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pandas")
    penguins = pytest.importorskip("palmerpenguins").load_penguins()
    from sklearn.compose import make_column_transformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    frame = penguins.sample(frac=1.0, random_state=0).reset_index(drop=True)
    numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    model = make_pipeline(
        make_column_transformer(
            (make_pipeline(SimpleImputer(), StandardScaler()), numeric),
            (make_pipeline(SimpleImputer(strategy="most_frequent"),
                           OneHotEncoder(handle_unknown="ignore")), ["island", "sex"])),
        LogisticRegression())
    features = [*numeric, "island", "sex", "year"]
    model.fit(frame.loc[:119, features], frame.loc[:119, "species"])
    files = monitor.stream_from(frame.loc[120:239], target="species", model=model,
                                features=features, name="penguins", out_dir=tmp_path)
    assert files.classes == ("Adelie", "Chinstrap", "Gentoo") and len(files.warnings) == 1
    events = files.to_events(frame.loc[240:])
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    missing = frame.loc[240:, "sex"].isna().to_numpy()
    assert missing.any()
    assert [e["features"]["sex"] is None for e in lines] == missing.tolist()
    summary = run(capsys, tmp_path / "m.db", files.config_path, events)
    assert summary["events"] == len(lines) and summary["dead_letters"] == 0


def test_to_events_follows_a_calibration_of_feature_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.ops.datasets import build_example

    paths = build_example(tmp_path, phases=[("stable", 30)], n_calibration=40)
    rows = [json.loads(line) for line in paths["events"].read_text().splitlines()]
    X = np.array([r["features"] for r in rows])
    events = monitor.to_events(X, paths["config"], tmp_path / "again.jsonl",
                               target=[r["label"] for r in rows],
                               prediction=[r["prediction"] for r in rows])
    written = [json.loads(line) for line in events.read_text().splitlines()]
    assert [w["features"] for w in written] == [r["features"] for r in rows]
    assert [w["label"] for w in written] == [r["label"] for r in rows]
    summary = run(capsys, tmp_path / "m.db", paths["config"], events)
    assert summary["events"] == 30 and summary["dead_letters"] == 0
    with pytest.raises(FrontDoorError, match=r"row 1: prediction 'high' is not a finite number"):
        monitor.to_events(X[:2], paths["config"], prediction=[1.0, "high"])


class _Unsorted:
    """An estimator whose classes_ are not in sorted order (as a wrapped or relabelled model's
    may be): its probabilities follow classes_."""

    classes_ = np.array(["dog", "cat"])

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p_dog = 1.0 / (1.0 + np.exp(-np.asarray(X, dtype=float)[:, 0]))
        return np.column_stack([p_dog, 1.0 - p_dog])


def test_labels_follow_the_estimators_class_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=40)
    data = {"x": x.tolist(), "y": ["dog" if v > 0 else "cat" for v in x]}
    files = monitor.stream_from(data, target="y", model=_Unsorted(), out_dir=tmp_path)
    assert files.classes == ("dog", "cat")
    rows = [json.loads(line) for line in files.calibration_path.read_text().splitlines()]
    assert [r["label"] for r in rows] == [0 if v > 0 else 1 for v in x]
    assert all(r["prediction"][r["label"]] > 0.5 for r in rows)
