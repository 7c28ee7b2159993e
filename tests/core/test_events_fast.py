"""The fast event decoder (msgspec) agrees with the reference (json + pydantic).

For every input: ``decode_event`` gives what the reference gives (an equal event with equal
field types, or the same dead-letter reason), ``decode_batch`` gives the same element-wise, and
whatever the raw msgspec decoder accepts the reference accepts with equal values (the one known
difference, long timestamp fractions, after the fast path's own correction).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.streams.calibration import Calibration
from monitor.streams.events import (
    _FAST,
    Event,
    InvalidEvent,
    LabelEvent,
    PredictionEvent,
    _decode_slow,
    _public,
    _suspect_ts,
    _tabular,
    _with_pydantic_ts,
    decode_batch,
    decode_event,
)
from tests.support.bad_input import CATEGORIES, Templates, generate

Raw = bytes | str

# -- comparison ---------------------------------------------------------------------------------


def typed(value: Any) -> Any:
    """A form of ``value`` that compares types too: 1 != 1.0, -0.0 != 0.0, naive != aware."""
    if isinstance(value, bool | int | str) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, datetime):
        return ("datetime", value.replace(tzinfo=None), value.utcoffset(), type(value.tzinfo))
    raise AssertionError(f"unexpected value {value!r}")


def fields(event: Event) -> dict[str, Any]:
    names = msgspec.structs.fields(event)
    return {"type": type(event).__name__, "kind": event.kind,
            **{f.name: typed(getattr(event, f.name)) for f in names}}


def outcome(result: Event | Exception) -> Any:
    if isinstance(result, Exception):
        return (type(result).__name__, str(result))
    return fields(result)


def reference(raw: Raw | dict[str, Any], max_bytes: int = 256 * 1024) -> Event | InvalidEvent:
    try:
        return _public(_decode_slow(raw, max_bytes))
    except InvalidEvent as exc:
        return exc


def via_decode_event(raw: Raw | dict[str, Any], max_bytes: int = 256 * 1024) -> Any:
    try:
        return decode_event(raw, max_bytes)
    except InvalidEvent as exc:
        return exc


def check(raw: Raw, max_bytes: int = 256 * 1024) -> None:
    """Every agreement for one input."""
    expected = outcome(reference(raw, max_bytes))
    assert outcome(via_decode_event(raw, max_bytes)) == expected, raw
    # The raw fast decoders: whatever they accept, the reference accepts with the same values.
    if len(raw) <= max_bytes:
        for decode in (_FAST.decode, _tabular):
            try:
                fast = decode(raw)
            except Exception:
                fast = None
            if fast is not None:
                if fast.ts is not None and _suspect_ts(raw):
                    fast = _with_pydantic_ts(fast, raw)
                assert fast is not None
                assert outcome(fast) == expected, raw


def check_batch(values: list[Raw], max_bytes: int = 256 * 1024) -> None:
    expected = [outcome(via_decode_event(v, max_bytes)) for v in values]
    assert [outcome(r) for r in decode_batch(values, max_bytes)] == expected
    assert [outcome(reference(v, max_bytes)) for v in values] == expected


# -- corpora ------------------------------------------------------------------------------------

GOOD: dict[str, Any] = {"kind": "prediction", "stream": "bikes", "id": "e-1",
                        "features": [0.3, 1.2], "prediction": 41.7}


def dump(**changes: Any) -> bytes:
    event = {**GOOD, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not ...}).encode()


def templates(n: int = 200) -> Templates:
    rng = np.random.default_rng(3)
    values = []
    for i in range(n):
        if i % 4 == 3:
            event: dict[str, Any] = {"kind": "label", "stream": "bikes", "id": f"e-{i - 1}",
                                     "label": float(rng.normal())}
        else:
            event = {"kind": "prediction", "stream": "bikes", "id": f"e-{i}",
                     "ts": f"2026-01-01T00:{i % 60:02d}:00Z",
                     "features": [float(x) for x in rng.normal(size=5)],
                     "prediction": float(rng.normal())}
        values.append(json.dumps(event, separators=(",", ":")).encode())
    return Templates.from_values(values, ["bikes"])


def bad_corpus() -> list[bytes]:
    t = templates()
    bad = generate(np.random.default_rng(11), t, 40 * len(CATEGORIES), max_event_bytes=2000,
                   n_huge=0)
    return [b.value for b in bad if b.value is not None]


EXAMPLES: list[Raw] = [
    # tests/core/test_events.py
    b"not json", b"\xff\xfe{}", b"[1, 2]", dump(kind="weird"), dump(features=[1, "x"]),
    dump(features=[]), dump(prediction="high"), dump(stream="has space"), dump(id=""),
    dump(extra=1), dump(id=...), dump(ts="yesterday"),
    b'{"kind":"prediction","stream":"s","id":"1","features":[NaN],"prediction":1}',
    b'{"kind":"prediction","stream":"s","id":"1","features":[Infinity],"prediction":1}',
    dump(features=[1e400]), b'{"kind":"label","stream":"s","id":"1"}',
    dump(ts="2026-11-30T12:00:00Z", label=57), dump(features={"b": 2.0, "a": 1.0}),
    b'{"kind": "label", "stream": "bikes", "id": "e-1", "label": 2.5}',
    # where Python's re and pydantic's Rust regex differ: "$" before a final newline
    dump(stream="bikes\n"), dump(id="e-1\n"), dump(id="e-1\x7f"), dump(id="e\x00"),
    # timestamps: msgspec rounds long fractions, pydantic truncates
    dump(ts="2026-11-30T12:00:00.1234567Z"), dump(ts="2026-11-30T12:00:00.9999995Z"),
    dump(ts="2026-11-30T23:59:59.9999999+01:00"), dump(ts="9999-12-31T23:59:59.9999999Z"),
    dump(ts="2026-11-30T12:00:00.123456789"), dump(ts="2026-11-30T12:00:00.1234564Z"),
    b'{"kind":"label","stream":"s","id":"1","label":1,"ts":"2026-11-30T12:00:00.\\u00399999999Z"}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"t\\u0073":"2026-11-30T12:00:00.99999999Z"}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"ts" : "2026-11-30T12:00:00.99999999Z"}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"ts":"2026-11-30T12:00:00.99999999Z",'
    b'"ts":"2026-11-30T12:00:00.5Z"}',
    dump(ts="2026-11-30t12:00:00z"), dump(ts="2026-11-30 12:00:00Z"), dump(ts="2026-11-30"),
    dump(ts="2026-11-30T12:00:00-00:00"), dump(ts="2026-11-30T12:00:00+0100"),
    dump(ts="2026-11-30T12:00:00+23:59"), dump(ts="2026-11-30T24:00:00Z"),
    dump(ts="2026-11-30T23:59:60Z"), dump(ts="1700000000"), dump(ts=1_700_000_000),
    dump(ts="0000-01-01T00:00:00Z"), dump(ts="2026-11-30T12:00"), dump(ts=""),
    # epoch seconds below 1e11, milliseconds from it; no booleans (issue #31)
    dump(ts=1_767_225_600_000), dump(ts=1_767_225_600.5), dump(ts=99_999_999_999),
    dump(ts=100_000_000_000), dump(ts=-1), dump(ts=10**20), dump(ts=True), dump(ts="1e12"),
    b'{"kind":"label","stream":"s","id":"1","label":1,"ts":1e400}',
    # integer ids are their decimal string; ids of any length
    dump(id=123), dump(id=-0), dump(id=10**40), dump(id=1.0), dump(id=False), dump(id="x" * 10_000),
    b'{"kind":"label","stream":"s","id":1e2,"label":1}',
    b'{"kind":"label","stream":"s","id":-0,"label":1}',
    # numbers
    dump(label=True), dump(label="57"), dump(label=10**30), dump(label=-(2**64)), dump(label=1e100),
    dump(label=1e101), dump(label=-0.0), dump(label=0), dump(prediction=10**100),
    dump(prediction=10**101), dump(features=[10**400]), dump(features=[5e-324, -0.0, 1e-400]),
    dump(prediction=[0.5]), dump(prediction=[0.5, 0.5]), dump(prediction=[1, 2, 3]),
    dump(features={}), dump(features={"a": True}), dump(logits=None), dump(embedding=[1]),
    # the predicted scale (normalized_residual): positive, finite, a number
    dump(scale=0.5), dump(scale=2), dump(scale=0), dump(scale=-0.0), dump(scale=-1.5),
    dump(scale=5e-324), dump(scale=1e100), dump(scale=1e101), dump(scale=True),
    dump(scale="1"), dump(scale=None), dump(scale=[1.0]),
    b'{"kind":"label","stream":"s","id":"1","label":1e2}',
    b'{"kind":"label","stream":"s","id":"1","label":1E+2}',
    b'{"kind":"label","stream":"s","id":"1","label":-0}',
    b'{"kind":"label","stream":"s","id":"1","label":01}',
    b'{"kind":"label","stream":"s","id":"1","label":1.}',
    # duplicate keys: json keeps the last one (msgspec rejects a second, different kind)
    b'{"kind":"label","stream":"s","id":"1","label":1,"kind":"prediction"}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"kind":"label"}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"label":2.5,"id":"2"}',
    b'{"kind":"prediction","stream":"s","id":"1","features":{"a":1,"b":2,"a":3},"prediction":1}',
    # tabular values (issue #27): strings, booleans, nulls; meta; unknown fields
    dump(features=[1, "DE", True, None, ""]), dump(features={"a": None, "b": "x", "c": False}),
    dump(features=["\u00e9", "x" * 5000, "1.5", "NaN", 10**30]), dump(features=[None]),
    dump(features={"a": [None]}), dump(features=[{"a": 1}]), dump(features={"": "e"}),
    dump(features=[True, 1, 1.0, "true"]), dump(features={"a\u0000": 1}),
    dump(meta={"model_version": "v2", "n": [1, 2.5, None, {"x": True}]}), dump(meta={}),
    dump(meta=None), dump(meta=[1]), dump(meta="v2"), dump(meta={"x": 10**40}),
    dump(model_version="v2"), dump(Features=[1.0]),
    b'{"kind":"label","stream":"s","id":"1","label":1,"meta":{"a":1}}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"meta":{"a":1e400}}',
    b'{"kind":"label","stream":"s","id":"1","label":1,"meta":{"a":NaN}}',
    # encodings, framing
    b"\xef\xbb\xbf" + dump(), "\ufeff" + dump().decode(), dump().decode(), dump() + b"\n ",
    dump() + b" x", dump() + b"\x00", b"", b" ", b"null", b"{}", b"[]",
    b'{"kind":"label","stream":"s","id":"\xed\xa0\x80","label":1}',
    b'{"kind":"label","stream":"s","id":"\\ud800","label":1}',
    '{"kind":"label","stream":"s","id":"\ud800","label":1}',
    b'{"kind":"label","stream":"s","id":"\xc3\xa9\xf0\x9f\x98\x80","label":1}',
    dump(id="\U0001f600" * 255), dump(id="\U0001f600" * 256), dump(stream="x" * 128),
    dump(stream="x" * 129), b"[" * 5000 + b"]" * 5000,
    dump(label="@@").replace(b'"@@"', b"[" * 3000 + b"]" * 3000),
]


@pytest.mark.parametrize("raw", EXAMPLES, ids=range(len(EXAMPLES)))
def test_examples_agree(raw: Raw) -> None:
    check(raw)


def test_examples_agree_in_one_batch() -> None:
    check_batch(EXAMPLES)


def test_bad_input_corpus_agrees() -> None:
    t = templates()
    values: list[Raw] = [*bad_corpus(), *(json.dumps(e).encode() for e in t.predictions),
                         *(json.dumps(e).encode() for e in t.labels)]
    for value in values:
        check(value, max_bytes=2000)
    check_batch(values, max_bytes=2000)


def test_max_bytes() -> None:
    value = dump()
    for limit in (len(value) - 1, len(value)):
        check(value, max_bytes=limit)
        check_batch([value, dump(id="e-2"), value], max_bytes=limit)


def test_fast_types_are_the_public_types() -> None:
    event = decode_event(dump(ts="2026-11-30T12:00:00+01:00", label=3))
    assert isinstance(event, PredictionEvent) and event.kind == "prediction"
    assert type(event.label) is int and event.features == [0.3, 1.2]
    assert event.ts == datetime(2026, 11, 30, 11, tzinfo=UTC)
    assert event.ts.tzinfo == timezone(timedelta(hours=1))
    with pytest.raises(AttributeError):
        event.id = "x"  # type: ignore[misc]
    label = decode_event({"kind": "label", "stream": "s", "id": "1", "label": 2.0})
    assert isinstance(label, LabelEvent) and label.kind == "label" and type(label.label) is float
    assert decode_batch([]) == []


def test_dict_input_keeps_python_values() -> None:
    ts = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5)))
    event = decode_event({**GOOD, "ts": ts, "features": (1, 2)})
    assert isinstance(event, PredictionEvent)
    assert event.ts == ts and event.ts.tzinfo is ts.tzinfo and event.features == [1.0, 2.0]
    with pytest.raises(InvalidEvent, match="field 'ts'"):
        decode_event({**GOOD, "ts": True})


def test_feature_vector() -> None:
    event = decode_event(dump(features={"b": 2, "a": 1}))
    assert isinstance(event, PredictionEvent)
    assert event.feature_vector(("a", "b")).tolist() == [1.0, 2.0]
    assert event.feature_vector(None).tolist() == [2.0, 1.0]
    with pytest.raises(InvalidEvent, match=r"field 'features.c': missing$"):
        event.feature_vector(("a", "c"))


def test_calibration_reads_fast_events() -> None:
    rows: list[Any] = [dump(id=f"c-{i}", features=[float(i), 1.0], label=float(i)) for i in
                       range(25)]
    cal = Calibration.from_rows([*rows, {"features": [9.0, 1.0], "prediction": 1.0, "label": 2}])
    assert len(cal) == 26


# -- hypothesis -----------------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
number_text = st.one_of(
    finite.map(repr),
    st.floats().map(lambda x: json.dumps(x)),  # NaN, Infinity, -Infinity
    st.integers().map(str),
    st.integers(min_value=-(10**120), max_value=10**120).map(str),
    st.sampled_from(["1e100", "-1e100", "1e101", "1e400", "-1e400", "1e-400", "-0", "-0.0",
                     "1E2", "1e+2", "0.1e1", "100000000000000000000000000000001",
                     "1.00000000000000011102230246251565404236316680908203125",
                     "9007199254740993", "18446744073709551616", "-9223372036854775809"]),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).map(str).filter(
        lambda s: "E" not in s or s[0] != "."),
)


def json_text(value: Any) -> str:
    return json.dumps(value)


strings = st.one_of(
    st.text(max_size=20), st.text(alphabet="abcXYZ019_.-", min_size=1, max_size=20),
    st.sampled_from(["", "1.5", "57", "true", "null", "NaN", "x\n", "a\x00", "\x7f", "é",
                     "\U0001f600", "bikes", "a" * 128, "a" * 129, "e" * 256]),
)
string_text = st.one_of(
    strings.map(json_text), strings.map(lambda s: json.dumps(s, ensure_ascii=False)))


@st.composite
def timestamps(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(alphabet="0123456789-:TtZz+. ", max_size=30))
    year = draw(st.sampled_from(["2026", "0001", "9999", "0000", "1970", "26"]))
    date = f"{year}-{draw(st.integers(0, 13)):02d}-{draw(st.integers(0, 32)):02d}"
    if draw(st.booleans()) and draw(st.booleans()):
        return date
    sep = draw(st.sampled_from(["T", "T", "t", " ", "_"]))
    hms = [draw(st.integers(0, 25)), draw(st.integers(0, 60)), draw(st.integers(0, 61))]
    parts = draw(st.integers(2, 3))
    time = ":".join(f"{p:02d}" for p in hms[:parts])
    if parts == 3 and draw(st.booleans()):
        digits = draw(st.integers(0, 12))
        time += draw(st.sampled_from([".", ","])) + "".join(
            draw(st.sampled_from("0123456789" if digits > 6 else "0459")) for _ in range(digits))
    offset = draw(st.sampled_from(
        ["", "Z", "z", "+00:00", "-00:00", "+01:00", "-05:30", "+0100", "+01", "+23:59",
         "-23:59", "+24:00", "+14:00", "+01:00:30", " Z"]))
    return f"{date}{sep}{time}{offset}"


@st.composite
def values(draw: st.DrawFn, depth: int = 0) -> str:
    """Any JSON value's text (with NaN/Infinity literals and huge numbers)."""
    choice = draw(st.integers(0, 7 if depth < 2 else 4))
    if choice <= 1:
        return draw(number_text)
    if choice == 2:
        return draw(string_text)
    if choice == 3:
        return draw(st.sampled_from(["true", "false", "null"]))
    if choice == 4:
        return json_text(draw(timestamps()))
    if choice in (5, 6):
        items = draw(st.lists(st.one_of(number_text, values(depth + 1)), max_size=5))
        return "[" + ",".join(items) + "]"
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", "é"]), max_size=4))
    return "{" + ",".join(f"{json_text(k)}:{draw(values(depth + 1))}" for k in keys) + "}"


def number_list(min_size: int) -> st.SearchStrategy[str]:
    return st.lists(number_text, min_size=min_size, max_size=4).map(
        lambda xs: "[" + ",".join(xs) + "]")


@st.composite
def events(draw: st.DrawFn) -> Raw:
    """Mostly near-valid events: each field usually right, sometimes wrong, missing or doubled."""
    kind = draw(st.sampled_from(["prediction", "prediction", "label"]))

    def pick(good: st.SearchStrategy[str]) -> str:
        return draw(good if draw(st.integers(0, 5)) else values())

    pairs: list[tuple[str, str]] = [
        ("kind", json_text(kind) if draw(st.integers(0, 12)) else draw(values())),
        ("stream", pick(st.sampled_from(['"bikes"', '"a.b-c_1"', '"b\\u0069kes"']))),
        ("id", pick(string_text.filter(lambda s: s != '""'))),
    ]
    if draw(st.booleans()):
        pairs.append(("ts", pick(timestamps().map(json_text)) if draw(st.integers(0, 6))
                      else "null"))
    if kind == "prediction":
        features = st.one_of(number_list(1), st.dictionaries(
            st.sampled_from(["a", "b", "c"]), number_text, max_size=3).map(
            lambda d: "{" + ",".join(f"{json_text(k)}:{v}" for k, v in d.items()) + "}"))
        pairs.append(("features", pick(features)))
        pairs.append(("prediction", pick(st.one_of(number_text, number_list(2)))))
        for name in ("logits", "embedding"):
            if draw(st.integers(0, 3)) == 0:
                pairs.append((name, pick(st.one_of(number_list(0), st.just("null")))))
        if draw(st.integers(0, 3)) == 0:
            pairs.append(("scale", pick(st.one_of(number_text, st.just("null")))))
        if draw(st.booleans()):
            pairs.append(("label", pick(number_text)))
    else:
        pairs.append(("label", pick(number_text)))
    if draw(st.integers(0, 6)) == 0:  # a missing field
        del pairs[draw(st.integers(0, len(pairs) - 1))]
    if draw(st.integers(0, 6)) == 0:  # an unknown field
        pairs.append((draw(st.sampled_from(["extra", "Kind", "lable", "kind "])), draw(values())))
    if pairs and draw(st.integers(0, 5)) == 0:  # a duplicate key, same or other value
        key, text = pairs[draw(st.integers(0, len(pairs) - 1))]
        pairs.insert(draw(st.integers(0, len(pairs))), (key, draw(st.one_of(
            st.just(text), values()))))
    pairs = draw(st.permutations(pairs)) if draw(st.integers(0, 3)) == 0 else pairs
    space = draw(st.sampled_from(["", " ", "\n\t "]))
    text = "{" + f",{space}".join(f"{json_text(k)}:{space}{v}" for k, v in pairs) + "}"
    form = draw(st.integers(0, 9))
    if form == 0:
        return text
    if form == 1:
        return text.encode("utf-8", "surrogatepass")
    return text.encode("utf-8", "surrogatepass") if max(text) >= "\ud800" else text.encode()


SETTINGS = settings(max_examples=1500, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(events())
def test_generated_events_agree(raw: Raw) -> None:
    check(raw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), max_size=12), st.integers(50, 400))
def test_generated_batches_agree(batch: list[Raw], max_bytes: int) -> None:
    check_batch(batch, max_bytes=max_bytes)


@SETTINGS
@given(timestamps(), st.booleans())
def test_generated_timestamps_agree(ts: str, label_event: bool) -> None:
    base: dict[str, Any] = ({"kind": "label", "stream": "s", "id": "1", "label": 1}
                            if label_event else dict(GOOD))
    check(json.dumps({**base, "ts": ts}).encode())


@SETTINGS
@given(number_text, st.sampled_from(["label", "prediction", "features"]))
def test_generated_numbers_agree(text: str, field: str) -> None:
    value = f"[{text}]" if field == "features" else text
    check(json.dumps({**GOOD, field: "@@"}).replace('"@@"', value).encode())


def test_floats_read_identically() -> None:
    """Correct rounding on both sides (msgspec's own float parser vs Python's float())."""
    rng = np.random.default_rng(5)
    texts = [repr(float(x)) for x in rng.normal(size=2000) * 10.0 ** rng.integers(-300, 99, 2000)]
    texts += [f"{int(m)}e{int(e)}" for m, e in zip(rng.integers(1, 10**18, 2000),
                                                    rng.integers(-330, 80, 2000), strict=True)]
    texts += ["0." + "9" * n for n in range(1, 40)] + ["1" * n for n in range(1, 40)]
    batch = [json.dumps({**GOOD, "features": ["@@"]}).replace('"@@"', t).encode() for t in texts]
    got = decode_batch(batch)
    for text, event in zip(texts, got, strict=True):
        assert isinstance(event, PredictionEvent), text
        assert isinstance(event.features, list)
        want = float(text)
        assert math.copysign(1, event.features[0]) == math.copysign(1, want)
        assert event.features[0] == want, text
