"""Versioned, safe serialisation of detector state: JSON text plus an optional npz blob.

No pickle anywhere: the JSON part is parsed with :mod:`json`, the arrays with
``np.load(..., allow_pickle=False)``, so a database row can never execute code.

Format (``STATE_FORMAT`` = 1). The text is ``{"format": 1, "state": <value>}`` where ``<value>`` is
plain JSON except for these tagged objects (a dict with one reserved key):

``{"__ndarray__": "a0"}``
    an ``np.ndarray`` stored in the npz blob under key ``a0`` (dtype, shape and byte order kept;
    object arrays are refused);
``{"__float__": "nan" | "inf" | "-inf" | "0x7ff8..."}``
    a non-finite float (JSON has none); a NaN with a non-default bit pattern is kept as its
    64 hex bits. Finite floats are written with ``repr``, which round-trips exactly;
``{"__np__": "float32", "v": ...}``
    a numpy scalar of a bool, integer or float dtype (other scalar dtypes go to the npz blob as
    0-d arrays under ``{"__npscalar__": "a1"}``), so ``np.float32`` stays ``np.float32``;
``{"__tuple__": [...]}``
    a tuple (kept as a tuple, not turned into a list);
``{"__bytes__": "<base64>"}``
    a ``bytes`` value;
``{"__dict__": [[key, value], ...]}``
    a dict with a non-``str`` key, or with a key that is one of the reserved tags above (so a
    user's dict can never be mistaken for a tag).

Every other value must be ``None``, ``bool``, ``int``, ``float``, ``str``, ``list``, ``tuple`` or
``dict``; anything else raises :class:`StateEncodingError` naming where it was found.
``decode_state(*encode_state(x))`` equals ``x`` bit for bit, types included.

:class:`Checkpoint.version` is the *producer's* state layout version (the pipeline bumps it when
a detector's state changes shape); ``STATE_FORMAT`` versions this encoding.
"""

from __future__ import annotations

import base64
import io
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "STATE_FORMAT",
    "Checkpoint",
    "StateEncodingError",
    "StateFormatError",
    "decode_state",
    "encode_state",
]

#: Version of the encoding written by :func:`encode_state`.
STATE_FORMAT = 1

_NDARRAY, _NPSCALAR, _FLOAT, _NP, _TUPLE, _BYTES, _DICT = (
    "__ndarray__",
    "__npscalar__",
    "__float__",
    "__np__",
    "__tuple__",
    "__bytes__",
    "__dict__",
)
_TAGS = frozenset({_NDARRAY, _NPSCALAR, _FLOAT, _NP, _TUPLE, _BYTES, _DICT})
_CANONICAL_NAN_BITS = struct.unpack("<Q", struct.pack("<d", math.nan))[0]


class StateEncodingError(TypeError):
    """A value in a detector state that the safe format cannot represent."""


class StateFormatError(ValueError):
    """Stored state text or blob that is corrupt or written by an unknown format version."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A stream's detector state after its event ``event_index - 1`` was processed.

    Parameters
    ----------
    stream
        Stream name.
    version
        The producer's state layout version (bump it when the shape of ``state`` changes).
    event_index
        Number of the stream's events already folded into the state (the next event's index).
    state
        Nested dict of the detectors' state; numpy arrays may appear anywhere inside.
    arrays
        Large named arrays kept beside ``state`` (stored in the same npz blob).

    Examples
    --------
    >>> cp = Checkpoint("bikes", 1, 10, {"log_s": -0.5}, {"ref": np.arange(3.0)})
    >>> text, blob = cp.encode()
    >>> back = Checkpoint.decode("bikes", 1, 10, text, blob)
    >>> back.state, back.arrays["ref"].tolist()
    ({'log_s': -0.5}, [0.0, 1.0, 2.0])
    """

    stream: str
    version: int
    event_index: int
    state: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def encode(self) -> tuple[str, bytes | None]:
        """JSON text and npz blob (``None`` if there are no arrays) of ``state`` and ``arrays``."""
        return encode_state({"state": self.state, "arrays": self.arrays})

    @classmethod
    def decode(
        cls, stream: str, version: int, event_index: int, text: str, blob: bytes | None
    ) -> Checkpoint:
        """Rebuild a checkpoint from what :meth:`encode` produced."""
        payload = decode_state(text, blob)
        return cls(stream, version, event_index, payload["state"], payload["arrays"])


def encode_state(state: dict[str, Any]) -> tuple[str, bytes | None]:
    """Encode a nested state dict into JSON text and an npz blob of its arrays.

    Parameters
    ----------
    state
        The state; see the module docstring for the values allowed.

    Returns
    -------
    text, blob
        ``blob`` is ``None`` when the state holds no numpy array.

    Examples
    --------
    >>> text, blob = encode_state({"x": float("nan"), "w": np.ones(2, np.float32)})
    >>> text
    '{"format":1,"state":{"x":{"__float__":"nan"},"w":{"__ndarray__":"a0"}}}'
    >>> decode_state(text, blob)["w"].dtype
    dtype('float32')
    """
    if not isinstance(state, dict):
        raise StateEncodingError(f"state must be a dict, got {type(state).__name__}")
    arrays: dict[str, np.ndarray] = {}
    body = _Encoder(arrays).encode(state, "state")
    text = json.dumps(
        {"format": STATE_FORMAT, "state": body}, allow_nan=False, separators=(",", ":")
    )
    return text, _save_npz(arrays) if arrays else None


def decode_state(text: str, blob: bytes | None) -> dict[str, Any]:
    """Inverse of :func:`encode_state`; raises :class:`StateFormatError` on bad input."""
    try:
        envelope = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StateFormatError(f"state text is not JSON: {exc}") from exc
    if not isinstance(envelope, dict) or envelope.get("format") != STATE_FORMAT:
        found = envelope.get("format") if isinstance(envelope, dict) else None
        raise StateFormatError(
            f"unknown state format {found!r}; this version reads format {STATE_FORMAT}"
        )
    arrays = _load_npz(blob)
    state = _decode(envelope.get("state"), arrays)
    if not isinstance(state, dict):
        raise StateFormatError("decoded state is not a dict")
    return state


class _Encoder:
    """Walks a state, replacing what JSON cannot hold by tags and collecting the arrays."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def encode(self, value: Any, path: str) -> Any:
        # Exact type checks first: bool is an int subclass, np.float64 a float subclass.
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return _encode_float(value)
        if isinstance(value, np.ndarray):
            return {_NDARRAY: self._store(value, path)}
        if isinstance(value, np.generic):
            return self._encode_np_scalar(value, path)
        if kind is list:
            return [self.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if kind is tuple:
            return {_TUPLE: [self.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]}
        if kind is dict:
            return self._encode_dict(value, path)
        if kind is bytes:
            return {_BYTES: base64.b64encode(value).decode("ascii")}
        raise StateEncodingError(f"{path}: cannot store a {kind.__name__} in detector state")

    def _encode_dict(self, value: dict[Any, Any], path: str) -> dict[str, Any]:
        if all(type(k) is str and k not in _TAGS for k in value):
            return {k: self.encode(v, f"{path}.{k}") for k, v in value.items()}
        pairs = [
            [self.encode(k, f"{path}<key {k!r}>"), self.encode(v, f"{path}[{k!r}]")]
            for k, v in value.items()
        ]
        return {_DICT: pairs}

    def _encode_np_scalar(self, value: np.generic, path: str) -> dict[str, Any]:
        dtype = value.dtype
        if dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize <= 8):
            # float16/32/64 widen to a Python float exactly, so the value round-trips.
            inner = value.item()
            encoded = _encode_float(inner) if dtype.kind == "f" else inner
            return {_NP: dtype.name, "v": encoded}
        return {_NPSCALAR: self._store(np.asarray(value), path)}

    def _store(self, array: np.ndarray, path: str) -> str:
        if array.dtype.hasobject:
            raise StateEncodingError(f"{path}: object arrays cannot be stored without pickle")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = array
        return key


def _encode_float(value: float) -> float | dict[str, str]:
    if math.isfinite(value):
        return value
    if math.isinf(value):
        return {_FLOAT: "inf" if value > 0 else "-inf"}
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return {_FLOAT: "nan" if bits == _CANONICAL_NAN_BITS else f"{bits:#018x}"}


def _decode_float(text: str) -> float:
    if text in ("nan", "inf", "-inf"):
        return float(text)
    try:
        value: float = struct.unpack("<d", struct.pack("<Q", int(text, 16)))[0]
    except (ValueError, struct.error) as exc:
        raise StateFormatError(f"bad float tag {text!r}") from exc
    return value


def _decode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    tag = next((k for k in value if k in _TAGS), None)
    if tag is None:
        return {k: _decode(v, arrays) for k, v in value.items()}
    try:
        return _TAG_DECODERS[tag](value, arrays)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, StateFormatError):
            raise
        raise StateFormatError(f"bad {tag} entry {value!r}: {exc}") from exc


def _decode_np(value: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
    inner = value["v"]
    if isinstance(inner, dict):
        inner = _decode_float(inner[_FLOAT])
    return np.dtype(value[_NP]).type(inner)


def _array(key: str, arrays: dict[str, np.ndarray]) -> np.ndarray:
    if key not in arrays:
        raise StateFormatError(f"array {key!r} is referenced but missing from the blob")
    return arrays[key]


_TAG_DECODERS: dict[str, Callable[[dict[str, Any], dict[str, np.ndarray]], Any]] = {
    _NDARRAY: lambda v, a: _array(v[_NDARRAY], a),
    _NPSCALAR: lambda v, a: _array(v[_NPSCALAR], a)[()],
    _FLOAT: lambda v, a: _decode_float(v[_FLOAT]),
    _NP: _decode_np,
    _TUPLE: lambda v, a: tuple(_decode(x, a) for x in v[_TUPLE]),
    _BYTES: lambda v, a: base64.b64decode(v[_BYTES], validate=True),
    _DICT: lambda v, a: {_decode(k, a): _decode(x, a) for k, x in v[_DICT]},
}


def _save_npz(arrays: dict[str, np.ndarray]) -> bytes:
    # Uncompressed: checkpoints are written every batch, and zlib would cost more CPU than the
    # bytes it saves on float data.
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def _load_npz(blob: bytes | None) -> dict[str, np.ndarray]:
    if blob is None:
        return {}
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError) as exc:
        raise StateFormatError(f"state blob is not a valid npz archive: {exc}") from exc
