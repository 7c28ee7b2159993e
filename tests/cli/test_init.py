"""``monitor init`` on a held-out CSV and ``monitor events`` on a predictions CSV: the files
written, the commands printed, string classes mapped, and the events monitored."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from sklearn.ensemble import RandomForestClassifier

from monitor.cli.main import main
from monitor.streams.config import load_stream_config
from tests.support.frontdoor import feature_matrix, run, segments


def _write_csv(path: Path, columns: dict[str, list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(columns))
        writer.writerows(zip(*columns.values(), strict=True))
    return path


def _with_probabilities(columns: dict[str, list[Any]], model: Any, names: tuple[str, ...]
                        ) -> dict[str, list[Any]]:
    P = model.predict_proba(feature_matrix(columns, names))
    return columns | {f"p_{c}": P[:, k].tolist() for k, c in enumerate(model.classes_)}


def test_init_and_events_from_csv_files(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = segments(seed=1, n_held_out=300)
    clf = RandomForestClassifier(n_estimators=20, random_state=0)
    clf.fit(feature_matrix(data.train, data.features), data.train["label"])
    held_out = _write_csv(tmp_path / "held_out.csv",
                          _with_probabilities(data.held_out, clf, data.features))
    live = _with_probabilities(data.live, clf, data.features)
    predictions = _write_csv(tmp_path / "predictions.csv", live)
    proba = ",".join(f"p_{c}" for c in clf.classes_)
    out = tmp_path / "stream"

    capsys.readouterr()
    code = main(["init", "--calibration", str(held_out), "--target", "label", "--proba-columns",
                 proba, "--name", "segments", "--out", str(out)])
    printed, err = capsys.readouterr()
    assert code == 0, err
    config = load_stream_config(out / "segments.yaml")
    assert config.classes == [str(c) for c in clf.classes_]
    assert f"wrote {out / 'segments.yaml'} (classification, 18 features" in printed
    assert "warning: the calibration has 300 rows, fewer than the 500 advised" in printed
    assert f"monitor run --config {out / 'segments.yaml'} --source file:" in printed
    assert "monitor alarms list --stream segments" in printed

    code = main(["events", "--config", str(out / "segments.yaml"), "--from", str(predictions),
                 "--target", "label", "--proba-columns", proba, "--label-delay", "20"])
    printed, err = capsys.readouterr()
    events = out / "segments_events.jsonl"
    n = len(live["label"])
    assert code == 0, err
    assert printed.startswith(f"wrote {events} ({2 * n} events)")
    labels = [json.loads(line) for line in events.read_text().splitlines()
              if '"kind":"label"' in line]
    assert [e["label"] for e in labels] == [list(clf.classes_).index(v) for v in live["label"]]

    summary = run(capsys, tmp_path / "m.db", out / "segments.yaml", events)
    assert summary["events"] == 2 * n and summary["dead_letters"] == 0


def test_init_refuses_a_missing_column_in_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    held_out = _write_csv(tmp_path / "h.csv", {"x": [1.0, 2.0], "y": [1.0, 2.0]})
    capsys.readouterr()
    code = main(["init", "--calibration", str(held_out), "--target", "y", "--prediction",
                 "y_hat", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"monitor: error: {held_out}: prediction: no column 'y_hat' (columns: x, y)\n"
