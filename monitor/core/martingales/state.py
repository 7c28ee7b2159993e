"""Versioned, pickle-free state dictionaries shared by every class of the statistical core
(and by the stream's :class:`monitor.streams.detectors.StreamDetectors`).

A state is a dict of JSON-ready builtins (and ``np.ndarray`` values) with two reserved keys:
``"class"`` (the class name) and ``"version"`` (the layout version of that class's state).
Checkpoints store these class names: a class that is moved keeps loading old checkpoints as long
as its name stays; a renamed one must accept its old name in :func:`check_state`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from monitor.errors import MonitorError

__all__ = [
    "STATE_VERSION",
    "StateError",
    "check_state",
    "decode_float",
    "encode_float",
    "new_state",
    "rng_from_state",
    "rng_state",
]

STATE_VERSION = 1


class StateError(MonitorError, ValueError):
    """A state dict that does not belong to this class or uses an unknown layout version."""


def new_state(owner: object, **fields: Any) -> dict[str, Any]:
    """Return a state dict stamped with the owner's class name and the layout version."""
    return {"class": type(owner).__name__, "version": STATE_VERSION, **fields}


def check_state(state: dict[str, Any], cls: type) -> None:
    """Raise :class:`StateError` unless ``state`` was written by ``cls`` with a known layout."""
    if state.get("class") != cls.__name__:
        raise StateError(f"state of class {state.get('class')!r} given to {cls.__name__}")
    if state.get("version") != STATE_VERSION:
        raise StateError(
            f"{cls.__name__} state version {state.get('version')!r} is not supported "
            f"(valid: {STATE_VERSION})"
        )


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's full state; 128-bit integers become strings so any JSON reader keeps them."""
    raw = rng.bit_generator.state
    if raw["bit_generator"] != "PCG64":
        raise StateError(f"only PCG64 generators are serialisable, got {raw['bit_generator']}")
    return {
        "bit_generator": "PCG64",
        "state": str(raw["state"]["state"]),
        "inc": str(raw["state"]["inc"]),
        "has_uint32": int(raw["has_uint32"]),
        "uinteger": int(raw["uinteger"]),
    }


def rng_from_state(state: dict[str, Any]) -> np.random.Generator:
    """Rebuild a generator that continues exactly where :func:`rng_state` left it."""
    rng = np.random.default_rng()
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int(state["state"]), "inc": int(state["inc"])},
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }
    return rng


def encode_float(x: float) -> float | None:
    """Strict JSON (PostgreSQL JSONB) has no NaN or ±inf: they are stored as None."""
    return x if math.isfinite(x) else None


def decode_float(x: float | None, missing: float) -> float:
    """Inverse of :func:`encode_float`; ``missing`` is the value None stood for."""
    return missing if x is None else float(x)
