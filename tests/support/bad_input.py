"""A seeded generator of malformed events, and a mixer that hides them in good traffic.

Every generated record is one that the wire format (README "Event format") says must
go to the dead letters, each with the reason the pipeline documents for it: not UTF-8, not JSON,
not an object, NaN / Infinity / overflowing numbers, magnitudes above 1e100, wrong types (numeric
strings and booleans included), missing or unknown fields, an unknown kind or stream, a wrong
feature dimension, a value the stream's task cannot take, oversized, nested garbage (and nesting
beyond the recursion limit), control characters in ids, and a duplicate prediction id still
waiting for its label. Kafka adds tombstones (null values).
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Rng = np.random.Generator


@dataclass(frozen=True)
class BadEvent:
    """A malformed record, the Kafka key it is sent with and the dead-letter reason it must get
    (a regular expression, matched at the start of the reason)."""

    category: str
    key: str | bytes
    value: bytes | None  # None: a Kafka tombstone
    reason: str


@dataclass(frozen=True)
class Templates:
    """Good events to mutate: valid predictions and labels of the monitored streams."""

    predictions: Sequence[dict[str, Any]]
    labels: Sequence[dict[str, Any]]
    streams: Sequence[str]

    @classmethod
    def from_values(cls, values: Sequence[bytes], streams: Sequence[str]) -> Templates:
        events = [json.loads(v) for v in values[:2000]]
        return cls([e for e in events if e["kind"] == "prediction"],
                   [e for e in events if e["kind"] == "label"], list(streams))


def _dump(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def _pick(rng: Rng, items: Sequence[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def _event(rng: Rng, t: Templates) -> dict[str, Any]:
    pool = t.labels if t.labels and rng.random() < 0.3 else t.predictions
    return dict(_pick(rng, pool))


def _prediction(rng: Rng, t: Templates) -> dict[str, Any]:
    return dict(_pick(rng, t.predictions))


def _garbage_text(rng: Rng, n: int) -> str:
    alphabet = string.ascii_letters + string.digits + string.punctuation + " "
    return "".join(_pick(rng, alphabet) for _ in range(n))


# -- one generator per category: (rng, templates) -> (key, value, reason) ------------------------

Made = tuple[str | bytes, bytes | None, str]


def not_json(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    good = _dump(event)
    choice = int(rng.integers(8))
    value = [
        good[: int(rng.integers(1, len(good) - 1))],  # truncated
        ("x" + _garbage_text(rng, int(rng.integers(1, 60)))).encode(),
        good.replace(b'"', b"'"),
        good + b"}",
        b"\xef\xbb\xbf" + good,  # a UTF-8 byte order mark
        b"{" * int(rng.integers(1, 20)),
        good[:-1] + b",/* comment */}",
        b"\x00" * int(rng.integers(1, 8)),
    ][choice]
    return event["stream"], value, "not valid JSON"


def not_object(rng: Rng, t: Templates) -> Made:
    value = _pick(rng, [b"[]", b"[1,2]", b"42", b'"an event"', b"null", b"true", b"-0.5",
                        b"[" + _dump(_event(rng, t)) + b"]"])
    return _pick(rng, t.streams), value, "an event must be a JSON object"


def invalid_utf8(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    if rng.random() < 0.2:
        # With their byte order marks (0xFF 0xFE ...): without one, UTF-16 text of ASCII is
        # valid UTF-8 (NUL bytes) and fails as JSON instead.
        encoding = _pick(rng, ["utf-16", "utf-32"])
        return event["stream"], json.dumps(event).encode(encoding), "not valid UTF-8"
    bad = _pick(rng, [b"\xff", b"\xfe", b"\xc3\x28", b"\xa0\xa1", b"\xed\xa0\x80",
                      b"\xf0\x28\x8c\xbc", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\x80",
                      "é".encode("latin-1")])
    good = _dump(event)
    at = good.index(b'"id":"') + 6
    return event["stream"], good[:at] + bad + good[at:], "not valid UTF-8"


def non_finite(rng: Rng, t: Templates) -> Made:
    literal = _pick(rng, ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
    if rng.random() < 0.25 and t.labels:
        event = dict(_pick(rng, t.labels))
        event["label"] = "@@"
    else:
        event = _prediction(rng, t)
        field = _pick(rng, ["features", "prediction", "label"])
        if field == "features":
            features = list(event["features"])
            features[int(rng.integers(len(features)))] = "@@"
            event["features"] = features
        else:
            event[field] = "@@"
    value = _dump(event).replace(b'"@@"', literal.encode())
    reason = ("(NaN|-?Infinity) is not allowed: numbers must be finite"
              "|field '.*': (Input should be a finite number|numbers must lie within)")
    return event["stream"], value, reason


#: (field, replacement) pairs that no lax conversion turns into a valid value.
WRONG_TYPES: tuple[tuple[str, Any], ...] = (
    ("features", "1,2,3,4,5"), ("features", None), ("features", [[1.0], [2.0]]),
    ("features", [1.0, "x", 3.0, 4.0, 5.0]), ("features", {"f2": [1, 2]}), ("features", []),
    ("prediction", None), ("prediction", {"value": 1.0}), ("prediction", "high"),
    ("prediction", [1.0]), ("id", 12.5), ("id", None), ("id", ["e-1"]), ("id", ""),
    ("id", True), ("stream", 42), ("stream", None), ("ts", "yesterday"), ("ts", {"t": 1}),
    ("ts", "2026-13-45T99:99:99Z"), ("ts", [2026, 1, 1]), ("label", [1.0]),
    ("label", {"value": 1.0}), ("logits", "abc"), ("embedding", [[1.0, 2.0]]),
)


def wrong_type(rng: Rng, t: Templates) -> Made:
    event = _prediction(rng, t)
    field, value = _pick(rng, WRONG_TYPES)
    event[field] = value
    return t.streams[0] if field == "stream" else event["stream"], _dump(event), "field '"


def bad_kind(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    kind = _pick(rng, ["predictions", "LABEL", "alarm", "", 1, None, ["label"], "__missing__"])
    if kind == "__missing__":
        del event["kind"]
    else:
        event["kind"] = kind
    return event["stream"], _dump(event), "field 'kind' must be 'prediction' or 'label'"


def missing_field(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    required = ["id", "stream", "label"] if event["kind"] == "label" else [
        "id", "stream", "features", "prediction"]
    field = _pick(rng, required)
    del event[field]
    return _pick(rng, t.streams), _dump(event), f"field '{field}'.*[Ff]ield required"


def extra_field(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    name = _pick(rng, ["extra", "Features", "model", "__proto__", "prediction_", "lable"])
    event[name] = _pick(rng, [1, "x", None, {"nested": [1, 2]}])
    reason = f"field '{name}': not a field of the event format; put metadata"
    return event["stream"], _dump(event), reason


def wrong_dimension(rng: Rng, t: Templates) -> Made:
    event = _prediction(rng, t)
    n = len(event["features"])
    size = int(_pick(rng, [*range(1, n), *range(n + 1, n + 20)]))
    values = [round(float(v), 3) for v in rng.normal(size=size)]
    if rng.random() < 0.3:
        event["features"] = {f"f{i}": v for i, v in enumerate(values)}
    else:
        event["features"] = values
    return event["stream"], _dump(event), "wrong feature dimension"


def unknown_stream(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    event["stream"] = f"nobody-{int(rng.integers(1000))}"
    return event["stream"], _dump(event), "unknown stream"


def bad_stream_name(rng: Rng, t: Templates) -> Made:
    event = _event(rng, t)
    event["stream"] = _pick(rng, ["../../etc/passwd", "", "a b", "x" * 200, "bikes;DROP TABLE",
                                  "-leading-dash", "ünïcode"])
    return _pick(rng, t.streams), _dump(event), "field 'stream'"


def wrong_value(rng: Rng, t: Templates) -> Made:
    """Valid JSON of valid types that the stream's task (regression here) cannot take."""
    event = _prediction(rng, t)
    choice = int(rng.integers(3))
    if choice == 0:
        event["prediction"] = [0.25, 0.75]
        reason = "regression stream expects a number in 'prediction'"
    elif choice == 1:
        event["label"] = _pick(rng, ["high", "n/a", "57 units"])
        # Refused by the stream (a text label) or already by the wire format (numbers only).
        reason = ("regression stream expects a numeric 'label'"
                  "|field 'label': \"[^\"]*\" is a class name")
    else:
        event["logits"] = [0.1, 2.0, -1.0]
        reason = "'logits' has length 3, stream expects None"
    return event["stream"], _dump(event), reason


def nested_garbage(rng: Rng, t: Templates) -> Made:
    depth = int(rng.integers(2, 40))
    nest: Any = [1.0]
    for i in range(depth):
        nest = {"k": nest} if i % 2 else [nest, 2.0]
    event = _prediction(rng, t)
    field = _pick(rng, ["features", "prediction", "label", "ts", "id"])
    event[field] = nest
    return event["stream"], _dump(event), f"field '{field}"


def control_in_id(rng: Rng, t: Templates) -> Made:
    """A NUL or another control character in the id (PostgreSQL text cannot hold NUL)."""
    event = _event(rng, t)
    at = int(rng.integers(len(event["id"]) + 1))
    event["id"] = event["id"][:at] + _pick(rng, ["\x00", "\n", "\r", "\t", "\x1b", "\x7f"]) + \
        event["id"][at:]
    return event["stream"], _dump(event), "field 'id'"


def huge_magnitude(rng: Rng, t: Templates) -> Made:
    """Finite numbers too large for the detectors (squares and distances would overflow)."""
    event = _prediction(rng, t)
    value = float(_pick(rng, [1e101, -1e150, 1e200, 1.7e308, -1e308]))
    field = _pick(rng, ["features", "prediction", "label"])
    if field == "features":
        event["features"] = [value if i == 0 else v for i, v in enumerate(event["features"])]
    else:
        event[field] = value
    return event["stream"], _dump(event), "field '(features.0|prediction|label)': numbers must lie"


def coerced_type(rng: Rng, t: Templates) -> Made:
    """Values a lax parser would convert: numeric strings and booleans (``ts`` as a boolean; a
    number is epoch seconds or milliseconds, README "Event format")."""
    event = _prediction(rng, t)
    field, value = _pick(rng, [("features", ["1.5", "2", "3", "4", "5"]),
                               ("features", [True, 2.0, 3.0, 4.0, 5.0]), ("prediction", "2.5"),
                               ("prediction", False), ("label", "57"), ("label", True),
                               ("ts", True), ("ts", False)])
    event[field] = value
    return event["stream"], _dump(event), f"field '{field}"


def deep_nesting(rng: Rng, t: Templates) -> Made:
    """Arrays nested beyond Python's recursion limit (a few kB of brackets)."""
    depth = int(rng.integers(3000, 4000))
    event = _event(rng, t)
    value = _dump({**event, "label": "@@"}).replace(b'"@@"', b"[" * depth + b"]" * depth)
    return event["stream"], value, "not valid JSON: nested too deeply"


def huge(max_event_bytes: int) -> Callable[[Rng, Templates], Made]:
    def make(rng: Rng, t: Templates) -> Made:
        event = _event(rng, t)
        event["pad"] = "x" * int(rng.integers(max_event_bytes + 1, 4 * max_event_bytes))
        reason = f"event of \\d+ bytes exceeds the limit of {max_event_bytes}"
        return event["stream"], _dump(event), reason
    return make


def tombstone(rng: Rng, t: Templates) -> Made:
    return _pick(rng, t.streams), _pick(rng, [None, b""]), "not valid JSON"


CATEGORIES: dict[str, Callable[[Rng, Templates], Made]] = {
    "not_json": not_json,
    "not_object": not_object,
    "invalid_utf8": invalid_utf8,
    "non_finite": non_finite,
    "wrong_type": wrong_type,
    "bad_kind": bad_kind,
    "missing_field": missing_field,
    "extra_field": extra_field,
    "wrong_dimension": wrong_dimension,
    "unknown_stream": unknown_stream,
    "bad_stream_name": bad_stream_name,
    "wrong_value": wrong_value,
    "nested_garbage": nested_garbage,
    "control_in_id": control_in_id,
    "huge_magnitude": huge_magnitude,
    "coerced_type": coerced_type,
    "deep_nesting": deep_nesting,
}


def generate(rng: Rng, templates: Templates, n: int, *, max_event_bytes: int, n_huge: int,
             tombstones: bool = False) -> list[BadEvent]:
    """``n`` malformed records: ``n_huge`` oversized ones, the rest spread over the categories
    (plus tombstones for Kafka). Duplicate ids come from :func:`mix`, which needs the order."""
    makers = dict(CATEGORIES)
    if tombstones:
        makers["tombstone"] = tombstone
    names = sorted(makers)
    out = []
    big = huge(max_event_bytes)
    for _ in range(n_huge):
        key, value, reason = big(rng, templates)
        out.append(BadEvent("huge", key, value, reason))
    for i in range(n - n_huge):
        name = names[i % len(names)]
        key, value, reason = makers[name](rng, templates)
        out.append(BadEvent(name, key, value, reason))
    return out


@dataclass(frozen=True)
class Mixed:
    """Good and bad records in one order; ``bad[i]`` is the malformed record at position i."""

    values: list[bytes | None]
    keys: list[str | bytes]
    bad: dict[int, BadEvent]


def mix(values: Sequence[bytes], keys: Sequence[str], bad: Sequence[BadEvent], rng: Rng,
        duplicates: int, delayed_streams: Sequence[str]) -> Mixed:
    """Insert ``bad`` at random positions of the good records, and ``duplicates`` copies of
    predictions of ``delayed_streams`` (whose labels come later) right after their originals."""
    slots: list[list[tuple[str | bytes, bytes | None, BadEvent | None]]] = [
        [(k, v, None)] for k, v in zip(keys, values, strict=True)
    ]
    candidates = [i for i, (k, v) in enumerate(zip(keys, values, strict=True))
                  if k in delayed_streams and b'"kind":"prediction"' in v]
    for i in rng.choice(candidates, size=duplicates, replace=False):
        event = json.loads(values[i])
        event["prediction"] = float(event["prediction"]) + 1.0  # same id, other content
        value = _dump(event)
        reason = f"duplicate prediction id '{event['id']}'"
        slots[i].append((keys[i], value, BadEvent("duplicate_id", keys[i], value, reason)))
    for bad_event in bad:
        slots[int(rng.integers(len(slots)))].insert(0, (bad_event.key, bad_event.value,
                                                        bad_event))
    out = Mixed([], [], {})
    for slot in slots:
        for key, record, marked in slot:
            if marked is not None:
                out.bad[len(out.values)] = marked
            out.values.append(record)
            out.keys.append(key)
    return out
