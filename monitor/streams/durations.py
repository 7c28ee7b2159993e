"""Durations as operators write them: ``90d``, ``12h``, ``30m``, ``45s``, ``2w``, ``1y`` or seconds.

>>> parse_duration("90d")
7776000.0
>>> parse_duration("1.5h"), parse_duration(60), format_duration(604800.0)
(5400.0, 60.0, '1w')
"""

from __future__ import annotations

import math
import re

__all__ = ["UNITS", "format_duration", "parse_duration"]

#: Seconds per unit; a year is 365 days, a month (``mo``) 30 days.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "mo": 2_592_000.0,
         "y": 31_536_000.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w|mo|y)\s*$")


def parse_duration(value: str | float | int) -> float:
    """Seconds in ``value``: a positive number of seconds or ``<number><unit>`` (s, m, h, d, w,
    mo = 30 d, y = 365 d); a ValueError says what is accepted otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"a duration is a number of seconds or e.g. '30d', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(
                f"a duration is a number of seconds or <number><unit> with unit s, m, h, d, w, mo "
                f"(30 days) or y (365 days), e.g. '30d'; got {value!r}"
            )
        seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a duration must be positive and finite, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The largest whole unit that writes ``seconds`` exactly (else seconds)."""
    for unit in ("y", "w", "d", "h", "m"):
        count = seconds / UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"
