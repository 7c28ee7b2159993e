"""Alarms whose ids share prefixes, for the tests of alarm ids given by prefix."""

from __future__ import annotations

from dataclasses import replace

from bench.api_rows import alarm
from monitor.streams.records import Alarm

#: Three ids starting with ``292b``, two of them with ``292b3dcb``; twelve with ``aaaa``.
SHARED = (
    "292b3dcb-0000-5000-8000-000000000001",
    "292b3dcb-0000-5000-8000-000000000002",
    "292bf01e-0000-5000-8000-000000000003",
)
CROWD = tuple(f"aaaa{i:04x}-0000-5000-8000-000000000000" for i in range(12))


def alarms_with_shared_prefixes() -> list[Alarm]:
    """One alarm per id of :data:`SHARED` and :data:`CROWD`, on the stream ``bikes``."""
    return [replace(alarm("bikes", i), id=i_d) for i, i_d in enumerate(SHARED + CROWD)]
