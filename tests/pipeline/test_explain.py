"""Explaining alarms through the pipeline (docs/explain.md): the extreme covariate shift of the
Shuttle example moves f3 (``x1`` of the list-valued features) and its alarms' attribution names it
first; the performance windows' metrics equal a direct computation from the events."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from tests.support.oracle import PerEventPipeline

PERFORMANCE_WINDOW = 100


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths = build_example(tmp_path_factory.mktemp("explain"), seed=0,
                          phases=[("stable", 400), ("extreme_covariate", 500)],
                          n_calibration=500)
    config = yaml.safe_load(paths["config"].read_text())
    config["performance"] = {"window": PERFORMANCE_WINDOW}
    paths["config"].write_text(yaml.safe_dump(config))
    return paths


def run(paths: dict[str, Path]) -> dict[str, Any]:
    pipeline = Pipeline(build_monitors(read_configs([str(paths["config"])])), "file:events")
    values = paths["events"].read_bytes().splitlines()
    records = [RawRecord("events", 0, i, v) for i, v in enumerate(values)]
    alarms, evidence, performance = [], {}, []
    for start in range(0, len(records), 250):
        out = pipeline.process(records[start : start + 250])
        alarms += out.alarms
        evidence.update({e.alarm_id: e.evidence for e in out.alarm_evidence})
        performance += out.performance_windows
    return {"alarms": alarms, "evidence": evidence, "performance": performance}


def test_the_shifted_feature_is_named_first(example: dict[str, Path]) -> None:
    got = run(example)
    attributed = [a for a in got["alarms"] if a.id in got["evidence"]]
    assert attributed, "the extreme shift must raise an alarm that gets attributed"
    latest = {a.id: a for a in attributed}  # each alarm's last version (records in order)
    assert all(a.detector == "covariate" or a.kind == "extreme_covariate_shift"
               for a in latest.values())
    assert any(a.event_index >= 400 for a in attributed)
    for alarm in attributed:
        attribution = got["evidence"][alarm.id]["attribution"]
        assert attribution["window"]["n"] == 200
        if alarm.detector == "covariate":
            assert attribution["window"]["start_index"] == alarm.event_index + 1
        if alarm.event_index >= 400:
            top = attribution["features"][0]
            assert top["feature"] == "x1" and top["p_adjusted"] < 1e-6, attribution
    # alarms raised while the weighted monitor adapted name its density ratio's directions
    adapting = [a for a in got["alarms"] if a.evidence.get("adapting")]
    assert all({d["feature"] for d in a.evidence["density_ratio_directions"]}
               == {f"x{j}" for j in range(5)} for a in adapting)


def test_performance_windows_equal_a_direct_computation(example: dict[str, Path]) -> None:
    events = [json.loads(line) for line in example["events"].read_text().splitlines()]
    pred = np.array([e["prediction"] for e in events])
    label = np.array([e["label"] for e in events])  # labels inline: joined in event order
    windows = run(example)["performance"]
    assert [w.window_index for w in windows] == list(range(len(events) // PERFORMANCE_WINDOW))
    for w in windows:
        k = slice(w.window_index * PERFORMANCE_WINDOW, (w.window_index + 1) * PERFORMANCE_WINDOW)
        residual = label[k] - pred[k]
        assert (w.start_index, w.end_index, w.n) == (k.start, k.stop - 1, PERFORMANCE_WINDOW)
        assert w.metrics["mae"] == pytest.approx(np.abs(residual).mean(), rel=1e-12)
        assert w.metrics["rmse"] == pytest.approx(math.sqrt((residual**2).mean()), rel=1e-12)
    # the model fails beyond its training range: the extreme phase's windows are much worse
    assert windows[-1].metrics["mae"] > 5 * windows[0].metrics["mae"]


def classification_events(n: int, seed: int) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Prediction events with named features, labels 3 predictions late; the (probability,
    label) pairs in the order the labels join."""
    rng = np.random.default_rng(seed)
    proba = rng.dirichlet(np.ones(3), size=n)
    labels = rng.integers(0, 3, size=n)
    lines: list[bytes] = []
    for i in range(n):
        event = {"kind": "prediction", "stream": "digits", "id": f"e-{i}",
                 "ts": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                 "features": {"a": float(rng.normal()), "b": float(rng.normal())},
                 "prediction": proba[i].tolist()}
        lines.append(json.dumps(event).encode())
        if i >= 3:
            lines.append(json.dumps({"kind": "label", "stream": "digits", "id": f"e-{i - 3}",
                                     "ts": event["ts"], "label": int(labels[i - 3])}).encode())
    return lines, proba[: n - 3], labels[: n - 3]


@pytest.mark.parametrize("per_event", [False, True], ids=["batch", "per-event"])
def test_classification_performance_windows(per_event: bool) -> None:
    from sklearn.metrics import log_loss

    from monitor.streams.calibration import Calibration
    from monitor.streams.config import StreamConfig
    from monitor.streams.monitor import StreamMonitor

    rng = np.random.default_rng(0)
    rows = [{"features": {"a": float(rng.normal()), "b": float(rng.normal())},
             "prediction": rng.dirichlet(np.ones(3)).tolist(), "label": int(rng.integers(3))}
            for _ in range(200)]
    config = StreamConfig(name="digits", task="classification", calibration=rows,
                          performance={"window": 50}, ood={"enabled": False})
    monitor = StreamMonitor(config, Calibration.from_rows(rows))
    assert monitor.feature_names == ("a", "b")
    lines, proba, labels = classification_events(240, seed=1)
    pipeline = (PerEventPipeline if per_event else Pipeline)({"digits": monitor}, "file:events")
    records = [RawRecord("events", 0, i, v) for i, v in enumerate(lines)]
    windows = [w for start in range(0, len(records), 64)
               for w in pipeline.process(records[start : start + 64]).performance_windows]
    assert [w.window_index for w in windows] == [0, 1, 2, 3]
    for w in windows:
        k = slice(50 * w.window_index, 50 * (w.window_index + 1))
        assert w.metrics["accuracy"] == pytest.approx(np.mean(proba[k].argmax(1) == labels[k]))
        assert w.metrics["log_loss"] == pytest.approx(
            log_loss(labels[k], proba[k], labels=[0, 1, 2]), rel=1e-9
        )
        assert {m for m in w.metrics if m.startswith("recall_class_")} == {
            f"recall_class_{c}" for c in set(labels[k].tolist())
        }
