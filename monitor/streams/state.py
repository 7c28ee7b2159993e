"""Versioned, safe serialisation of detector state: JSON text plus an optional array blob.

No pickle anywhere: the JSON part is parsed with :mod:`json`, the arrays are rebuilt from their
raw bytes and a dtype string (object dtypes refused) or, in an old npz blob, read with
``np.load(..., allow_pickle=False)``, so a database row can never execute code.

Format (``STATE_FORMAT`` = 1). The text is ``{"format": 1, "state": <value>}`` where ``<value>`` is
plain JSON except for these tagged objects (a dict with one reserved key):

``{"__ndarray__": "a0"}``
    an ``np.ndarray`` stored in the blob under key ``a0`` (dtype, shape, byte order and
    Fortran order kept; object arrays are refused);
``{"__float__": "nan" | "inf" | "-inf" | "0x7ff8..."}``
    a non-finite float (JSON has none); a NaN with a non-default bit pattern is kept as its
    64 hex bits. Finite floats are written with ``repr``, which round-trips exactly;
``{"__np__": "float32", "v": ...}``
    a numpy scalar of a bool, integer or float dtype (other scalar dtypes go to the blob as
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

The blob (``None`` when the state holds no array) is one buffer: the magic bytes
:data:`BLOB_MAGIC`, the length of a JSON header (4 bytes, little-endian), the header — one
``[key, dtype, shape, fortran_order]`` entry per array, in order — and the arrays' raw bytes
back to back. Given a ``chunks`` dict, :func:`encode_state` keeps the bytes of every array of
at least :data:`CHUNKED_BYTES` out of the blob: they are cut into pieces of :data:`PIECE_BYTES`,
each put in ``chunks`` under the SHA-256 of its bytes (hex), and the array's header entry gets
a fifth item, the list of its pieces' keys (magic :data:`CHUNKED_MAGIC`). An array that did not
change has the same keys in the next checkpoint, and one that grew at its end keeps the keys of
its unchanged leading pieces, so a store that keeps pieces by key writes only new ones.
Writing the blob is one join of the arrays' memory, where numpy's npz (a zip member with its own
header per array) cost ~14 ms per checkpoint of ~80 arrays. Blobs written before
this layout are npz archives (magic ``PK``): they are still read, and the writer falls back to
npz for the rare dtypes a dtype string cannot describe (structured dtypes).

:class:`Checkpoint.version` is the *producer's* state layout version (the pipeline bumps it when
a detector's state changes shape); ``STATE_FORMAT`` versions this encoding.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.errors import MonitorError

__all__ = [
    "BLOB_MAGIC",
    "CHUNKED_BYTES",
    "CHUNKED_MAGIC",
    "PIECE_BYTES",
    "STATE_FORMAT",
    "Checkpoint",
    "StateEncodingError",
    "StateFormatError",
    "decode_state",
    "encode_state",
]

#: Version of the encoding written by :func:`encode_state`.
STATE_FORMAT = 1

#: First bytes of a single-buffer array blob (an npz archive starts with ``PK``).
BLOB_MAGIC = b"MONARR1\n"
#: First bytes of a blob whose large arrays are kept as pieces outside it.
CHUNKED_MAGIC = b"MONARR2\n"
#: Arrays of at least this many bytes are kept as pieces when chunks are asked for: below it, a
#: piece's key (64 characters in the header, a row in a store) costs more than rewriting.
CHUNKED_BYTES = 4096
#: Size of a piece (the last one of an array may be shorter): small enough that an array grown
#: at its end rewrites little, large enough that a big array is a few rows.
PIECE_BYTES = 8192
_NPZ_MAGIC = b"PK"
_HEADER_LENGTH = struct.Struct("<I")

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
_AS_IS = frozenset({str, int, bool, type(None)})  # JSON values the encoder keeps unchanged
_CANONICAL_NAN_BITS = struct.unpack("<Q", struct.pack("<d", math.nan))[0]


class StateEncodingError(MonitorError, TypeError):
    """A value in a detector state that the safe format cannot represent."""


class StateFormatError(MonitorError, ValueError):
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
        Large named arrays kept beside ``state`` (stored in the same blob).

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

    def encode(self, chunks: dict[str, bytes] | None = None) -> tuple[str, bytes | None]:
        """JSON text and array blob (``None`` if there are no arrays) of ``state`` and
        ``arrays``; with ``chunks``, the large arrays' pieces go there (:func:`encode_state`)."""
        return encode_state({"state": self.state, "arrays": self.arrays}, chunks)

    @classmethod
    def decode(
        cls, stream: str, version: int, event_index: int, text: str, blob: bytes | None,
        chunks: Mapping[str, bytes] | None = None,
    ) -> Checkpoint:
        """Rebuild a checkpoint from what :meth:`encode` produced."""
        payload = decode_state(text, blob, chunks)
        return cls(stream, version, event_index, payload["state"], payload["arrays"])


def encode_state(
    state: dict[str, Any], chunks: dict[str, bytes] | None = None
) -> tuple[str, bytes | None]:
    """Encode a nested state dict into JSON text and a blob of its arrays.

    Parameters
    ----------
    state
        The state; see the module docstring for the values allowed.
    chunks
        If given, the pieces of the arrays of at least :data:`CHUNKED_BYTES` are added to it by
        key (the SHA-256 of their bytes) and the blob only names them; :func:`decode_state`
        needs them back.

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
    >>> pieces = {}
    >>> text, blob = encode_state({"bank": np.zeros(1024)}, pieces)
    >>> [len(p) for p in pieces.values()], len(blob) < 200
    ([8192], True)
    >>> decode_state(text, blob, pieces)["bank"].shape
    (1024,)
    """
    if not isinstance(state, dict):
        raise StateEncodingError(f"state must be a dict, got {type(state).__name__}")
    arrays: dict[str, np.ndarray] = {}
    try:
        body = _Encoder(arrays).encode(state)
    except StateEncodingError:
        _locate(state, "state")
        raise
    # The walk built a fresh tree, so it holds no cycle to look for.
    text = json.dumps({"format": STATE_FORMAT, "state": body}, allow_nan=False,
                      check_circular=False, separators=(",", ":"))
    return text, _save_arrays(arrays, chunks) if arrays else None


def decode_state(
    text: str, blob: bytes | None, chunks: Mapping[str, bytes] | None = None
) -> dict[str, Any]:
    """Inverse of :func:`encode_state` (``chunks``: the pieces it kept out of the blob, at
    least those the blob names); raises :class:`StateFormatError` on bad input."""
    try:
        envelope = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StateFormatError(f"state text is not JSON: {exc}") from exc
    if not isinstance(envelope, dict) or envelope.get("format") != STATE_FORMAT:
        found = envelope.get("format") if isinstance(envelope, dict) else None
        raise StateFormatError(
            f"unknown state format {found!r}; this version reads format {STATE_FORMAT}"
        )
    arrays = _load_arrays(blob, chunks)
    state = _decode(envelope.get("state"), arrays)
    if not isinstance(state, dict):
        raise StateFormatError("decoded state is not a dict")
    return state


class _Encoder:
    """Walks a state, replacing what JSON cannot hold by tags and collecting the arrays.

    Checkpoints are encoded with every batch, so the walk keeps no path: when a value is
    refused, :func:`_locate` walks again to name where it is.
    """

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def encode(self, value: Any) -> Any:
        # Exact type checks first: bool is an int subclass, np.float64 a float subclass.
        kind = type(value)
        if kind is float:
            return value if value - value == 0.0 else _encode_float(value)  # finite: as is
        if value is None or kind is str or kind is int or kind is bool:
            return value
        if kind is list:
            # Finite floats, str, int, bool and None stay as they are: no call for them.
            encode = self.encode
            return [
                v if (type(v) is float and v - v == 0.0) or type(v) in _AS_IS else encode(v)
                for v in value
            ]
        if kind is dict:
            return self._encode_dict(value)
        if isinstance(value, np.ndarray):
            return {_NDARRAY: self._store(value)}
        if isinstance(value, np.generic):
            return self._encode_np_scalar(value)
        if kind is tuple:
            encode = self.encode
            return {_TUPLE: [encode(v) for v in value]}
        if kind is bytes:
            return {_BYTES: base64.b64encode(value).decode("ascii")}
        raise StateEncodingError(f"cannot store a {kind.__name__} in detector state")

    def _encode_dict(self, value: dict[Any, Any]) -> dict[str, Any]:
        encode = self.encode
        if all(type(k) is str and k not in _TAGS for k in value):
            return {
                k: v if (type(v) is float and v - v == 0.0) or type(v) in _AS_IS else encode(v)
                for k, v in value.items()
            }
        return {_DICT: [[encode(k), encode(v)] for k, v in value.items()]}

    def _encode_np_scalar(self, value: np.generic) -> dict[str, Any]:
        dtype = value.dtype
        if dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize <= 8):
            # float16/32/64 widen to a Python float exactly, so the value round-trips.
            inner = value.item()
            encoded = _encode_float(inner) if dtype.kind == "f" else inner
            return {_NP: dtype.name, "v": encoded}
        return {_NPSCALAR: self._store(np.asarray(value))}

    def _store(self, array: np.ndarray) -> str:
        if array.dtype.hasobject:
            raise StateEncodingError("object arrays cannot be stored without pickle")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = array
        return key


def _locate(value: Any, path: str) -> None:
    """Raise the :class:`StateEncodingError` of the first value the encoder refuses, with
    where it is (``state.a[1]``); return if there is none."""
    kind = type(value)
    if kind is list or kind is tuple:
        for i, v in enumerate(value):
            _locate(v, f"{path}[{i}]")
    elif kind is dict:
        plain = all(type(k) is str and k not in _TAGS for k in value)
        for k, v in value.items():
            if not plain:
                _locate(k, f"{path}<key {k!r}>")
            _locate(v, f"{path}.{k}" if plain else f"{path}[{k!r}]")
    else:
        try:
            _Encoder({}).encode(value)
        except StateEncodingError as exc:
            raise StateEncodingError(f"{path}: {exc}") from None


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


def _save_arrays(arrays: dict[str, np.ndarray], chunks: dict[str, bytes] | None) -> bytes:
    """The single-buffer blob of ``arrays`` (module docstring); npz if a dtype needs it."""
    header: list[list[Any]] = []
    inline: list[Any] = []
    for key, array in arrays.items():
        if not _plain_dtype(array.dtype):
            return _save_npz(arrays)
        # Like numpy's .npy: Fortran order only when the array is not also C-contiguous, and
        # any other layout is written in C order.
        fortran = array.flags.f_contiguous and not array.flags.c_contiguous
        flat = array.T if fortran else array
        data = (flat.reshape(-1).view(np.uint8).data if flat.flags.c_contiguous
                else flat.tobytes())
        entry = [key, array.dtype.str, list(array.shape), fortran]
        if chunks is not None and array.nbytes >= CHUNKED_BYTES:
            entry.append(_put_pieces(memoryview(data).cast("B"), chunks))
        else:
            inline.append(data)
        header.append(entry)
    head = json.dumps(header, separators=(",", ":")).encode()
    magic = CHUNKED_MAGIC if any(len(entry) == 5 for entry in header) else BLOB_MAGIC
    return b"".join([magic, _HEADER_LENGTH.pack(len(head)), head, *inline])


def _put_pieces(data: memoryview, chunks: dict[str, bytes]) -> list[str]:
    """Cut ``data`` into pieces of :data:`PIECE_BYTES`, add them to ``chunks``; their keys."""
    keys = []
    for start in range(0, len(data), PIECE_BYTES):
        piece = data[start : start + PIECE_BYTES]
        key = hashlib.sha256(piece).hexdigest()
        if key not in chunks:
            chunks[key] = bytes(piece)
        keys.append(key)
    return keys


def _plain_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether the dtype string alone rebuilds ``dtype`` (not structured, not empty)."""
    return dtype.itemsize > 0 and np.dtype(dtype.str) == dtype


def _load_arrays(
    blob: bytes | None, chunks: Mapping[str, bytes] | None = None
) -> dict[str, np.ndarray]:
    if blob is None:
        return {}
    blob = bytes(blob)  # a memoryview from the database driver is fine too
    if blob.startswith((BLOB_MAGIC, CHUNKED_MAGIC)):
        try:
            return _load_buffer(blob, chunks or {})
        except (KeyError, TypeError, ValueError, struct.error) as exc:
            raise StateFormatError(f"corrupt state blob: {exc}") from exc
    if blob.startswith(_NPZ_MAGIC):
        return _load_npz(blob)
    raise StateFormatError("state blob is neither an array buffer nor a valid npz archive")


def _load_buffer(blob: bytes, chunks: Mapping[str, bytes]) -> dict[str, np.ndarray]:
    start = len(BLOB_MAGIC) + _HEADER_LENGTH.size
    (size,) = _HEADER_LENGTH.unpack_from(blob, len(BLOB_MAGIC))
    header = json.loads(blob[start : start + size])
    chunked = blob.startswith(CHUNKED_MAGIC)
    offset, arrays = start + size, {}
    for key, dtype_str, shape, fortran, *pieces in header:
        dtype = np.dtype(dtype_str)
        if dtype.hasobject:
            raise ValueError(f"array {key!r} has an object dtype")
        if not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"array {key!r} has a bad shape {shape!r}")
        count = math.prod(shape)
        if pieces and chunked:
            source, at = _joined_pieces(key, pieces[0], chunks), 0
            if len(source) != count * dtype.itemsize:
                raise ValueError(f"array {key!r} has {len(source)} bytes in its chunks")
        else:
            source, at = blob, offset
            offset += count * dtype.itemsize
        if at + count * dtype.itemsize > len(source):
            raise ValueError(f"array {key!r} runs past the end of its bytes")
        flat = np.frombuffer(source, dtype, count, at)
        # A copy: writable and aligned, like the arrays np.load returns.
        arrays[str(key)] = flat.reshape(shape, order="F" if fortran else "C").copy(order="K")
    if offset != len(blob):
        raise ValueError(f"{len(blob) - offset} bytes after the last array")
    return arrays


def _joined_pieces(key: str, names: list[str], chunks: Mapping[str, bytes]) -> bytes:
    missing = [name for name in names if name not in chunks]
    if missing:
        raise StateFormatError(f"array {key!r} needs chunk {missing[0]} that is not stored")
    return b"".join(bytes(chunks[name]) for name in names)


def _save_npz(arrays: dict[str, np.ndarray]) -> bytes:
    # Uncompressed: checkpoints are written every batch, and zlib would cost more CPU than the
    # bytes it saves on float data.
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def _load_npz(blob: bytes) -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError) as exc:
        raise StateFormatError(f"state blob is not a valid npz archive: {exc}") from exc
