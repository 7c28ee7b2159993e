"""Alarm ids a person can type: a prefix of an alarm's id names it when no other id shares it.

An alarm's id is a UUID (:func:`monitor.streams.records.alarm_id`, 36 characters); the CLI's
alarm table shows its first 8. Wherever an alarm id is accepted (the CLI, the HTTP API, the
notebook), the whole id or a prefix of at least :data:`MIN_PREFIX` hexadecimal digits (any case;
its dashes where the id has them) names an alarm: the alarm whose id is exactly the text, else the
one alarm whose id starts with it. A prefix that several ids start with names none of them:
:class:`AmbiguousAlarmIdError` lists them. Text shorter than that, or not of that form, only
names the alarm whose id it is exactly.

No I/O: the database's lookup (:func:`monitor.db.queries.resolve_alarm_id`) gives the stored ids
starting with the prefix to :func:`choose`, the notebook the ids of its alarms.

Examples
--------
>>> id_prefix("292B3DCB"), id_prefix("292"), id_prefix("bikes")
('292b3dcb', None, None)
>>> ids = ["292b3dcb-aaaa-5aaa-8aaa-aaaaaaaaaaaa", "292b3dcb-bbbb-5bbb-8bbb-bbbbbbbbbbbb"]
>>> choose("292b3dcb-b", ids)
'292b3dcb-bbbb-5bbb-8bbb-bbbbbbbbbbbb'
>>> choose("292b", ids)
Traceback (most recent call last):
...
monitor.streams.alarm_ids.AmbiguousAlarmIdError: alarm id '292b' is the start of 2 alarm ids: 292b3dcb-aaaa-5aaa-8aaa-aaaaaaaaaaaa, 292b3dcb-bbbb-5bbb-8bbb-bbbbbbbbbbbb; give more of it
"""  # noqa: E501

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from monitor.errors import MonitorError

__all__ = [
    "MAX_CANDIDATES",
    "MIN_PREFIX",
    "SHORT_ID",
    "AmbiguousAlarmIdError",
    "choose",
    "id_prefix",
    "matching",
    "not_found",
    "short_id",
]

#: Fewest hexadecimal digits a prefix must have to name an alarm.
MIN_PREFIX = 4
#: Characters of an id shown as its short form (``monitor alarms list``).
SHORT_ID = 8
#: Most candidates an ambiguous prefix lists.
MAX_CANDIDATES = 10

# The start of a UUID's text: hexadecimal digits, dashes only where a UUID has them.
_UUID_START = re.compile(
    r"[0-9a-f]{1,8}(-[0-9a-f]{0,4}(-[0-9a-f]{0,4}(-[0-9a-f]{0,4}(-[0-9a-f]{0,12})?)?)?)?"
)


class AmbiguousAlarmIdError(MonitorError, LookupError):
    """An alarm id prefix that several alarm ids start with; ``candidates`` lists them (at most
    :data:`MAX_CANDIDATES`, sorted; ``more`` is True when there are others)."""

    def __init__(self, text: str, candidates: Sequence[str], more: bool = False) -> None:
        count = f"more than {len(candidates)}" if more else str(len(candidates))
        super().__init__(
            f"alarm id {text!r} is the start of {count} alarm ids: {', '.join(candidates)}"
            f"{', …' if more else ''}; give more of it"
        )
        self.text = text
        self.candidates = list(candidates)
        self.more = more


def short_id(alarm_id: str) -> str:
    """The first :data:`SHORT_ID` characters of an alarm id, as the alarm table shows them."""
    return alarm_id[:SHORT_ID]


def id_prefix(text: str) -> str | None:
    """``text`` as the lower-case prefix it names, or ``None`` when it is not a prefix (fewer
    than :data:`MIN_PREFIX` hexadecimal digits, or not the start of a UUID's text)."""
    prefix = text.strip().lower()
    if sum(c != "-" for c in prefix) < MIN_PREFIX or not _UUID_START.fullmatch(prefix):
        return None
    return prefix


def not_found(text: str) -> str:
    """The message for ``text`` naming no alarm; it says how long a prefix must be when ``text``
    is the start of an id too short to name one."""
    message = f"no alarm with id {text!r}"
    if id_prefix(text) is None and _UUID_START.fullmatch(text.strip().lower()):
        message += f" (a prefix names an alarm from {MIN_PREFIX} hexadecimal digits on)"
    return message


def matching(text: str, ids: Iterable[str]) -> list[str]:
    """The ids that ``text`` may name: the ids equal to it, and those starting with its
    :func:`id_prefix` when it is one."""
    prefix = id_prefix(text)
    return [i for i in ids if i == text or (prefix is not None and i.startswith(prefix))]


def choose(text: str, ids: Iterable[str]) -> str | None:
    """The alarm id that ``text`` names among ``ids`` (a database gives those that
    :func:`matching` keeps, at most :data:`MAX_CANDIDATES` + 1 of them), or ``None`` when it
    names none.

    Raises
    ------
    AmbiguousAlarmIdError
        ``text`` is not an id and several candidates start with it.
    """
    found = sorted(set(matching(text, ids)))
    if text in found:
        return text
    if len(found) <= 1:
        return found[0] if found else None
    shown = found[:MAX_CANDIDATES]
    raise AmbiguousAlarmIdError(text, shown, more=len(found) > len(shown))
