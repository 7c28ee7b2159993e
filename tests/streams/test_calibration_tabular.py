"""Calibrations of tabular data: the schema and code matrix they carry, the raw values they keep
for ``to_rows``, errors that name the row and the feature, and the tabular configuration."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import StreamConfig
from tests.support.tabular_data import cars, penguins, wire_rows


def numeric_rows(n: int = 30) -> list[dict[str, Any]]:
    rng = np.random.default_rng(2)
    return [{"features": {"a": float(x), "b": float(y)}, "prediction": 1.0, "label": float(x)}
            for x, y in rng.normal(size=(n, 2))]


def test_numeric_calibration_is_plain_and_unchanged() -> None:
    rows = numeric_rows()
    cal = Calibration.from_rows(rows)
    expected = np.array([[r["features"]["a"], r["features"]["b"]] for r in rows])
    assert cal.schema.is_plain and cal.raw_features is None
    assert cal.features.tobytes() == expected.tobytes()
    assert cal.to_rows() == [{k: r[k] for k in ("features", "prediction", "label")} for r in rows]
    listed = Calibration(expected, np.ones(30), expected[:, 0])
    assert listed.schema.is_plain and listed.schema.names is None


@pytest.mark.parametrize("data", [penguins, cars], ids=["penguins", "cars"])
def test_tabular_calibration_round_trips(data: Any) -> None:
    names, raw = data()
    rows = wire_rows(names, raw)
    events = [{"kind": "prediction", "stream": "s", "id": str(i), **r} for i, r in enumerate(rows)]
    cal = Calibration.from_rows([json.dumps(e).encode() for e in events])
    assert cal.feature_names == names and not cal.schema.is_plain
    assert cal.features.dtype == float and cal.features.shape == (len(rows), len(names))
    assert np.array_equal(cal.features, cal.schema.codes(list(cal.raw_features or ())),
                          equal_nan=True)
    again = Calibration.from_rows(json.loads(json.dumps(cal.to_rows())), names)
    assert again.schema == cal.schema
    assert np.array_equal(again.features, cal.features, equal_nan=True)
    assert again.to_rows() == cal.to_rows()


def test_key_absent_from_some_rows_is_missing() -> None:
    rows = numeric_rows()
    del rows[5]["features"]["b"]
    rows[7]["features"]["c"] = "x"
    cal = Calibration.from_rows(rows)
    assert cal.feature_names == ("a", "b", "c")
    assert np.isnan(cal.features[5, 1]) and not cal.schema.is_plain
    assert cal.schema.kinds == ("numeric", "numeric", "categorical")
    assert int(np.isnan(cal.features[:, 2]).sum()) == 29


def test_errors_name_the_row_and_the_feature() -> None:
    rows = numeric_rows()
    rows[3]["features"]["zurich-class"] = [1]
    with pytest.raises(CalibrationError, match=r"^calibration row 3: feature 'zurich-class': "
                                               "wrong type: expected a number, a string"):
        Calibration.from_rows(rows)
    rows[3]["features"]["zurich-class"] = "C"
    with pytest.raises(CalibrationError, match=r"^calibration row 3: feature 'zurich-class': "
                                               r"\"C\" is not a number \(the feature is "
                                               "declared numeric\\)$"):
        Calibration.from_rows(rows, kinds={"zurich-class": "numeric"})
    with pytest.raises(CalibrationError, match=r"^feature 'colour' is declared"):
        Calibration.from_rows(numeric_rows(), kinds={"colour": "categorical"})
    listed = [{"features": [1.0, 2.0], "prediction": 1.0, "label": 1.0}] * 25
    with pytest.raises(CalibrationError, match=r"^calibration row 24: 1 features, row 0 has 2"):
        Calibration.from_rows([*listed[:24], {**listed[0], "features": [1.0]}])
    with pytest.raises(CalibrationError, match=r"^calibration row 2: features are an object"):
        Calibration.from_rows([*listed[:2], *numeric_rows()])


def test_class_name_labels_are_refused_with_how_to_give_them() -> None:
    rows = [{"features": [float(i)], "prediction": [0.5, 0.5], "label": "Adelie"}
            for i in range(25)]
    with pytest.raises(CalibrationError, match=r"^calibration row 0: field 'label': \"Adelie\" "
                                               "is a class name; a classification label is the "
                                               r"class's index \(its position in the "
                                               "prediction's probabilities\\)"):
        Calibration.from_rows(rows)


def test_schema_options_of_the_configuration() -> None:
    names, raw = penguins()
    config = StreamConfig(name="penguins", task="regression", calibration="x",
                          features={"year": "categorical"}, vocabulary={"island": ["Dream"]},
                          max_categories=2, seed=5)
    cal = Calibration.from_rows(wire_rows(names, raw), **config.schema_options)
    kinds = dict(zip(cal.schema.labels, cal.schema.kinds, strict=True))
    assert kinds["year"] == "categorical" and kinds["bill_depth_mm"] == "numeric"
    island, species = (cal.schema.features[names.index(n)] for n in ("island", "species"))
    assert island.vocabulary == ("Dream",)  # type: ignore[union-attr]
    assert species.vocabulary == ("Adelie", "Gentoo")  # type: ignore[union-attr]
    assert cal.schema.max_categories == 2


def test_default_configuration_leaves_numeric_streams_unchanged() -> None:
    config = StreamConfig(name="s", task="regression", calibration="x")
    assert config.features is None and config.vocabulary is None
    assert config.max_categories == 64
    assert config.data_quality.enabled
    assert config.data_quality.false_alarm_every == 30 * 86_400.0
    assert config.data_quality.rates == ("missing", "unseen")
    cal = Calibration.from_rows(numeric_rows(), **config.schema_options)
    assert cal.schema.is_plain


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"features": {}}, "features: declare at least one feature"),
        ({"features": {"a": "text"}}, "Input should be 'numeric' or 'categorical'"),
        ({"features": {"a": "numeric"}, "vocabulary": {"a": ["x"]}},
         "vocabulary.a: feature 'a' is declared numeric"),
        ({"vocabulary": {"a": []}}, "vocabulary.a: give at least one category"),
        ({"vocabulary": {"a": ["1", 1.0]}}, "vocabulary.a: category '1' is given twice"),
        ({"vocabulary": {"a": [[1]]}}, "vocabulary.a.0"),
        ({"max_categories": 0}, "max_categories"),
        ({"max_categories": 1001}, "max_categories"),
        ({"data_quality": {"rates": []}}, "data_quality.rates: name at least one"),
        ({"data_quality": {"rates": ["missing", "missing"]}}, "'missing' is given twice"),
        ({"data_quality": {"rates": ["drift"]}}, "'missing', 'unseen' or 'out_of_range'"),
        ({"data_quality": {"false_alarm_every": "0d"}}, "data_quality.false_alarm_every"),
        ({"data_quality": {"budget": "7d"}}, "data_quality.budget"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_tabular_configuration_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        StreamConfig(name="s", task="regression", calibration="x", **change)


def test_tabular_configuration_parses() -> None:
    config = StreamConfig.model_validate({
        "name": "s", "task": "regression", "calibration": "x",
        "features": {"country": "categorical", "amount": "numeric"},
        "vocabulary": {"country": ["DE", "FR", True, 7]}, "max_categories": 16,
        "data_quality": {"false_alarm_every": "14d", "rates": ["missing", "out_of_range"]},
    })
    assert config.schema_options == {
        "kinds": {"country": "categorical", "amount": "numeric"},
        "vocabulary": {"country": ["DE", "FR", True, 7]}, "max_categories": 16, "seed": 0}
    assert config.data_quality.false_alarm_every == 14 * 86_400.0
    assert StreamConfig.model_validate(config.model_dump(mode="json")) == config


def test_every_run_path_reads_the_calibration_with_the_declared_schema() -> None:
    """A configuration's ``features:`` declaration reaches the calibration a run builds: from
    the configuration itself and from a registered stream's stored rows."""
    from monitor.db.store import StoredStream
    from monitor.streams.config import StreamConfig
    from monitor.streams.setup import load_calibration, stored_calibration

    rows = [{"features": {"code": str(i % 3), "x": float(i)}, "prediction": 0.0,
             "label": float(i)} for i in range(40)]
    config = {"name": "coded", "task": "regression", "calibration": rows,
              "features": {"code": "numeric"}}
    with pytest.raises(Exception, match="feature 'code'"):  # "0" is not a number
        load_calibration(StreamConfig.model_validate(config))
    config["features"] = {"x": "categorical"}
    declared = load_calibration(StreamConfig.model_validate(config))
    assert declared.schema.kinds == ("categorical", "categorical")
    stored = stored_calibration(StoredStream(config, rows, 1, ["code", "x"]))
    assert stored.schema == declared.schema
