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

The reference decoder, the wire format's bounds and :class:`InvalidEvent` live in
:mod:`monitor.streams.event_reference` (re-exported here).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, ClassVar, Literal

import msgspec
import numpy as np
from pydantic_core import TzInfo

from monitor.streams.config import NAME_PATTERN
from monitor.streams.event_reference import (  # noqa: F401  (the wire format's public names)
    _ID_PATTERN,
    EPOCH_MILLISECONDS_FROM,
    MAX_MAGNITUDE,
    NO_VALUE,
    InvalidEvent,
    _decode_slow,
    _LabelModel,
    _PredictionModel,
    epoch_time,
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


