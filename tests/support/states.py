"""Bit-for-bit comparison of detector states (types, dtypes, NaN bits included)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np


def assert_identical(a: Any, b: Any, path: str = "state") -> None:
    """Equal bit for bit, types included (NaN equals NaN with the same bits)."""
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), path
        assert a.tobytes() == b.tobytes(), path
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), path
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        assert len(a) == len(b), path
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            assert_identical(ka, kb, f"{path}<key>")
            assert_identical(va, vb, f"{path}[{ka!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{path}[{i}]")
    else:
        assert a == b, path
