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
    with pytest.raises(InvalidEvent, match="feature names"):
        event.feature_vector(("a", "c"))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        pytest.param(b"not json", "not valid JSON", id="not-json"),
        pytest.param(b"\xff\xfe{}", "UTF-8", id="invalid-utf8"),
        pytest.param(b"[1, 2]", "JSON object", id="array"),
        pytest.param(raw(kind="weird"), "kind", id="unknown-kind"),
        pytest.param(raw(features=[1, "x"]), "features", id="string-feature"),
        pytest.param(raw(features=[]), "features", id="empty-features"),
        pytest.param(raw(prediction="high"), "prediction", id="string-prediction"),
        pytest.param(raw(stream="has space"), "stream", id="bad-stream-name"),
        pytest.param(raw(id=""), "id", id="empty-id"),
        pytest.param(raw(extra=1), "extra", id="unknown-field"),
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
