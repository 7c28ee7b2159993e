"""``normalized_residual`` (|y − ŷ| / σ̂): clear errors without a scale, faster detection than
``abs_residual`` of a concept shift confined to low-noise inputs, and Ville validity on
exchangeable data. The Monte Carlo runs are ``bench/bench_normalized_residual.py`` with fewer
seeds (its docstring describes the heteroscedastic Shuttle stream and the fitted σ̂)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from bench.bench_normalized_residual import detection_summary, ville_rate
from monitor.cli.runs import monitors_for_run, register_stream_version
from monitor.db.sink import DatabaseSink
from monitor.settings import Settings
from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import StreamConfig
from monitor.streams.events import InvalidEvent, decode_event
from monitor.streams.monitor import StreamMonitor


def _rows(scale: bool) -> list[dict[str, object]]:
    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    for _ in range(40):
        x = float(rng.normal())
        row: dict[str, object] = {"features": [x], "prediction": x, "label": x + rng.normal()}
        if scale:
            row["scale"] = 1.0 + abs(x)
        rows.append(row)
    return rows


def _config(score: str = "normalized_residual") -> StreamConfig:
    return StreamConfig(name="s", task="regression", calibration=[], score=score)


def test_calibration_without_scale_is_refused() -> None:
    with pytest.raises(CalibrationError, match="needs a 'scale' on every calibration row"):
        StreamMonitor(_config(), Calibration.from_rows(_rows(scale=False)))
    partial = _rows(scale=True)
    del partial[7]["scale"]
    with pytest.raises(CalibrationError, match="'scale'"):
        StreamMonitor(_config(), Calibration.from_rows(partial))
    # other scores ignore a scale; the calibration keeps it when it stores its rows
    cal = Calibration.from_rows(_rows(scale=True))
    StreamMonitor(_config("abs_residual"), cal)
    assert Calibration.from_rows(cal.to_rows()).scales.tolist() == cal.scales.tolist()


def test_events_without_a_valid_scale_are_refused() -> None:
    monitor = StreamMonitor(_config(), Calibration.from_rows(_rows(scale=True)))
    event = decode_event({"kind": "prediction", "stream": "s", "id": "a", "features": [0.0],
                          "prediction": 0.0, "label": 1.0})
    [(_, reason)] = monitor.step([event], lambda k: datetime(2026, 1, 1, tzinfo=UTC))
    assert "'scale' is missing" in reason
    for bad, reason in [(0, "greater than 0"), (-1.0, "greater than 0"), ("1", "number"),
                        (True, "number"), (1e101, r"±1e\+100")]:
        with pytest.raises(InvalidEvent, match=reason):
            decode_event({"kind": "prediction", "stream": "s", "id": "a", "features": [0.0],
                          "prediction": 0.0, "scale": bad})


def _check_detection(n_seeds: int) -> None:
    result = detection_summary(range(n_seeds))
    paired, norm = result["paired"], result["normalized_residual"]
    # normalized is faster: the paired mean delay difference is below zero by 3 s.e.
    assert paired["mean"] + 3 * paired["se"] < 0, result
    # and at least 3x faster on average, detecting on (almost) every seed
    assert norm["mean_delay"] * 3 < result["abs_residual"]["mean_delay"], result
    assert norm["detected"] >= 0.9, result


def test_normalized_residual_detects_a_low_noise_concept_shift_faster_fast() -> None:
    _check_detection(20)


@pytest.mark.slow
def test_normalized_residual_detects_a_low_noise_concept_shift_faster_full() -> None:
    _check_detection(200)


def _check_validity(n_streams: int) -> None:
    rates = ville_rate(range(1000, 1000 + n_streams))
    assert rates["bound"] == pytest.approx(0.05 + 3 * math.sqrt(0.05 * 0.95 / n_streams))
    for betting in ("composite_jumper", "plug_in_power"):
        assert rates[betting] <= rates["bound"], rates


def test_ville_validity_with_normalized_residual_fast() -> None:
    _check_validity(300)


@pytest.mark.slow
def test_ville_validity_with_normalized_residual_full() -> None:
    _check_validity(1000)


def test_the_database_keeps_the_calibration_scales(tmp_path: Path) -> None:
    """``monitor streams create`` stores each calibration row's ``scale`` (migration 0015), so the
    worker rebuilds the same calibration, and a monitor built from it scores as the original."""
    events = [{"kind": "prediction", "stream": "s", "id": f"c{i}", **r}
              for i, r in enumerate(_rows(True))]
    (tmp_path / "cal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    config = tmp_path / "s.yaml"
    config.write_text("name: s\ntask: regression\ncalibration: cal.jsonl\n"
                      "score: normalized_residual\n")
    db = f"sqlite:///{tmp_path}/m.db"
    register_stream_version(str(config), Settings(database_url=db))
    sink = DatabaseSink(db)
    try:
        registered = sink.registered_stream("s")
        assert registered is not None
        stored = registered[1]
        original = Calibration.from_jsonl(tmp_path / "cal.jsonl")
        assert stored.scales is not None and original.scales is not None
        assert np.array_equal(stored.scales, original.scales)
        (monitor,) = monitors_for_run([str(config)], sink)[0].values()
        assert monitor.calibration.scales is not None
    finally:
        sink.close()
