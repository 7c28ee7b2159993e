"""FeatureSchema (docs/tabular.md): inference on real data, code rows, the mixed embedding's
distance, high cardinality, the data-quality reference and the JSON state."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from monitor.core.tabular import MAX_SEEN
from monitor.streams.events import InvalidEvent
from monitor.streams.schema import (
    CategoricalFeature,
    FeatureSchema,
    NumericFeature,
    SchemaError,
)
from tests.support.tabular_data import cars, penguins

# -- inference on real data -----------------------------------------------------------------------


def test_penguins_strings_are_categorical_and_nans_missing() -> None:
    names, rows = penguins()
    schema = FeatureSchema.fit(rows, names)
    kinds = dict(zip(schema.labels, schema.kinds, strict=True))
    assert kinds == {"species": "categorical", "island": "categorical", "sex": "categorical",
                     "bill_length_mm": "numeric", "bill_depth_mm": "numeric",
                     "flipper_length_mm": "numeric", "body_mass_g": "numeric",
                     "year": "numeric"}
    assert not schema.is_plain
    species = schema.features[0]
    assert isinstance(species, CategoricalFeature)
    assert species.vocabulary == ("Adelie", "Gentoo", "Chinstrap")  # by frequency
    sex = schema.features[names.index("sex")]
    assert isinstance(sex, CategoricalFeature) and set(sex.vocabulary) == {"male", "female"}
    C = schema.codes(rows)
    assert int(np.isnan(C[:, names.index("sex")]).sum()) == 11
    assert int(np.isnan(C[:, names.index("bill_length_mm")]).sum()) == 2
    bill = schema.features[names.index("bill_length_mm")]
    assert isinstance(bill, NumericFeature) and bill.may_be_missing
    assert bill.mean == pytest.approx(np.nanmean([r[2] for r in rows if r[2] is not None]))
    missing = {q.feature: q.ones for q in schema.quality_reference if q.rate == "missing"}
    assert missing == {"species": 0, "island": 0, "bill_length_mm": 2, "bill_depth_mm": 2,
                       "flipper_length_mm": 2, "body_mass_g": 2, "sex": 11, "year": 0}


def test_cars_origin_and_name_are_categorical_with_nan_measurements() -> None:
    names, rows = cars()
    schema = FeatureSchema.fit(rows, names, max_categories=8)
    assert [n for n, k in zip(names, schema.kinds, strict=True) if k == "categorical"] == [
        "Name", "Origin"]
    origin = schema.features[names.index("Origin")]
    assert isinstance(origin, CategoricalFeature)
    assert origin.vocabulary == ("USA", "Japan", "Europe")
    name = schema.features[0]
    assert isinstance(name, CategoricalFeature) and len(name.vocabulary) == 8
    assert len(name.seen) == len({r[0] for r in rows}) > 8  # the rest are "other", still seen
    C = schema.codes(rows)
    assert int(np.isnan(C[:, names.index("Horsepower")]).sum()) == 6
    assert int(np.isnan(C[:, names.index("Miles_per_Gallon")]).sum()) == 8
    X = schema.encode(C)
    # Name 8+3, Origin 3+3 one-hot columns; MPG and Horsepower carry a missing indicator
    assert X.shape == (len(rows), 7 + 2 + 11 + 6)
    assert np.isfinite(X).all()
    assert schema.numeric_columns.sum() == 7
    assert schema.encoded_features.count("Name") == 11
    assert schema.encoded_features.count("Horsepower") == 2


# -- code rows ------------------------------------------------------------------------------------


def _shop(n: int = 40) -> tuple[tuple[str, ...], list[list[Any]]]:
    countries = ["DE", "FR", "DE", "IT", "FR", "DE", "ES", "DE"]
    return ("amount", "country", "vip"), [
        [float(i), countries[i % len(countries)], i % 5 == 0] for i in range(n)]


def test_codes_vocabulary_other_and_unseen() -> None:
    names, rows = _shop()
    schema = FeatureSchema.fit(rows, names, max_categories=2)
    country = schema.features[1]
    assert isinstance(country, CategoricalFeature)
    assert country.vocabulary == ("DE", "FR")  # IT and ES tie: both "other"
    read = [schema.read({"amount": 1, "country": c, "vip": True}).codes[1]
            for c in ("DE", "FR", "IT", "ES", "PT")]
    assert read == [0.0, 1.0, 2.0, 2.0, 3.0]
    vip = schema.features[2]
    assert isinstance(vip, CategoricalFeature) and vip.vocabulary == ("false", "true")
    tie = FeatureSchema.fit([["b"], ["a"], ["a"], ["b"], ["c"]] * 4, ("x",), max_categories=1)
    assert tie.features[0].vocabulary == ("b",)  # type: ignore[union-attr]


def test_read_object_and_list_forms() -> None:
    names, rows = _shop()
    schema = FeatureSchema.fit(rows, names)
    row = schema.read({"country": "FR", "vip": None, "model": "v2"})
    assert math.isnan(row.codes[0]) and row.codes[1] == 1.0 and math.isnan(row.codes[2])
    assert row.unknown == ("model",) and row.absent == ("amount",)
    assert schema.read([3, "DE", False]).codes == [3.0, 0.0, 0.0]
    with pytest.raises(InvalidEvent, match="wrong feature dimension: got 2, the stream expects 3"):
        schema.read([3, "DE"])
    with pytest.raises(InvalidEvent, match="""field 'features.amount': "12" is not a number """
                                           r"\(feature 'amount' is numeric\)"):
        schema.read({"amount": "12", "country": "DE", "vip": True})
    with pytest.raises(InvalidEvent, match=r"field 'features\.amount': true is not a number"):
        schema.read([True, "DE", True])


def test_a_number_in_a_categorical_feature_is_its_text() -> None:
    schema = FeatureSchema.fit([["10115"], [10115], ["75001"], [True]] * 5, ("zip",))
    feature = schema.features[0]
    assert isinstance(feature, CategoricalFeature)
    assert feature.vocabulary == ("10115", "75001", "true")
    assert schema.read([10115.0]).codes == schema.read(["10115"]).codes == [0.0]


def test_declared_kinds_and_pinned_vocabulary() -> None:
    names, rows = _shop()
    schema = FeatureSchema.fit(rows, names, kinds={"amount": "categorical"},
                               vocabulary={"country": ["FR", "PT"]})
    assert schema.kinds == ("categorical", "categorical", "categorical")
    country = schema.features[1]
    assert isinstance(country, CategoricalFeature) and country.vocabulary == ("FR", "PT")
    assert [schema.read([1, c, True]).codes[1] for c in ("FR", "PT", "DE", "NL")] == [
        0.0, 1.0, 2.0, 3.0]
    with pytest.raises(SchemaError, match="calibration row 0: feature 'country': \"DE\" is not "
                                          "a number"):
        FeatureSchema.fit(rows, names, kinds={"country": "numeric"})
    with pytest.raises(SchemaError, match="feature 'colour' is declared"):
        FeatureSchema.fit(rows, names, kinds={"colour": "numeric"})
    with pytest.raises(SchemaError, match="feature 'x' is missing in every calibration row"):
        FeatureSchema.fit([[None, 1.0]] * 20, ("x", "y"))
    declared = FeatureSchema.fit([[None, 1.0]] * 20, ("x", "y"), kinds={"x": "numeric"})
    assert declared.kinds == ("numeric", "numeric")


# -- the encoding ---------------------------------------------------------------------------------


def test_plain_schema_encodes_as_the_identity() -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 3)) * [1.0, 1e-3, 1e6]
    schema = FeatureSchema.fit(X.tolist(), None)
    assert schema.is_plain and schema.width == 3
    C = schema.codes(X.tolist())
    assert C.tobytes() == X.tobytes()
    assert schema.encode(X) is X
    assert schema.numeric_columns.all() and schema.encoded_features == ("0", "1", "2")
    assert schema.read(X[0].tolist()).codes == X[0].tolist()
    # a missing value the calibration never had takes the calibration mean; the rest unchanged
    Y = X[:2].copy()
    Y[1, 2] = math.nan
    encoded = schema.encode(Y)
    assert encoded[0].tobytes() == X[0].tobytes()
    assert encoded[1, 2] == pytest.approx(X[:, 2].mean()) and encoded[1, :2].tolist() == Y[
        1, :2].tolist()


def _squared(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a - b) ** 2).sum())


def test_a_category_mismatch_adds_exactly_one() -> None:
    names, rows = penguins()
    schema = FeatureSchema.fit(rows, names, max_categories=2)
    C = schema.codes(rows)
    rng = np.random.default_rng(8)
    for j, feature in enumerate(schema.features):
        if not isinstance(feature, CategoricalFeature):
            continue
        # every pair of distinct cells: each vocabulary code, other, unseen, missing
        cells = [*range(len(feature.vocabulary)), feature.other, math.nan]
        for _ in range(20):
            base = C[rng.integers(len(C))].copy()
            for a in cells:
                for b in cells:
                    x, y = base.copy(), base.copy()
                    x[j], y[j] = a, b
                    X = schema.encode(np.stack([x, y]))
                    same = a == b or (math.isnan(a) and math.isnan(b))
                    assert _squared(X[0], X[1]) == pytest.approx(0.0 if same else 1.0, abs=1e-12)
        # unseen has a column of its own (0 on every calibration row): a mismatch with other
        x, y = base.copy(), base.copy()
        x[j], y[j] = feature.other, feature.unseen
        X = schema.encode(np.stack([x, y]))
        assert _squared(X[0], X[1]) == pytest.approx(1.0, abs=1e-12)


def test_numeric_features_are_standardised_with_a_missing_indicator() -> None:
    names, rows = penguins()
    schema = FeatureSchema.fit(rows, names)
    j = names.index("bill_length_mm")
    bill = schema.features[j]
    assert isinstance(bill, NumericFeature)
    base = schema.codes(rows)[0].copy()
    base[j] = bill.mean + bill.std
    other = base.copy()
    other[j] = bill.mean
    missing = base.copy()
    missing[j] = math.nan
    X = schema.encode(np.stack([base, other, missing]))
    assert _squared(X[0], X[1]) == pytest.approx(1.0)
    assert _squared(X[1], X[2]) == pytest.approx(1.0)  # the indicator; imputed at the mean


# -- high cardinality -----------------------------------------------------------------------------


def test_high_cardinality_is_bounded() -> None:
    rng = np.random.default_rng(1)
    # 200 frequent ids (Zipf) and 25 000 ids seen once, shuffled
    ids = [*(f"id-{k}" for k in np.minimum(rng.zipf(1.3, size=30_000), 200)),
           *(f"once-{k}" for k in range(25_000))]
    rows = [[ids[k], float(k % 7)] for k in rng.permutation(len(ids))]
    schema = FeatureSchema.fit(rows, ("user", "x"))
    user = schema.features[0]
    assert isinstance(user, CategoricalFeature)
    assert len({r[0] for r in rows}) > MAX_SEEN
    assert len(user.vocabulary) == 64 and len(user.seen) == MAX_SEEN
    assert len(user.seen_a) == MAX_SEEN  # part A alone has more than 10 000
    assert schema.width == 1 + 67
    state = json.dumps(schema.state_dict(), allow_nan=False)
    assert len(state) < 3 * 2 * MAX_SEEN * 16  # two bounded sets of short ids
    # the most frequent are kept: a calibration id beyond the bound reads as unseen
    counts: dict[str, int] = {}
    for r in rows:
        counts[r[0]] = counts.get(r[0], 0) + 1
    rare = min(counts, key=lambda k: (counts[k], k))
    assert schema.read([user.vocabulary[0], 1.0]).codes[0] == 0.0
    assert schema.read([user.seen[-1], 1.0]).codes[0] == user.other
    assert schema.read([rare, 1.0]).codes[0] in (user.other, user.unseen)
    assert schema.read(["never", 1.0]).codes[0] == user.unseen


# -- data quality ---------------------------------------------------------------------------------


def test_quality_indicators_of_an_event() -> None:
    names, rows = _shop()
    schema = FeatureSchema.fit(rows, names)
    assert schema.indicators == (("amount", "missing"), ("amount", "out_of_range"),
                                 ("country", "missing"), ("country", "unseen"),
                                 ("vip", "missing"), ("vip", "unseen"))
    amount = schema.features[0]
    assert isinstance(amount, NumericFeature)
    assert 0.0 <= amount.low <= amount.high <= 39.0
    quality = dict(zip(schema.indicators, schema.read({"amount": 1e6, "country": "PT"}).quality,
                       strict=True))
    assert quality == {("amount", "missing"): False, ("amount", "out_of_range"): True,
                       ("country", "missing"): False, ("country", "unseen"): True,
                       ("vip", "missing"): True, ("vip", "unseen"): False}


def test_quality_reference_split_is_seeded_and_half() -> None:
    names, rows = cars()
    a, b = FeatureSchema.fit(rows, names, seed=3), FeatureSchema.fit(rows, names, seed=3)
    assert a == b
    assert a != FeatureSchema.fit(rows, names, seed=4)
    counts = {(q.feature, q.rate): (q.n, q.ones) for q in a.quality_reference}
    assert counts[("Horsepower", "missing")] == (406, 6)
    assert counts[("Origin", "unseen")] == (203, 0)
    assert counts[("Name", "unseen")][0] == 203 and counts[("Name", "unseen")][1] > 0


def test_unseen_reference_rate_is_unbiased_for_an_exchangeable_event() -> None:
    """The split's point (docs/tabular.md, "Data quality"): for an event exchangeable with the
    calibration, E[its unseen indicator] = E[the reference rate]. Counted in-sample instead (the
    seen set of the whole calibration), the reference would be 0 and the bias the event's whole
    unseen probability. Monte Carlo over 3 000 seeds, Zipf categories with many rare values
    (P(unseen) ≈ 0.3): the mean difference lies within 4 standard errors of 0, and the in-sample
    bias (≈ 0.3) would lie far outside."""
    diffs, indicator = [], []
    for seed in range(3_000):
        rng = np.random.default_rng(seed)
        draw = [[f"c{k}"] for k in rng.zipf(1.5, size=61)]
        schema = FeatureSchema.fit(draw[:60], ("c",), seed=seed)
        ref = next(q for q in schema.quality_reference if q.rate == "unseen")
        hit = schema.read(draw[60]).quality[1]
        diffs.append(hit - ref.ones / ref.n)
        indicator.append(hit)
    se = np.std(diffs) / math.sqrt(len(diffs))
    assert abs(np.mean(diffs)) < 4 * se
    assert np.mean(indicator) > 0.2 > 8 * se


# -- state ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [penguins, cars, _shop], ids=["penguins", "cars", "shop"])
def test_state_round_trip(data: Any) -> None:
    names, rows = data()
    schema = FeatureSchema.fit(rows, names, max_categories=5)
    state = json.loads(json.dumps(schema.state_dict(), allow_nan=False))
    loaded = FeatureSchema.from_state(state)
    assert loaded == schema and loaded.state_dict() == schema.state_dict()
    C = schema.codes(rows)
    assert np.array_equal(loaded.codes(rows), C, equal_nan=True)
    assert loaded.encode(C).tobytes() == schema.encode(C).tobytes()
    for row in rows[:50]:
        assert loaded.read(row).quality == schema.read(row).quality
    with pytest.raises(SchemaError, match="unknown feature schema format"):
        FeatureSchema.from_state({**state, "format": 99})
