"""Wire-format decoding: every malformed event is rejected with a reason, good ones pass."""

from __future__ import annotations

import json

import pytest

from monitor.streams.events import InvalidEvent, LabelEvent, PredictionEvent, decode_event

GOOD = {
    "kind": "prediction",
    "stream": "bikes",
    "id": "e-1",
    "features": [0.3, 1.2],
    "prediction": 41.7,
}


def raw(**changes: object) -> bytes:
    event = {**GOOD, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not ...}).encode()


def test_prediction_and_label_round_trip() -> None:
    event = decode_event(raw(ts="2026-11-30T12:00:00Z", label=57))
    assert isinstance(event, PredictionEvent)
    assert event.label == 57 and event.ts is not None and event.ts.tzinfo is not None
    label = decode_event(b'{"kind": "label", "stream": "bikes", "id": "e-1", "label": 2.5}')
    assert isinstance(label, LabelEvent) and label.label == 2.5


def test_object_features_follow_calibration_order() -> None:
    event = decode_event(raw(features={"b": 2.0, "a": 1.0}))
    assert isinstance(event, PredictionEvent)
    assert event.feature_vector(("a", "b")).tolist() == [1.0, 2.0]
    with pytest.raises(InvalidEvent, match=r"field 'features\.c': missing$"):
        event.feature_vector(("a", "c"))
    with pytest.raises(InvalidEvent, match=r"field 'features\.b': not one of the stream's 1 "):
        event.feature_vector(("a",))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        pytest.param(b"not json", "not valid JSON", id="not-json"),
        pytest.param(b"\xff\xfe{}", "UTF-8", id="invalid-utf8"),
        pytest.param(b"[1, 2]", "JSON object", id="array"),
        pytest.param(raw(kind="weird"), "kind", id="unknown-kind"),
        pytest.param(raw(features=[1, [2]]), "field 'features.1': wrong type: expected a number, "
                     "a string, a boolean or null$", id="nested-feature"),
        pytest.param(raw(features={"a": {"b": 1}}), "field 'features.a': wrong type",
                     id="nested-object-feature"),
        pytest.param(raw(meta=[1]), "field 'meta': wrong type: expected object", id="meta-list"),
        pytest.param(raw(features=[]), "features", id="empty-features"),
        pytest.param(raw(prediction="high"), "prediction", id="string-prediction"),
        pytest.param(raw(stream="has space"), "stream", id="bad-stream-name"),
        pytest.param(raw(id=""), "id", id="empty-id"),
        pytest.param(raw(model_version="v2"), "field 'model_version': not a field of the event "
                     "format; put metadata such as model_version under 'meta'",
                     id="unknown-field"),
        pytest.param(raw(id=...), "id", id="missing-id"),
        pytest.param(raw(ts="yesterday"), "ts", id="bad-timestamp"),
        pytest.param(
            b'{"kind":"prediction","stream":"s","id":"1","features":[NaN],"prediction":1}',
            "NaN",
            id="nan",
        ),
        pytest.param(
            b'{"kind":"prediction","stream":"s","id":"1","features":[Infinity],"prediction":1}',
            "Infinity",
            id="inf",
        ),
        pytest.param(raw(features=[1e400]), "finite", id="overflow-to-inf"),
        pytest.param(b'{"kind":"label","stream":"s","id":"1"}', "label", id="label-missing"),
    ],
)
def test_malformed_events_are_rejected_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        decode_event(payload)


def test_oversized_event_is_rejected_unread() -> None:
    with pytest.raises(InvalidEvent, match="exceeds the limit"):
        decode_event(b" " * 1001, max_bytes=1000)


def test_feature_values_may_be_strings_booleans_and_nulls() -> None:
    event = decode_event(raw(features=[1, "DE", True, None]))
    assert isinstance(event, PredictionEvent)
    # a list holds numbers only (the numeric fast path relies on it); other values: a tuple
    assert event.features == (1.0, "DE", True, None)
    assert type(event.features[0]) is float
    numeric = decode_event(raw(features=[1, 2.5]))
    assert isinstance(numeric, PredictionEvent) and numeric.features == [1.0, 2.5]
    named = decode_event(raw(features={"amount": 3, "country": "DE", "vip": False, "age": None}))
    assert isinstance(named, PredictionEvent)
    assert named.features == {"amount": 3.0, "country": "DE", "vip": False, "age": None}


def test_meta_is_accepted_and_ignored() -> None:
    event = decode_event(raw(meta={"model_version": "v2", "trace": [1, {"a": None}]}))
    assert isinstance(event, PredictionEvent)
    assert event.meta == {"model_version": "v2", "trace": [1, {"a": None}]}
    label = decode_event(b'{"kind":"label","stream":"s","id":"1","label":1,"meta":{}}')
    assert isinstance(label, LabelEvent) and label.meta == {}


def test_feature_values_of_a_numeric_stream_name_the_feature() -> None:
    event = decode_event(raw(features={"a": 1, "country": "DE"}))
    assert isinstance(event, PredictionEvent)
    with pytest.raises(InvalidEvent, match=r"""field 'features\.country': "DE" is not a number"""):
        event.feature_values(("a", "country"))
    listed = decode_event(raw(features=[1.5, None]))
    assert isinstance(listed, PredictionEvent)
    with pytest.raises(InvalidEvent, match=r"field 'features\.1': null is not a number"):
        listed.feature_values(None)
    names = tuple(f"f{i}" for i in range(18))
    wide = decode_event(raw(features={n: 1.0 for n in names[1:]}))
    assert isinstance(wide, PredictionEvent)
    with pytest.raises(InvalidEvent) as exc:
        wide.feature_values(names)
    assert str(exc.value) == "field 'features.f0': missing"
