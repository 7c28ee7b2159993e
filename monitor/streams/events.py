"""The wire format (README "Event format"): decoding and validation of one raw event.

A raw event is the bytes of one Kafka message value, one JSONL line or one item of an HTTP batch.
:func:`decode_event` returns a validated :class:`PredictionEvent` or :class:`LabelEvent`, or raises
:class:`InvalidEvent` whose message is the reason stored with the dead letter;
:func:`decode_batch` does the same for a whole poll batch and returns the exceptions in place.

Two decoders, one contract. The fast one is a msgspec decoder of the tagged union of the public
event types (about 1 µs per event, no Python code per event). The reference is ``json`` + the
pydantic models ``_PredictionModel`` / ``_LabelModel``: it alone writes the dead-letter reasons.
Whatever the fast decoder rejects goes through the reference, which rejects it with today's
reason or accepts it (then converted to the public types); whatever the fast decoder accepts,
the reference accepts with equal values and types (``tests/core/test_events_fast.py``). Where
the two parsers differ on valid input, the fast result is not trusted:

* a timestamp with more than 6 fractional digits: msgspec rounds it to the microsecond,
  pydantic truncates. Suspect events (a backslash, or such a fraction after a ``"ts"`` key: one
  regular-expression scan of the whole batch) get their ``ts`` truncated as pydantic does
  (:func:`_with_pydantic_ts`);
* ``$`` in Python's ``re`` (msgspec) matches before a final newline, unlike the Rust regex of
  pydantic: the fast patterns end in ``\\Z``.

Every other difference found (duplicate ``kind`` keys, NaN/Infinity literals, numbers beyond
float range, a BOM, lone surrogates, invalid UTF-8, deep nesting) is a rejection by msgspec,
hence a reference decode.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, ClassVar, Literal

import msgspec
import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError, TzInfo

from monitor.errors import MonitorError
from monitor.streams.config import NAME_PATTERN

#: The dead-letter reason of a record without a value (a Kafka tombstone).
NO_VALUE = "a record without a value (a tombstone) is not an event"

#: Largest magnitude accepted for any number: beyond it squares and distances overflow to inf.
MAX_MAGNITUDE = 1e100

#: Numbers are strict: numeric strings and booleans are wrong types, not numbers.
Number = Annotated[
    float, Field(allow_inf_nan=False, strict=True, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)
]
Label = Annotated[int, Field(strict=True)] | Number
#: A feature value: a number, a string (a category), a boolean (the category ``true`` or
#: ``false``) or ``null`` (missing); docs/tabular.md says how a stream's schema reads each.
FeatureValue = Annotated[
    Number | Annotated[bool, Field(strict=True)] | Annotated[str, Field(strict=True)] | None,
    Field(union_mode="left_to_right"),
]
#: Metadata of an event (``model_version``, a request id...): any JSON object, accepted and
#: ignored by monitoring (not stored); its size is bounded by the event's (``max_bytes``).
Meta = dict[str, Any]
#: A predicted scale of the model's error (``normalized_residual``): positive and finite.
Scale = Annotated[float, Field(allow_inf_nan=False, strict=True, gt=0, le=MAX_MAGNITUDE)]


#: A numeric ``ts`` of at least this magnitude is epoch milliseconds, a smaller one epoch
#: seconds: 1e11 seconds is the year 5138, 1e11 milliseconds 1973-03-03 (README "Event format").
EPOCH_MILLISECONDS_FROM = 1e11

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: A number written as a string (pydantic's datetime parser would read it by a rule of its own).
_NUMERIC_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def epoch_time(value: float) -> datetime:
    """The UTC time of a number of epoch seconds, or of milliseconds when ``|value| >= 1e11``.

    Raises
    ------
    ValueError
        When the time is not finite or lies outside the years 1 to 9999.

    Examples
    --------
    >>> epoch_time(1767225600), epoch_time(1767225600000)
    (datetime.datetime(2026, 1, 1, 0, 0, tzinfo=datetime.timezone.utc), \
datetime.datetime(2026, 1, 1, 0, 0, tzinfo=datetime.timezone.utc))
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    unit = "milliseconds" if abs(value) >= EPOCH_MILLISECONDS_FROM else "seconds"
    try:
        # timedelta is exact for integers and rounds a float to the microsecond
        return _EPOCH + timedelta(**{unit: value})
    except OverflowError:
        # an integer beyond the float range has no short form
        number = f"{value:.6g}" if abs(value) < 1e300 else "of more than 300 digits"
        raise ValueError(f"epoch {unit} {number} are out of range (years 1 to 9999)") from None


def _timestamp(value: Any) -> Any:
    # Strict: a boolean is no number, and pydantic's own reading of numbers (seconds up to 2e10,
    # then milliseconds) is not the documented rule.
    if isinstance(value, bool) or not isinstance(value, int | float | str | datetime | None):
        raise PydanticCustomError(
            "timestamp_type",
            "wrong type: expected an ISO 8601 string or a number of epoch seconds or milliseconds",
        )
    if isinstance(value, str) and _NUMERIC_TEXT.fullmatch(value):
        value = float(value)
    if isinstance(value, int | float):
        try:
            return epoch_time(value)
        except ValueError as exc:
            raise PydanticCustomError("timestamp_range", str(exc)) from None
    return value


Timestamp = Annotated[datetime | None, BeforeValidator(_timestamp)]


def _event_id(value: Any) -> Any:
    # A JSON integer is its decimal string: a label with id "123" joins the prediction 123.
    if type(value) is int:
        return str(value)
    if not isinstance(value, str):
        raise PydanticCustomError("id_type", "wrong type: expected string or integer")
    return value


#: No control characters in ids (PostgreSQL text cannot hold NUL). Ids have no length limit but
#: the event's (``max_bytes``); the store keeps a bounded key of long ones (monitor.db.models).
_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"


class InvalidEvent(MonitorError, ValueError):
    """An event that cannot be processed; the message is the dead-letter reason."""


class _EventModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    stream: Annotated[str, Field(pattern=NAME_PATTERN)]
    id: Annotated[str, BeforeValidator(_event_id), Field(min_length=1, pattern=_ID_PATTERN)]
    ts: Timestamp = None
    meta: Meta | None = None


class _PredictionModel(_EventModel):
    """The reference validator of a prediction (its errors are the dead-letter reasons)."""

    kind: Literal["prediction"]
    features: Annotated[list[FeatureValue], Field(min_length=1)] | dict[str, FeatureValue]
    prediction: Number | Annotated[list[Number], Field(min_length=2)]
    logits: list[Number] | None = None
    embedding: list[Number] | None = None
    scale: Scale | None = None
    label: Annotated[Label, Field(union_mode="left_to_right")] | None = None


class _LabelModel(_EventModel):
    """The reference validator of a label."""

    kind: Literal["label"]
    label: Annotated[Label, Field(union_mode="left_to_right")]


_EVENT = TypeAdapter[_PredictionModel | _LabelModel](
    Annotated[_PredictionModel | _LabelModel, Field(discriminator="kind")]
)

# -- the public, fast types (msgspec) ------------------------------------------------------------

#: The same bounds as :data:`Number`. msgspec is strict too (no bools, no numeric strings) and
#: JSON has no NaN/Infinity; a number beyond the float range is "out of range" in msgspec.
_FastNumber = Annotated[float, msgspec.Meta(ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
_FastScale = Annotated[float, msgspec.Meta(gt=0, le=MAX_MAGNITUDE)]
#: :data:`FeatureValue`: msgspec reads a JSON integer into ``float`` as pydantic does.
_FastValue = _FastNumber | bool | str | None


def _end_anchored(pattern: str) -> str:
    r"""``pattern`` with a final ``$`` as ``\Z``: msgspec matches with Python's ``re``, whose ``$``
    also matches before a final newline; pydantic's Rust regex does not."""
    assert pattern.endswith("$") and not pattern.endswith("\\$")
    return pattern[:-1] + r"\Z"


_FastStream = Annotated[str, msgspec.Meta(pattern=_end_anchored(NAME_PATTERN))]
#: Integer ids and numeric times are refused here: the reference converts them.
_FastId = Annotated[str, msgspec.Meta(min_length=1, pattern=_end_anchored(_ID_PATTERN))]


class _EventStruct(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=True,
    tag_field="kind",
):
    """What both kinds of event carry; ``kind`` is the tag."""

    stream: _FastStream
    id: _FastId
    ts: datetime | None = None
    #: Metadata (:data:`Meta`): accepted, ignored by monitoring, not stored.
    meta: dict[str, Any] | None = None


class PredictionEvent(_EventStruct, frozen=True, tag="prediction"):
    """A model's prediction; ``label`` may be given inline."""

    kind: ClassVar[Literal["prediction"]] = "prediction"
    #: Raw feature values, by position or by name (an absent name is a missing value); a
    #: stream's :class:`~monitor.streams.schema.FeatureSchema` reads them into a code row. By
    #: position, a ``list`` holds numbers only (the numeric streams' fast path relies on it);
    #: values among which is a string, a boolean or ``null`` come as a ``tuple``.
    features: Annotated[list[_FastNumber], msgspec.Meta(min_length=1)] | dict[str, _FastValue]
    prediction: _FastNumber | Annotated[list[_FastNumber], msgspec.Meta(min_length=2)]
    logits: list[_FastNumber] | None = None
    embedding: list[_FastNumber] | None = None
    #: The model's predicted scale of its error (read by the ``normalized_residual`` score).
    scale: _FastScale | None = None
    label: int | _FastNumber | None = None

    def feature_values(self, names: tuple[str, ...] | None) -> list[float]:
        """Features of a numeric stream as a list of numbers; object features are ordered by
        ``names``.

        Raises
        ------
        InvalidEvent
            Naming the feature: a value that is not a number, a name the stream lacks or one it
            has that the event lacks (streams with strings, booleans or missing values read
            events through their :class:`~monitor.streams.schema.FeatureSchema`).
        """
        features = self.features
        if isinstance(features, dict):
            if names is not None and (len(features) != len(names)
                                      or any(n not in features for n in names)):
                raise InvalidEvent(_name_mismatch(features, names))
            values: list[Any] = (list(features.values()) if names is None
                                 else [features[n] for n in names])
        else:
            values = features if type(features) is list else list(features)
        if set(map(type, values)) != _FLOAT_ONLY:  # in C: the numeric path stays fast
            raise InvalidEvent(_not_numbers(values, names or _keys(features)))
        return values

    def feature_vector(self, names: tuple[str, ...] | None) -> np.ndarray:
        """:meth:`feature_values` as a float vector."""
        return np.asarray(self.feature_values(names), dtype=float)


#: The types of a numeric event's feature values (``set(map(type, values)) == FLOAT_ONLY``).
FLOAT_ONLY = frozenset({float})
_FLOAT_ONLY = FLOAT_ONLY


def _keys(features: list[Any] | dict[str, Any]) -> tuple[str, ...] | None:
    return tuple(features) if isinstance(features, dict) else None


def _name_mismatch(features: dict[str, Any], names: tuple[str, ...]) -> str:
    """The first difference between an event's feature names and the stream's, by name (not
    two lists of every name)."""
    missing = [n for n in names if n not in features]
    if missing:
        more = f" (and {len(missing) - 1} more of the stream's features)" if missing[1:] else ""
        return f"field 'features.{missing[0]}': missing{more}"
    extra = [k for k in features if k not in names]
    more = f" (and {len(extra) - 1} more)" if extra[1:] else ""
    return (f"field 'features.{extra[0]}': not one of the stream's {len(names)} "
            f"features{more}")


def _not_numbers(values: Sequence[Any], names: tuple[str, ...] | None) -> str:
    """Which feature of a numeric stream's event is not a number, and its value."""
    k = next(k for k, v in enumerate(values) if type(v) is not float)
    where = k if names is None else names[k]
    return (f"field 'features.{where}': {json.dumps(values[k])} is not a number "
            "(this stream's features are numeric)")


class LabelEvent(_EventStruct, frozen=True, tag="label"):
    """Ground truth for an earlier (or later) prediction with the same ``stream`` and ``id``."""

    kind: ClassVar[Literal["label"]] = "label"
    label: int | _FastNumber


Event = PredictionEvent | LabelEvent

#: One decoder of the tagged union, reused: it validates while it parses.
_FAST = msgspec.json.Decoder(Event)


class _TabularPrediction(_EventStruct, frozen=True, tag="prediction"):
    """A prediction whose feature list holds other values than numbers: decoded by a second
    fast decoder (:func:`_tabular`) into this, then given as a :class:`PredictionEvent` whose
    features are a ``tuple``."""

    features: Annotated[tuple[_FastValue, ...], msgspec.Meta(min_length=1)]
    prediction: _FastNumber | Annotated[list[_FastNumber], msgspec.Meta(min_length=2)]
    logits: list[_FastNumber] | None = None
    embedding: list[_FastNumber] | None = None
    scale: _FastScale | None = None
    label: int | _FastNumber | None = None


#: In a tagged union, as :data:`_FAST`: a lone tagged struct would take an event without a kind.
_FAST_TABULAR = msgspec.json.Decoder(_TabularPrediction | LabelEvent)


def _tabular(raw: bytes | bytearray | memoryview | str) -> Event:
    """The second fast decoder: a prediction with a feature list of any values."""
    event = _FAST_TABULAR.decode(raw)
    if isinstance(event, LabelEvent):  # pragma: no cover - the first decoder takes labels
        return event
    features: Any = event.features
    if set(map(type, features)) == _FLOAT_ONLY:  # pragma: no cover - the first decoder's
        features = list(features)
    return PredictionEvent(
        stream=event.stream, id=event.id, ts=event.ts, meta=event.meta, features=features,
        prediction=event.prediction, logits=event.logits, embedding=event.embedding,
        scale=event.scale, label=event.label,
    )


class _TsOnly(msgspec.Struct):
    """Only the ``ts`` of an event (the last one, as both parsers keep the last of a key)."""

    ts: Any = None


_TS_ONLY = msgspec.json.Decoder(_TsOnly)

#: Where msgspec may read a valid ``ts`` otherwise than pydantic: a fraction of 7 or more digits
#: (msgspec rounds it to the microsecond, pydantic truncates it). Escapes could hide one (and the
#: key), so a backslash anywhere makes an event suspect too.
_SUSPECT_TS = r'"ts"\s*:\s*"[^"]*\.\d{7}'
_SUSPECT_TS_STR = re.compile(_SUSPECT_TS)
_SUSPECT_TS_BYTES = re.compile(_SUSPECT_TS.encode())
_LONG_FRACTION = re.compile(r"\.(\d{6})\d+")


def _suspect_ts(raw: bytes | bytearray | memoryview | str) -> bool:
    if isinstance(raw, str):
        return "\\" in raw or _SUSPECT_TS_STR.search(raw) is not None
    data = raw if isinstance(raw, bytes) else bytes(raw)
    return b"\\" in data or _SUSPECT_TS_BYTES.search(data) is not None


def _any_suspect_ts(values: Sequence[bytes | bytearray | memoryview | str]) -> bool:
    """:func:`_suspect_ts` of any value, in one scan of the batch when it is all bytes."""
    if all(type(v) is bytes for v in values):
        joined = b"\n".join(values)  # type: ignore[arg-type]
        return b"\\" in joined or _SUSPECT_TS_BYTES.search(joined) is not None
    return any(_suspect_ts(v) for v in values)


def _with_pydantic_ts(event: Event, raw: bytes | bytearray | memoryview | str) -> Event | None:
    """``event`` (decoded by msgspec from ``raw``) with its ``ts`` as pydantic reads it: a long
    fraction truncated to the microsecond. None when unsure (the reference decides then)."""
    try:
        ts = _TS_ONLY.decode(raw).ts
    except Exception:  # pragma: no cover - it decoded as an event just before
        return None
    if not isinstance(ts, str):  # pragma: no cover - it decoded as a datetime just before
        return None
    long = _LONG_FRACTION.search(ts)
    if long is None:
        return event
    try:
        truncated = msgspec.convert(f"{ts[: long.start()]}.{long[1]}{ts[long.end():]}", datetime)
    except msgspec.ValidationError:  # pragma: no cover - the longer one was valid
        return None
    return msgspec.structs.replace(event, ts=truncated)


def decode_event(
    raw: bytes | bytearray | memoryview | str | dict[str, Any], max_bytes: int = 256 * 1024
) -> Event:
    """Decode and validate one event.

    Raises
    ------
    InvalidEvent
        With a one-line reason: oversized, not UTF-8, not JSON, or which field is wrong.

    Examples
    --------
    >>> decode_event(b'{"kind": "label", "stream": "bikes", "id": "e-1", "label": 57}').label
    57
    >>> try:
    ...     decode_event(b'{"kind": "label", "stream": "bikes", "id": "e-1", "label": NaN}')
    ... except InvalidEvent as exc:
    ...     print(exc)
    NaN is not allowed: numbers must be finite
    """
    if raw is None:
        raise InvalidEvent(NO_VALUE)
    if not isinstance(raw, dict) and len(raw) <= max_bytes:
        try:
            event: Event | None = _FAST.decode(raw)
        except Exception:  # rejected: the second fast decoder, else the reference
            event = _fast(raw, _tabular)
        else:
            if event.ts is not None and _suspect_ts(raw):  # type: ignore[union-attr]
                event = _with_pydantic_ts(event, raw)  # type: ignore[arg-type]
        if event is not None:
            return event
    return _public(_decode_slow(raw, max_bytes))


def _fast(raw: bytes | bytearray | memoryview | str, decode: Any) -> Event | None:
    """``raw`` by a fast decoder, its ``ts`` as pydantic reads it; None when rejected or
    doubtful (the reference decides then, and says why)."""
    try:
        event: Event = decode(raw)
    except Exception:
        return None
    if event.ts is None or not _suspect_ts(raw):
        return event
    return _with_pydantic_ts(event, raw)


def decode_batch(
    values: Sequence[bytes | bytearray | memoryview | str], max_bytes: int = 256 * 1024
) -> list[Event | InvalidEvent]:
    """Decode a batch: one result per value, in order, the event or the :class:`InvalidEvent`
    (with its dead-letter reason) that :func:`decode_event` would raise.

    >>> [type(r).__name__ for r in decode_batch([b'{"kind":"label","stream":"s","id":"1",'
    ...                                          b'"label":1}', b'[]'])]
    ['LabelEvent', 'InvalidEvent']
    """
    if any(value is None for value in values):  # Kafka tombstones: no value at all
        fixed = [b"" if value is None else value for value in values]
        return [InvalidEvent(NO_VALUE) if value is None else result
                for value, result in zip(values, decode_batch(fixed, max_bytes), strict=True)]
    decode = _FAST.decode
    out: list[Any] = []
    retry = []
    if max(map(len, values), default=0) <= max_bytes:
        # All in C: ``extend`` keeps what ``map`` gave before a failure; the shared iterator
        # goes on after the failing value.
        rest = iter(values)
        while True:
            try:
                out.extend(map(decode, rest))
                break
            except Exception:  # rejected: the reference decides below
                retry.append(len(out))
                out.append(None)
    else:
        for i, value in enumerate(values):
            event = None
            if len(value) <= max_bytes:
                with contextlib.suppress(Exception):  # rejected: the reference decides below
                    event = decode(value)
            if event is None:
                retry.append(i)
            out.append(event)
    if _any_suspect_ts(values):
        # Rare: look at each accepted event with a timestamp (the rest of the batch is clean).
        for i, (event, value) in enumerate(zip(out, values, strict=True)):
            if event is not None and event.ts is not None and _suspect_ts(value):
                checked = _with_pydantic_ts(event, value)
                if checked is None:
                    retry.append(i)
                out[i] = checked
    for i in retry:
        value = values[i]
        event = _fast(value, _tabular) if len(value) <= max_bytes else None
        try:
            out[i] = event if event is not None else _public(_decode_slow(value, max_bytes))
        except InvalidEvent as exc:
            out[i] = exc
    return out


def _decode_slow(
    raw: bytes | bytearray | memoryview | str | dict[str, Any], max_bytes: int = 256 * 1024
) -> _PredictionModel | _LabelModel:
    """The reference decoder: ``json`` + pydantic, with every dead-letter reason."""
    if isinstance(raw, dict):
        return _validate(raw)
    if len(raw) > max_bytes:
        raise InvalidEvent(f"event of {len(raw)} bytes exceeds the limit of {max_bytes}")
    try:
        # Decode strictly as UTF-8 first: json.loads would guess UTF-16/32 from a BOM.
        text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8")
        data = _loads(text)
    except UnicodeDecodeError as exc:
        raise InvalidEvent(f"not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise InvalidEvent(f"not valid JSON: {exc.msg} at char {exc.pos}") from None
    except ValueError as exc:
        raise InvalidEvent(str(exc)) from None
    except RecursionError:
        raise InvalidEvent("not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidEvent(f"an event must be a JSON object, got {type(data).__name__}")
    return _validate(data)


_TIMEZONES: dict[timedelta, timezone] = {timedelta(0): UTC}


def _public_ts(ts: datetime | None) -> datetime | None:
    """pydantic's fixed-offset ``TzInfo`` as the ``datetime.timezone`` msgspec gives."""
    if ts is None or not isinstance(ts.tzinfo, TzInfo):
        return ts
    offset = ts.utcoffset()
    assert offset is not None
    tz = _TIMEZONES.get(offset)
    if tz is None:
        tz = _TIMEZONES.setdefault(offset, timezone(offset))
    return ts.replace(tzinfo=tz)


def _public(model: _PredictionModel | _LabelModel) -> Event:
    """The public event of a validated model (same values; no validation again)."""
    if isinstance(model, _LabelModel):
        return LabelEvent(stream=model.stream, id=model.id, ts=_public_ts(model.ts),
                          meta=model.meta, label=model.label)
    features = model.features
    if isinstance(features, list) and set(map(type, features)) != _FLOAT_ONLY:
        features = tuple(features)  # type: ignore[assignment]  # not numbers only
    return PredictionEvent(
        stream=model.stream,
        id=model.id,
        ts=_public_ts(model.ts),
        meta=model.meta,
        features=features,  # type: ignore[arg-type]
        prediction=model.prediction,
        logits=model.logits,
        embedding=model.embedding,
        scale=model.scale,
        label=model.label,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed: numbers must be finite")


#: One decoder for every event: ``json.loads`` with a keyword argument builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(text: str) -> Any:
    """``json.loads(text, parse_constant=_reject_constant)``, with its errors."""
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _validate(data: dict[str, Any]) -> _PredictionModel | _LabelModel:
    if data.get("kind") not in ("prediction", "label"):
        raise InvalidEvent(
            f"field 'kind' must be 'prediction' or 'label', got {data.get('kind')!r}"
        )
    try:
        return _EVENT.validate_python(data)
    except ValidationError as exc:
        raise InvalidEvent(_first_error(exc)) from None


_EXPECTED = {
    "int_type": "integer",
    "float_type": "number",
    "list_type": "list",
    "dict_type": "object",
    "string_type": "string",
    "bool_type": "boolean",
    "datetime_type": "timestamp",
}


def _first_error(exc: ValidationError) -> str:
    """One line: the first wrong field and why. For a union (``label``: integer or number) a
    value error ("finite number") beats the alternatives' type errors; when every alternative
    is a type error, they are listed ("wrong type: expected number or list")."""
    errors = _within_given_form(
        [(_field_path(e["loc"]), e) for e in exc.errors(include_url=False)]
    )
    loc = errors[0][0]
    if errors[0][1]["type"] == "extra_forbidden":
        return (f"field '{loc}': not a field of the event format; put metadata such as "
                "model_version under 'meta' (an object, ignored by monitoring)")
    here = [e for path, e in errors if path == loc]
    values = [e for e in here if e["type"] not in _EXPECTED]
    if values:
        err = values[0]
        msg = err["msg"]
        if err["type"] in ("less_than_equal", "greater_than_equal"):
            msg = f"numbers must lie within ±{MAX_MAGNITUDE:g}"
    elif loc == "label" and isinstance(here[0].get("input"), str):
        msg = (f"{json.dumps(here[0]['input'])} is a class name; a classification label is "
               "the class's index (its position in the prediction's probabilities), a "
               "regression label a number")
    else:
        expected = dict.fromkeys(_EXPECTED[e["type"]] for e in here)
        msg = "wrong type: expected " + (
            "a number, a string, a boolean or null" if list(expected) == _FEATURE_VALUE
            else " or ".join(expected))
    others = len({path for path, _ in errors}) - 1
    more = f" (+{others} more)" if others else ""
    return f"field '{loc}': {msg}{more}"


_FEATURE_VALUE = ["number", "boolean", "string"]


def _within_given_form(errors: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Errors without a union's "wrong form" alternatives where the value has another form
    that has errors of its own: features given as an object with one bad value are reported as
    that value, not as "expected list"."""
    deeper = {path for path, _ in errors}
    return [(path, e) for path, e in errors
            if not (e["type"] in ("list_type", "dict_type")
                    and any(p.startswith(path + ".") for p in deeper))] or errors


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc[1:] if not _is_type_tag(p)) or "event"


_TYPE_TAG = re.compile(
    r"^(list|dict|tuple|constrained-|function-|nullable|union|tagged)|^(int|float|str|bool)$"
)


def _is_type_tag(part: object) -> bool:
    """pydantic puts the union member tried ('list[constrained-float]', 'int') into error
    locations; users need the field path only."""
    return isinstance(part, str) and bool(_TYPE_TAG.match(part))
