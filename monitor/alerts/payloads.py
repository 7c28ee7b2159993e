"""The request body each receiver type gets for an alarm.

``webhook``
    The alarm record (``Alarm.to_json()``: diagnosis and evidence) plus ``severity``.
``slack``
    A Slack incoming-webhook message: ``{"text": ..., "blocks": [...]}`` (Block Kit ``section``
    and ``context`` blocks; ``text`` is the notification fallback).
``alertmanager``
    The body of Alertmanager's ``POST /api/v2/alerts``: a list of one alert with ``labels``
    (``alertname``, ``stream``, ``detector``, ``kind``, ``severity``, ``alarm_id``),
    ``annotations`` (``summary``, ``description``), ``startsAt`` and, when a ``generator_url``
    is configured, ``generatorURL``. The ``alarm_id`` label makes each alarm its own alert;
    Alertmanager resolves it after its ``resolve_timeout``.

Every format's summary names what moved when the evidence says it (:func:`evidence_summary`):
the features and rates of a ``data_quality`` alarm, the key of a ``schema_change`` alarm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.alerts.routing import Receiver, severity
from monitor.db.types import json_dumps
from monitor.streams.records import Alarm, iso

__all__ = ["evidence_summary", "render"]

#: ``alertname`` label of the Alertmanager alerts.
ALERTNAME = "MonitorAlarm"


def render(receiver: Receiver, alarm: Alarm, generator_url: str | None = None) -> str:
    """The JSON body to POST to ``receiver`` for ``alarm``."""
    if receiver.type == "slack":
        return json_dumps(slack_message(alarm))
    if receiver.type == "alertmanager":
        return json_dumps(alertmanager_alerts(alarm, generator_url))
    return json_dumps({**alarm.to_json(), "severity": severity(alarm).label})


#: Indicators named in a data-quality summary; the rest are counted ("and 2 more").
SUMMARY_INDICATORS = 3


def summary(alarm: Alarm) -> str:
    what = evidence_summary(alarm)
    return (f"{alarm.kind.replace('_', ' ')} on stream {alarm.stream} "
            f"({severity(alarm).label}, {alarm.detector} detector){': ' + what if what else ''}")


def evidence_summary(alarm: Alarm) -> str:
    """What moved, in words, for the kinds whose evidence names it; ``""`` for the others.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> alarm = Alarm("fraud", "data_quality", "data_quality", "e9", 9,
    ...               datetime(2026, 12, 1, tzinfo=UTC), 4, 250.0, 200.0, "shiryaev_roberts",
    ...               {"indicators": [{"feature": "area", "rate": "missing",
    ...                                "calibration_rate": 0.05, "rate_after": 0.25}]})
    >>> evidence_summary(alarm)
    'missing rate of area 5 % → 25 %'
    """
    evidence = alarm.evidence
    if alarm.kind == "data_quality":
        indicators = [i for i in evidence.get("indicators") or () if isinstance(i, Mapping)]
        named = [_indicator(i) for i in indicators[:SUMMARY_INDICATORS]]
        more = len(indicators) - len(named)
        return ", ".join(named) + (f" and {more} more" if more > 0 else "")
    if alarm.kind == "schema_change" and "key" in evidence:
        what = ("declared feature {!r} absent from the events" if evidence.get("change") ==
                "absent_feature" else "new key {!r}").format(evidence["key"])
        since = evidence.get("first_event_index")
        return what + ("" if since is None else f" since event {since}")
    return ""


def _indicator(indicator: Mapping[str, Any]) -> str:
    rate = str(indicator.get("rate", "?")).replace("_", "-")
    return (f"{rate} rate of {indicator.get('feature', '?')} "
            f"{percent(indicator.get('calibration_rate'))} → "
            f"{percent(indicator.get('rate_after'))}")


def percent(share: Any) -> str:
    """A share in [0, 1] as a percentage with 3 significant digits (``?`` if not a number)."""
    if isinstance(share, bool) or not isinstance(share, int | float):
        return "?"
    return f"{100.0 * share:.3g} %"


def description(alarm: Alarm) -> str:
    where = "" if alarm.changepoint is None else f"; estimated change at event {alarm.changepoint}"
    return (f"{alarm.rule} statistic {alarm.statistic:.4g} crossed {alarm.threshold:.4g} at event "
            f"{alarm.event_index} (id {alarm.event_id}){where}. Alarm {alarm.id}.")


def slack_message(alarm: Alarm) -> dict[str, Any]:
    """A Slack incoming-webhook message (``text`` fallback, ``section`` and ``context`` blocks).

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> alarm = Alarm("bikes", "conditional", "concept_shift", "e9", 9,
    ...               datetime(2026, 12, 1, tzinfo=UTC), 4, 250.0, 200.0, "shiryaev_roberts")
    >>> slack_message(alarm)["text"]
    ':rotating_light: concept shift on stream bikes (critical, conditional detector)'
    """
    icon = {"critical": ":rotating_light:", "warning": ":warning:"}.get(
        severity(alarm).label, ":information_source:"
    )
    text = f"{icon} {summary(alarm)}"
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{text}*"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": description(alarm)}},
            {"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"stream `{alarm.stream}` · kind `{alarm.kind}` · "
                                           f"{iso(alarm.ts)}"},
            ]},
        ],
    }


def alertmanager_alerts(alarm: Alarm, generator_url: str | None = None) -> list[dict[str, Any]]:
    """The ``POST /api/v2/alerts`` body of one alarm (Alertmanager API v2, ``postableAlerts``)."""
    alert: dict[str, Any] = {
        "labels": {
            "alertname": ALERTNAME,
            "stream": alarm.stream,
            "detector": alarm.detector,
            "kind": alarm.kind,
            "severity": severity(alarm).label,
            "alarm_id": alarm.id,
        },
        "annotations": {"summary": summary(alarm), "description": description(alarm)},
        "startsAt": alarm.to_json()["ts"],
    }
    if generator_url:
        alert["generatorURL"] = f"{generator_url.rstrip('/')}/alarms/{alarm.id}"
    return [alert]
