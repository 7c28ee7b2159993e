"""The reference decoder of the wire format (README "Event format"): ``json`` + the pydantic
models ``_PredictionModel`` / ``_LabelModel``. It alone writes the dead-letter reasons; the fast
msgspec decoder of :mod:`monitor.streams.events` sends it whatever it rejects or cannot trust
(that module's docstring states the contract). Also the wire format's bounds and times
(:data:`MAX_MAGNITUDE`, :func:`epoch_time`) and :class:`InvalidEvent`, which both decoders raise.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

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
