"""Realistic rows the wire format accepts (issue #31, item 5): ``ts`` as epoch seconds or
milliseconds, integer ids, and ids of any length.

The ``ts`` rule (README "Event format"): a number whose magnitude is at least 1e11 is epoch
milliseconds, any other number epoch seconds (1e11 s is the year 5138, 1e11 ms 1973-03-03).
Booleans are no numbers. An integer id is its decimal string, so that a label with id ``"123"``
joins the prediction with id ``123``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.engine.pipeline import Pipeline, RawRecord, record_time
from monitor.ops.datasets import build_example
from monitor.streams.events import InvalidEvent, decode_batch, decode_event, epoch_time
from monitor.streams.setup import build_monitors, read_configs

NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)
PREDICTION: dict[str, Any] = {"kind": "prediction", "stream": "bikes", "id": "e-1",
                              "features": [0.3, 1.2], "prediction": 41.7}


def dump(**changes: Any) -> bytes:
    return json.dumps({**PREDICTION, **changes}).encode()


def decoded(raw: bytes | dict[str, Any]) -> Any:
    """``decode_event``'s result, which ``decode_batch`` must give too."""
    event = decode_event(raw)
    if isinstance(raw, bytes):
        assert decode_batch([raw, dump()])[0] == event
    return event


@pytest.mark.parametrize(("ts", "expected"), [
    (1_767_225_600_000, NEW_YEAR),
    (1_767_225_600_123, NEW_YEAR + timedelta(milliseconds=123)),
    (1_767_225_600_123.5, NEW_YEAR + timedelta(microseconds=123_500)),
    (1_767_225_600, NEW_YEAR),
    (1_767_225_600.25, NEW_YEAR + timedelta(milliseconds=250)),
    (0, datetime(1970, 1, 1, tzinfo=UTC)),
    (-86_400, datetime(1969, 12, 31, tzinfo=UTC)),
    (99_999_999_999, datetime(5138, 11, 16, 9, 46, 39, tzinfo=UTC)),  # the last seconds
    (100_000_000_000, datetime(1973, 3, 3, 9, 46, 40, tzinfo=UTC)),  # the first milliseconds
    (-100_000_000_000, datetime(1966, 10, 31, 14, 13, 20, tzinfo=UTC)),
    ("1767225600000", NEW_YEAR),  # a number in a string: the same rule
    ("2026-01-01T00:00:00Z", NEW_YEAR),
], ids=lambda v: repr(v))
def test_ts_is_epoch_seconds_below_1e11_and_milliseconds_from_it(ts: Any, expected: datetime
                                                                  ) -> None:
    event = decoded(dump(ts=ts))
    assert event.ts == expected and event.ts.utcoffset() == timedelta(0)
    assert decoded({**PREDICTION, "ts": ts}).ts == expected  # dicts (notebooks, calibration)


@pytest.mark.parametrize(("ts", "reason"), [
    (True, "field 'ts': wrong type: expected an ISO 8601 string or a number"),
    (False, "field 'ts': wrong type"),
    ([1_767_225_600], "field 'ts': wrong type"),
    (10**20, "field 'ts': epoch milliseconds 1e+20 are out of range"),
    (-(10**15), "field 'ts': epoch milliseconds -1e+15 are out of range"),
    (-7e10, "field 'ts': epoch seconds -7e+10 are out of range"),
    (10**400, "field 'ts': epoch milliseconds"),
], ids=lambda v: repr(v)[:20])
def test_a_ts_that_is_no_time_is_refused_naming_the_field(ts: Any, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason.replace("+", r"\+")):
        decode_event(dump(ts=ts))
    assert str(decode_batch([dump(ts=ts)])[0]).startswith(reason)


def test_a_non_finite_ts_is_refused() -> None:
    for value in (float("nan"), float("inf")):
        with pytest.raises(InvalidEvent, match="field 'ts': must be a finite number"):
            decode_event({**PREDICTION, "ts": value})


def test_epoch_time_states_the_rule() -> None:
    assert epoch_time(1_767_225_600) == epoch_time(1_767_225_600_000) == NEW_YEAR
    with pytest.raises(ValueError, match="out of range"):
        epoch_time(1e300)


@pytest.mark.parametrize(("value", "expected"), [
    (123, "123"), (0, "0"), (-7, "-7"), (10**30, "1" + "0" * 30), ("123", "123"),
])
def test_an_integer_id_is_its_decimal_string(value: Any, expected: str) -> None:
    event = decoded(dump(id=value))
    assert event.id == expected and type(event.id) is str
    assert decoded({**PREDICTION, "id": value}).id == expected


@pytest.mark.parametrize("value", [1.0, 123.5, 1e3, True, False, None, [1], {"a": 1}])
def test_an_id_that_is_no_string_or_integer_is_refused(value: Any) -> None:
    with pytest.raises(InvalidEvent, match="field 'id': wrong type: expected string or integer"):
        decode_event(dump(id=value))


def test_ids_of_any_length_are_accepted() -> None:
    long_id = "x" * 10_000
    assert decoded(dump(id=long_id)).id == long_id
    assert decoded(dump(id="\U0001f600" * 300)).id == "\U0001f600" * 300
    with pytest.raises(InvalidEvent, match="field 'id'"):
        decode_event(dump(id="x" * 300 + "\x00"))  # control characters stay refused


def test_a_label_with_a_string_id_joins_the_prediction_with_the_integer_id(
    tmp_path: Path,
) -> None:
    paths = build_example(tmp_path, seed=5, n_calibration=100, label_delay=3,
                          phases=[("stable", 40)])
    values = []
    for line in paths["events"].read_bytes().splitlines():
        event = json.loads(line)
        number = int(event["id"].removeprefix("e-"))
        # predictions: integer ids and epoch milliseconds; labels: string ids, epoch seconds
        if event["kind"] == "prediction":
            event |= {"id": number, "ts": _epoch_ms(event["ts"])}
        else:
            event |= {"id": str(number), "ts": _epoch_ms(event["ts"]) / 1000}
        values.append(json.dumps(event).encode())
    [config] = read_configs([str(paths["config"])])
    pipeline = Pipeline(build_monitors([config]), "file:events")
    records = [RawRecord("events", 0, i, v, timestamp_ms=None) for i, v in enumerate(values)]
    out = pipeline.process(records)
    assert out.dead_letters == []
    join = pipeline.streams[config.name].join
    assert (join.joined, join.pending_predictions, join.pending_labels) == (40, 0, 0)


def _epoch_ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


def test_a_dead_letter_takes_its_time_from_an_epoch_ts() -> None:
    bad = json.dumps({**PREDICTION, "ts": 1_767_225_600_000, "features": "nope"}).encode()
    record = RawRecord("events", 0, 0, bad, timestamp_ms=None)
    assert record_time(record) == (NEW_YEAR, "event")
