"""The ``data_quality`` and ``schema_change`` alarms (issue #27) through alert routing and every
receiver's payload: routes select them by kind, and each summary names the feature or the key."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from monitor.alerts import AlertRouting, render
from monitor.alerts.outbox import outbox_rows
from monitor.alerts.payloads import evidence_summary, summary
from monitor.alerts.routing import AlertRoutingError, parse_alert_routing
from monitor.streams.records import Alarm
from tests.support.tabular_alarms import (
    categorical_shift_alarm,
    data_quality_alarm,
    schema_change_alarm,
)

ROUTING: dict[str, Any] = {
    "receivers": [
        {"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/hook"},
        {"name": "data-eng", "type": "slack", "url": "http://127.0.0.1:9/slack"},
        {"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9/api/v2/alerts"},
        {"name": "ml", "type": "webhook", "url": "http://127.0.0.1:9/ml"},
    ],
    "routes": [
        {"receivers": ["hook", "am"], "kinds": ["data_quality"]},
        {"receivers": ["data-eng"], "kinds": ["data_quality", "schema_change"],
         "min_severity": "warning"},
        {"receivers": ["ml"], "kinds": ["concept_shift"]},
    ],
}


def _routing() -> AlertRouting:
    return parse_alert_routing(ROUTING)


def _names(record: Alarm) -> list[str]:
    return [r.name for r in _routing().receivers_of(record)]


def test_routes_select_the_new_kinds() -> None:
    assert _names(data_quality_alarm()) == ["hook", "data-eng", "am"]
    assert _names(schema_change_alarm()) == ["data-eng"]
    assert _names(categorical_shift_alarm()) == []
    rows = outbox_rows([data_quality_alarm(), schema_change_alarm()], _routing())
    assert [(r["receiver"], r["alarm_id"]) for r in rows] == [
        ("hook", data_quality_alarm().id), ("data-eng", data_quality_alarm().id),
        ("am", data_quality_alarm().id), ("data-eng", schema_change_alarm().id),
    ]


def test_an_unknown_kind_names_the_new_ones() -> None:
    bad = {**ROUTING, "routes": [{"receivers": ["hook"], "kinds": ["data-quality"]}]}
    with pytest.raises(AlertRoutingError, match=r"unknown alarm kind.*'data_quality'.*"
                                                r"'schema_change'"):
        parse_alert_routing(bad)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (data_quality_alarm(), "data quality on stream fraud-eu (warning, data_quality "
                               "detector): missing rate of area 5 % → 25.1 %, unseen rate of "
                               "merchant 0.4 % → 3.1 %"),
        (schema_change_alarm(), "schema change on stream fraud-eu (warning, schema detector): "
                                "new key 'model_version' since event 301"),
        (schema_change_alarm(key="amount", change="absent_feature"),
         "schema change on stream fraud-eu (warning, schema detector): declared feature "
         "'amount' absent from the events since event 301"),
    ],
    ids=["data_quality", "new_key", "absent_feature"],
)
def test_summary_names_the_feature_or_the_key(record: Alarm, expected: str) -> None:
    assert summary(record) == expected


def test_a_data_quality_summary_counts_the_indicators_it_does_not_name() -> None:
    record = data_quality_alarm()
    five = [dict(record.evidence["indicators"][0], feature=f"f{i}") for i in range(5)]
    many = replace(record, evidence={**record.evidence, "indicators": five})
    assert evidence_summary(many).endswith("missing rate of f2 5 % → 25.1 % and 2 more")
    assert evidence_summary(replace(record, evidence={})) == ""


@pytest.mark.parametrize("record", [data_quality_alarm(), schema_change_alarm()],
                         ids=["data_quality", "schema_change"])
def test_every_receiver_renders_the_new_kinds(record: Alarm) -> None:
    hook, slack, am, _ = _routing().receivers
    what = evidence_summary(record)
    assert what

    webhook = json.loads(render(hook, record))
    assert webhook == {**json.loads(json.dumps(record.to_json())), "severity": "warning"}

    message = json.loads(render(slack, record))
    assert message["text"] == f":warning: {summary(record)}" and what in message["text"]
    assert f"kind `{record.kind}`" in message["blocks"][2]["elements"][0]["text"]

    (alert,) = json.loads(render(am, record, "http://monitor.internal:8000"))
    assert alert["labels"]["kind"] == record.kind
    assert alert["labels"]["detector"] == record.detector
    assert alert["labels"]["severity"] == "warning"
    assert what in alert["annotations"]["summary"]
    assert f"estimated change at event {record.changepoint}" in alert["annotations"][
        "description"]
