"""The notebook's input tables (monitor/notebook_tables.py) on tabular data: pandas object,
category, bool and nullable dtypes with NaN/None, and dict rows with None, give the same code
rows as the same values on the wire; errors name the row and the column."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from monitor.notebook_tables import Table, read_features
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import PredictionEvent, decode_event
from tests.support.tabular_data import penguins

OPTIONS = StreamConfig(name="s", task="regression", calibration="x").schema_options


def penguin_frame() -> pd.DataFrame:
    """Penguins with every dtype a user brings: object/str, category, Int64, boolean, NaN."""
    names, rows = penguins()
    frame = pd.DataFrame(rows, columns=list(names))
    frame = frame[frame["body_mass_g"].notna()].reset_index(drop=True)
    frame["species"] = frame["species"].astype("category")
    frame["island"] = frame["island"].astype(object)
    frame["sex"] = frame["sex"].astype("string")
    frame["year"] = frame["year"].astype("Int64")
    frame.loc[3, "year"] = pd.NA
    frame["heavy"] = (frame["body_mass_g"] > 4000).astype("boolean")
    frame.loc[[4, 9], "heavy"] = pd.NA
    frame["tagged"] = frame.index % 3 == 0  # numpy bool
    frame["prediction"] = 4200.0
    return frame.rename(columns={"body_mass_g": "label"})


def wire_codes(frame: pd.DataFrame, features: list[str]) -> np.ndarray:
    """The code matrix of the frame's rows sent as JSON events (nulls for missing)."""
    rows = []
    for i, record in enumerate(json.loads(frame.to_json(orient="records"))):
        event = {"kind": "prediction", "stream": "s", "id": str(i),
                 "features": {c: record[c] for c in features},
                 "prediction": record["prediction"], "label": record["label"]}
        rows.append(json.dumps(event).encode())
    return Calibration.from_rows(rows).features


def test_dataframe_dtypes_give_the_wire_code_rows() -> None:
    frame = penguin_frame()
    table = Table.of(frame, "prediction", "label", None)
    features = [c for c in frame.columns if c not in ("prediction", "label")]
    assert table.columns.names == tuple(features)
    cal = table.calibration(OPTIONS)
    kinds = dict(zip(cal.schema.labels, cal.schema.kinds, strict=True))
    assert kinds == {"species": "categorical", "island": "categorical",
                     "bill_length_mm": "numeric", "bill_depth_mm": "numeric",
                     "flipper_length_mm": "numeric", "sex": "categorical", "year": "numeric",
                     "heavy": "categorical", "tagged": "categorical"}
    assert np.array_equal(cal.features, wire_codes(frame, features), equal_nan=True)
    assert np.isnan(cal.features[3, features.index("year")])
    assert np.isnan(cal.features[[4, 9], features.index("heavy")]).all()


def test_batches_read_as_wire_events() -> None:
    frame = penguin_frame()
    table = Table.of(frame.iloc[:200], "prediction", "label", None)
    cal = table.calibration(OPTIONS)
    batch = table.columns.batch(frame.iloc[200:], None, None, None, 200, cal.schema)
    assert len(batch.ids) == len(frame) - 200
    # each event as the notebook builds it, and as the wire decodes it
    for k, features in enumerate(batch.features):
        event = PredictionEvent(stream="s", id=str(k), features=features, prediction=1.0)
        wire = decode_event(json.dumps({"kind": "prediction", "stream": "s", "id": str(k),
                                        "features": features, "prediction": 1.0}))
        assert isinstance(wire, PredictionEvent)
        codes = cal.schema.read(event.features)
        assert np.array_equal(codes.codes, cal.schema.read(wire.features).codes, equal_nan=True)
        assert codes.quality == cal.schema.read(wire.features).quality


def test_dict_rows_with_none() -> None:
    rows: list[dict[str, Any]] = [
        {"country": ["DE", "FR", None][i % 3], "amount": None if i == 7 else float(i),
         "vip": i % 2 == 0, "prediction": 1.0, "label": float(i)} for i in range(30)]
    table = Table.of(rows, "prediction", "label", None)
    cal = table.calibration(OPTIONS)
    assert cal.schema.kinds == ("categorical", "numeric", "categorical")
    assert np.isnan(cal.features[2, 0]) and np.isnan(cal.features[7, 1])
    wire = [{"features": {k: r[k] for k in ("country", "amount", "vip")},
             "prediction": 1.0, "label": r["label"]} for r in rows]
    assert np.array_equal(cal.features, Calibration.from_rows(wire).features, equal_nan=True)
    # wire-format rows in the notebook: an absent key is missing, an unknown key an error
    del wire[4]["features"]["vip"]
    listed = Table.of(wire, "prediction", "label", None).calibration(OPTIONS)
    assert np.isnan(listed.features[4, 2])
    wire[5]["features"]["model"] = "v2"
    with pytest.raises(ValueError, match="row 5: feature 'model' is not one of the "
                                         "calibration's features"):
        Table.of(wire, "prediction", "label", None)


def test_numeric_tables_stay_float_matrices() -> None:
    X = np.random.default_rng(0).normal(size=(30, 3))
    assert read_features(X, None) is not None
    assert read_features(X, None).tobytes() == X.tobytes()  # type: ignore[union-attr]
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(prediction=1.0, label=2.0)
    table = Table.of(frame, "prediction", "label", None)
    assert isinstance(table.X, np.ndarray) and table.X.tobytes() == X.tobytes()
    cal = table.calibration(OPTIONS)
    assert cal.schema.is_plain and cal.features.tobytes() == X.tobytes()
    with_nan = X.copy()
    with_nan[2, 1] = np.nan
    rows = read_features(with_nan, ("a", "b", "c"))
    assert isinstance(rows, list) and rows[2][1] is None


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([[1.0, pd.Timestamp("2026-01-01")]], "features: row 0, column 'b': a Timestamp is not "
                                              "a feature value"),
        ([[1.0, "x"], [float("inf"), "y"]], "features: row 1, column 'a': inf is not a finite"),
        ([[1.0, [2.0]]], "features: row 0, column 'b': a list is not a feature value"),
        ([[1.0, 2.0], [1.0]], "features: row 1 has 1 values, row 0 has 2"),
        ("rows", "features must be numbers or other values in a 2-D table"),
    ],
    ids=["timestamp", "inf", "list", "ragged", "text"],
)
def test_bad_cells_name_the_row_and_the_column(cells: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_features(cells, ("a", "b"))


def test_class_name_labels_are_refused_with_how_to_give_them() -> None:
    rows = [{"x": float(i), "prediction": [0.5, 0.5], "label": "Adelie"} for i in range(25)]
    with pytest.raises(ValueError, match="label 'Adelie' is a class name; a classification "
                                         "label is the class's index"):
        Table.of(rows, "prediction", "label", None).calibration(OPTIONS)


def test_a_penguins_frame_is_monitored_end_to_end() -> None:
    """A DataFrame with strings, categories, booleans and NaN through ``watch`` and ``update``:
    every row is monitored (the stream's event count), and a missing-rate jump in one column
    raises a data_quality alarm naming it."""
    import numpy as np
    from palmerpenguins import load_penguins

    import monitor

    frame = load_penguins().dropna(subset=["body_mass_g"]).reset_index(drop=True)
    frame["heavy"] = frame["body_mass_g"] > 4200
    frame["prediction"] = 4200.0
    frame["label"] = frame["body_mass_g"].astype(float)
    frame = frame.drop(columns=["body_mass_g"])
    rng = np.random.default_rng(4)
    calibration = frame.iloc[rng.integers(0, len(frame), 1000)].reset_index(drop=True)
    watched = monitor.watch(calibration, task="regression", ood={"enabled": False})
    stream = frame.iloc[rng.integers(0, len(frame), 800)].reset_index(drop=True)
    stream.loc[200:, "bill_depth_mm"] = stream.loc[200:, "bill_depth_mm"].where(
        rng.uniform(size=600) > 0.3, np.nan)
    stream["island"] = stream["island"].astype("category")
    alarms = watched.update(stream)
    assert watched.stream.event_index == 800
    quality = [a for a in alarms if a.detector == "data_quality"]
    assert quality and quality[0].evidence["indicators"][0]["feature"] == "bill_depth_mm"
