"""The wire format (DESIGN.md "Wire format"): decoding and validation of one raw event.

A raw event is the bytes of one Kafka message value, one JSONL line or one item of an HTTP batch.
:func:`decode_event` returns a validated :class:`PredictionEvent` or :class:`LabelEvent`, or raises
:class:`InvalidEvent` whose message is the reason stored with the dead letter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from monitor.config import NAME_PATTERN

#: Largest magnitude accepted for any number: beyond it squares and distances overflow to inf.
MAX_MAGNITUDE = 1e100

#: Numbers are strict: numeric strings and booleans are wrong types, not numbers.
Number = Annotated[
    float, Field(allow_inf_nan=False, strict=True, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)
]
Label = Annotated[int, Field(strict=True)] | Number


def _timestamp(value: Any) -> Any:
    # Only ISO 8601 strings: lax parsing would read an integer as Unix seconds.
    if value is not None and not isinstance(value, str | datetime):
        raise ValueError("must be an ISO 8601 string")
    return value


Timestamp = Annotated[datetime | None, BeforeValidator(_timestamp)]


class InvalidEvent(ValueError):
    """An event that cannot be processed; the message is the dead-letter reason."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    stream: Annotated[str, Field(pattern=NAME_PATTERN)]
    id: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]
    ts: Timestamp = None


class PredictionEvent(_Event):
    """A model's prediction; ``label`` may be given inline."""

    kind: Literal["prediction"]
    features: Annotated[list[Number], Field(min_length=1)] | dict[str, Number]
    prediction: Number | Annotated[list[Number], Field(min_length=2)]
    logits: list[Number] | None = None
    embedding: list[Number] | None = None
    label: Annotated[Label, Field(union_mode="left_to_right")] | None = None

    def feature_vector(self, names: tuple[str, ...] | None) -> np.ndarray:
        """Features as a float vector; object features are ordered by ``names``."""
        if isinstance(self.features, dict):
            if names is None:
                return np.fromiter(self.features.values(), dtype=float)
            missing = [n for n in names if n not in self.features]
            if missing or len(self.features) != len(names):
                raise InvalidEvent(
                    f"feature names {sorted(self.features)} differ from the stream's {list(names)}"
                )
            return np.array([self.features[n] for n in names], dtype=float)
        return np.asarray(self.features, dtype=float)


class LabelEvent(_Event):
    """Ground truth for an earlier (or later) prediction with the same ``stream`` and ``id``."""

    kind: Literal["label"]
    label: Annotated[Label, Field(union_mode="left_to_right")]


Event = PredictionEvent | LabelEvent
_EVENT = TypeAdapter[Event](Annotated[Event, Field(discriminator="kind")])


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed: numbers must be finite")


#: One decoder for every event: ``json.loads`` with a keyword argument builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(text: str) -> Any:
    """``json.loads(text, parse_constant=_reject_constant)``, with its errors."""
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _validate(data: dict[str, Any]) -> Event:
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
    "datetime_type": "timestamp",
}


def _first_error(exc: ValidationError) -> str:
    """One line: the first wrong field and why. For a union (``label``: integer or number) a
    value error ("finite number") beats the alternatives' type errors; when every alternative
    is a type error, they are listed ("wrong type: expected number or list")."""
    errors = [(_field_path(e["loc"]), e) for e in exc.errors(include_url=False)]
    loc = errors[0][0]
    here = [e for path, e in errors if path == loc]
    values = [e for e in here if e["type"] not in _EXPECTED]
    if values:
        err = values[0]
        msg = err["msg"]
        if err["type"] in ("less_than_equal", "greater_than_equal"):
            msg = f"numbers must lie within ±{MAX_MAGNITUDE:g}"
    else:
        expected = dict.fromkeys(_EXPECTED[e["type"]] for e in here)
        msg = "wrong type: expected " + " or ".join(expected)
    others = len({path for path, _ in errors}) - 1
    more = f" (+{others} more)" if others else ""
    return f"field '{loc}': {msg}{more}"


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc[1:] if not _is_type_tag(p)) or "event"


_TYPE_TAG = re.compile(
    r"^(list|dict|tuple|constrained-|function-|nullable|union|tagged)|^(int|float|str|bool)$"
)


def _is_type_tag(part: object) -> bool:
    """pydantic puts the union member tried ('list[constrained-float]', 'int') into error
    locations; users need the field path only."""
    return isinstance(part, str) and bool(_TYPE_TAG.match(part))


def decode_batch(
    values: Sequence[bytes | bytearray | memoryview | str], max_bytes: int = 256 * 1024
) -> list[Event | InvalidEvent]:
    """:func:`decode_event` of each value; a value that does not decode gives its error."""
    out: list[Event | InvalidEvent] = []
    for value in values:
        try:
            out.append(decode_event(value, max_bytes))
        except InvalidEvent as exc:
            out.append(exc)
    return out
