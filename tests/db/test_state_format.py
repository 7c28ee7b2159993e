"""Detector state serialisation: exact round trips, no pickle, clear errors."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from monitor.streams.state import (
    BLOB_MAGIC,
    CHUNKED_BYTES,
    CHUNKED_MAGIC,
    PIECE_BYTES,
    STATE_FORMAT,
    Checkpoint,
    StateEncodingError,
    StateFormatError,
    decode_state,
    encode_state,
)
from tests.support.states import assert_identical

DTYPES = ["float64", "float32", "float16", "int64", "int32", "uint8", "bool", "complex128", ">f8"]

arrays = st.sampled_from(DTYPES).flatmap(
    lambda dtype: hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
)
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1.7976931348623157e308]
)
np_scalars = st.one_of(
    floats.map(np.float64),
    st.floats(width=32).map(np.float32),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.integers(0, 255).map(np.uint8),
    st.booleans().map(np.bool_),
    st.complex_numbers().map(np.complex128),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**130), 2**130),
    floats,
    st.text(max_size=8),
    st.binary(max_size=8),
    np_scalars,
    arrays,
)
keys = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["__ndarray__", "__float__", "__dict__", "__tuple__", "format"]),
    st.integers(-5, 5),
    st.tuples(st.integers(0, 3), st.text(max_size=2)),
)
values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=25,
)
states = st.dictionaries(st.text(max_size=6), values, max_size=5)


def _reject(token: str) -> None:
    raise AssertionError(f"non-standard JSON token {token}")


@settings(max_examples=150, deadline=None)
@given(states)
def test_decode_inverts_encode_bit_for_bit(state: dict[str, Any]) -> None:
    text, blob = encode_state(state)
    json.loads(text, parse_constant=_reject)  # strict JSON: no NaN/Infinity tokens
    assert_identical(decode_state(text, blob), state)


def test_special_floats_and_nan_payloads_survive() -> None:
    odd_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
    state = {"x": [math.nan, -math.nan, odd_nan, math.inf, -math.inf, -0.0, 0.1 + 0.2]}
    assert_identical(decode_state(*encode_state(state)), state)


def test_numpy_scalars_keep_their_dtype() -> None:
    state = {"a": np.float32(0.1), "b": np.int8(-3), "c": np.longdouble(1) / 3, "d": np.bool_(1)}
    back = decode_state(*encode_state(state))
    assert_identical(back, state)
    assert np.float32(back["a"]) * np.float32(3) == np.float32(0.1) * np.float32(3)


def test_tuples_bytes_and_non_string_keys_round_trip() -> None:
    state = {"t": (1, (2.5, "x")), "b": b"\x00\xff", "k": {1: "one", (0, "a"): None}}
    back = decode_state(*encode_state(state))
    assert_identical(back, state)


def test_user_keys_that_look_like_tags_are_not_mistaken_for_tags() -> None:
    state = {"d": {"__ndarray__": "a0"}, "f": {"__float__": "nan"}}
    text, blob = encode_state(state)
    assert blob is None
    assert_identical(decode_state(text, blob), state)


def test_arrays_keep_layout_and_live_in_the_blob() -> None:
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    state = {"w": fortran, "nested": [{"r": np.arange(4, dtype=">i4")}]}
    text, blob = encode_state(state)
    assert blob is not None and blob.startswith(BLOB_MAGIC)  # one buffer, not an npz archive
    assert "__ndarray__" in text and "0.0" not in text
    back = decode_state(text, blob)
    assert_identical(back, state)
    assert back["w"].flags.f_contiguous


@pytest.mark.parametrize(
    ("state", "where"),
    [
        ({"s": {1, 2}}, "state.s"),
        ({"a": [1, object()]}, "state.a[1]"),
        ({"o": np.array([None], dtype=object)}, "state.o"),
    ],
    ids=["set", "object", "object-array"],
)
def test_unsupported_values_are_refused_with_their_location(
    state: dict[str, Any], where: str
) -> None:
    with pytest.raises(StateEncodingError, match=where.replace("[", r"\[").replace(".", r"\.")):
        encode_state(state)


def test_unknown_format_and_corrupt_input_are_refused() -> None:
    with pytest.raises(StateFormatError, match="unknown state format 99"):
        decode_state(json.dumps({"format": 99, "state": {}}), None)
    with pytest.raises(StateFormatError, match="not JSON"):
        decode_state("{", None)
    text = json.dumps({"format": STATE_FORMAT, "state": {"x": {"__ndarray__": "a0"}}})
    with pytest.raises(StateFormatError, match="missing"):
        decode_state(text, None)
    with pytest.raises(StateFormatError, match="npz"):
        decode_state(text, b"not a zip")


def test_pickled_arrays_are_never_loaded() -> None:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, a0=np.array([{"evil": 1}], dtype=object))  # needs pickle to load
    text = json.dumps({"format": STATE_FORMAT, "state": {"x": {"__ndarray__": "a0"}}})
    with pytest.raises(StateFormatError):
        decode_state(text, buffer.getvalue())


def test_checkpoint_encodes_state_and_arrays_together() -> None:
    cp = Checkpoint("s", 3, 120, {"rng": {"state": 2**127 + 5}}, {"scores": np.linspace(0, 1, 5)})
    back = Checkpoint.decode(cp.stream, cp.version, cp.event_index, *cp.encode())
    assert (back.stream, back.version, back.event_index) == ("s", 3, 120)
    assert_identical(back.state, cp.state)
    assert_identical(back.arrays, cp.arrays)


@pytest.mark.parametrize("dtype", ["float64", ">f4", "int16", "bool", "complex64"])
@pytest.mark.parametrize("layout", ["C", "F", "strided", "empty"])
def test_large_arrays_round_trip_through_their_pieces(dtype: str, layout: str) -> None:
    rng = np.random.default_rng(3)
    base = (rng.normal(size=(300, 40)) * 50).astype(dtype)
    array = {"C": base, "F": np.asfortranarray(base), "strided": base[::2, ::3],
             "empty": base[:0]}[layout]
    state = {"big": array, "small": base[:2, :2].copy(), "again": array}
    pieces: dict[str, bytes] = {}
    text, blob = encode_state(state, pieces)
    assert blob is not None
    if array.nbytes >= CHUNKED_BYTES:
        assert blob.startswith(CHUNKED_MAGIC) and len(blob) < 2 * CHUNKED_BYTES
        assert sum(map(len, pieces.values())) >= array.nbytes  # kept once, though named twice
        assert all(len(p) <= PIECE_BYTES for p in pieces.values())
    else:
        assert blob.startswith(BLOB_MAGIC) and not pieces
    assert_identical(decode_state(text, blob, pieces), state)
    assert_identical(decode_state(*encode_state(state)), state)  # and without pieces


def test_a_missing_or_short_piece_is_refused() -> None:
    pieces: dict[str, bytes] = {}
    text, blob = encode_state({"big": np.arange(5000.0)}, pieces)
    first = next(iter(pieces))
    with pytest.raises(StateFormatError, match=f"needs chunk {first}"):
        decode_state(text, blob, {k: v for k, v in pieces.items() if k != first})
    with pytest.raises(StateFormatError, match="bytes in its chunks"):
        decode_state(text, blob, {**pieces, first: pieces[first][:-8]})
