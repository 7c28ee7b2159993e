"""Alert routing configuration, payload shapes, timestamped signatures and the retry backoff
(no database, no network)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.api_rows import alarm
from monitor.alerts import (
    SEVERITY_OF_KIND,
    AlertRouting,
    AlertRoutingError,
    Delivery,
    Severity,
    load_alert_routing,
    render,
)
from monitor.alerts.delivery import exponential_backoff
from monitor.alerts.outbox import outbox_rows
from monitor.alerts.routing import parse_alert_routing
from monitor.alerts.signing import sign, signed_headers, verify
from monitor.streams.records import ALARM_KINDS

ROUTING: dict[str, Any] = {
    "receivers": [
        {"name": "oncall", "type": "webhook", "url": "http://127.0.0.1:9/oncall"},
        {"name": "ml", "type": "slack", "url": "http://127.0.0.1:9/slack"},
        {"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9/api/v2/alerts"},
    ],
    "routes": [
        {"receivers": ["oncall"], "min_severity": "critical"},
        {"receivers": ["ml"], "streams": ["fraud-*", "bikes"], "kinds": ["concept_shift",
                                                                         "benign_covariate_shift"]},
        {"receivers": ["am"], "streams": ["fraud-eu"], "min_severity": "warning"},
    ],
    "generator_url": "http://monitor.internal:8000/",
}


def names(routing: AlertRouting, stream: str, kind: str) -> list[str]:
    return [r.name for r in routing.receivers_of(alarm(stream, 1, kind=kind))]


def test_routes_match_on_stream_glob_kind_and_minimum_severity() -> None:
    routing = parse_alert_routing(ROUTING)
    assert names(routing, "bikes", "concept_shift") == ["oncall", "ml"]
    assert names(routing, "bikes", "extreme_covariate_shift") == []
    assert names(routing, "bikes", "benign_covariate_shift") == ["ml"]
    assert names(routing, "fraud-eu", "concept_shift") == ["oncall", "ml", "am"]
    assert names(routing, "fraud-eu", "extreme_covariate_shift") == ["am"]
    assert names(routing, "fraud-eu", "benign_covariate_shift") == ["ml"]  # info < warning
    assert names(routing, "taxis", "benign_covariate_shift") == []
    assert names(routing, "fraudster", "concept_shift") == ["oncall"]  # "fraud-*" needs the dash


def test_severity_of_each_kind() -> None:
    assert SEVERITY_OF_KIND == {
        "concept_shift": Severity.CRITICAL,
        "extreme_covariate_shift": Severity.WARNING,
        "benign_covariate_shift": Severity.INFO,
        "insufficient_evidence": Severity.WARNING,
        "data_quality": Severity.WARNING,
        "schema_change": Severity.WARNING,
    }
    assert tuple(SEVERITY_OF_KIND) == ALARM_KINDS


def test_webhook_urls_are_a_catch_all_route(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text(json.dumps(ROUTING))  # JSON is YAML
    routing = load_alert_routing(str(path), ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"])
    assert routing is not None
    assert names(routing, "taxis", "benign_covariate_shift") == ["webhook-1", "webhook-2"]
    assert names(routing, "bikes", "concept_shift") == ["oncall", "ml", "webhook-1", "webhook-2"]
    legacy = load_alert_routing("", ["http://127.0.0.1:9/a"])
    assert legacy is not None and names(legacy, "x", "benign_covariate_shift") == ["webhook-1"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"receivers": []}, "receivers: Tuple should have at least 1 item"),
        ({"routes": [{"receivers": ["nobody"]}]},
         "alerts.yaml: routes[0] names unknown receiver(s) ['nobody']; receivers: ['oncall',"),
        ({"routes": [{"receivers": ["ml"], "kinds": ["drift"]}]},
         "unknown alarm kind(s) ['drift']; valid kinds"),
        ({"routes": [{"receivers": ["ml"], "min_severity": "high"}]},
         "routes.0.min_severity: Input should be 'info', 'warning' or 'critical'"),
        ({"receivers": [{"name": "x", "type": "pagerduty", "url": "http://h/"}]},
         "receivers.0.type: Input should be 'webhook', 'slack' or 'alertmanager'"),
        ({"receivers": [{"name": "x", "type": "slack", "url": "ftp://h/"}]},
         "receivers.0.url: must start with http:// or https://"),
        ({"receivers": [ROUTING["receivers"][0]] * 2, "routes": [{"receivers": ["oncall"]}]},
         "receiver names must be unique; repeated: ['oncall']"),
        ({"delivery": {"max_attempts": 0}}, "delivery.max_attempts: Input should be greater"),
        ({"route": []}, "route: Extra inputs are not permitted"),
    ],
)
def test_invalid_routing_is_refused_with_the_place_and_reason(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(AlertRoutingError) as caught:
        parse_alert_routing(ROUTING | change, "alerts.yaml")
    assert str(caught.value).startswith("alerts.yaml: ")
    assert message in str(caught.value)


def test_unreadable_or_malformed_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(AlertRoutingError, match="cannot read alert routing file"):
        load_alert_routing(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "alerts.json"
    bad.write_text("{receivers: [")
    with pytest.raises(AlertRoutingError, match=r"alerts\.json: not valid JSON"):
        load_alert_routing(str(bad))
    with pytest.raises(AlertRoutingError, match="MONITOR_WEBHOOK_URLS: url: must start"):
        load_alert_routing(None, ["hooks.example/x"])


def test_slack_payload_is_an_incoming_webhook_message() -> None:
    routing = parse_alert_routing(ROUTING)
    body = json.loads(render(routing.receivers[1], alarm("bikes", 1, kind="concept_shift")))
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith(":rotating_light: concept shift on stream bikes (critical")
    assert [b["type"] for b in body["blocks"]] == ["section", "section", "context"]
    for block in body["blocks"][:2]:
        assert block["text"]["type"] == "mrkdwn" and block["text"]["text"]
    assert body["blocks"][2]["elements"][0]["type"] == "mrkdwn"


def test_alertmanager_payload_is_a_v2_postable_alerts_list() -> None:
    routing = parse_alert_routing(ROUTING)
    record = alarm("fraud-eu", 2, kind="extreme_covariate_shift")
    (alert,) = json.loads(render(routing.receivers[2], record, routing.generator_url))
    assert set(alert) == {"labels", "annotations", "startsAt", "generatorURL"}
    assert alert["labels"] == {
        "alertname": "MonitorAlarm", "stream": "fraud-eu", "detector": record.detector,
        "kind": "extreme_covariate_shift", "severity": "warning", "alarm_id": record.id,
    }
    assert all(isinstance(v, str) and v for v in alert["labels"].values())
    assert set(alert["annotations"]) == {"summary", "description"}
    assert alert["startsAt"] == "2026-11-30T12:00:02Z"
    assert alert["generatorURL"] == f"http://monitor.internal:8000/alarms/{record.id}"


def test_webhook_payload_is_the_alarm_record_with_its_severity() -> None:
    routing = parse_alert_routing(ROUTING)
    record = alarm("bikes", 3, kind="concept_shift")
    assert json.loads(render(routing.receivers[0], record)) == {
        **json.loads(json.dumps(record.to_json())), "severity": "critical"
    }


def test_outbox_rows_one_per_alarm_and_receiver_with_the_revision_key() -> None:
    routing = parse_alert_routing(ROUTING)
    rows = outbox_rows([alarm("fraud-eu", 0, kind="concept_shift"),
                        alarm("taxis", 1, kind="benign_covariate_shift")], routing)
    assert [(r["receiver"], r["receiver_type"]) for r in rows] == [
        ("oncall", "webhook"), ("ml", "slack"), ("am", "alertmanager")
    ]
    assert {r["idempotency_key"] for r in rows} == {f"{alarm('fraud-eu', 0).id}:1"}
    assert all(r["status"] == "pending" and r["attempt_limit"] == 8 for r in rows)


def test_signature_covers_the_timestamp_and_expires_outside_the_window() -> None:
    body = b'{"id":"a"}'
    headers = signed_headers(body, "s3cret", "a:1", 1, now=1_764_547_200)
    stamp, signature = headers["X-Monitor-Timestamp"], headers["X-Monitor-Signature"]
    assert stamp == "1764547200" and headers["X-Monitor-Idempotency-Key"] == "a:1"
    for skew in (-300, -1, 0, 1, 299, 300):
        assert verify(body, "s3cret", signature, stamp, now=1_764_547_200 + skew)
    for skew in (-301, 301, 10_000):
        assert not verify(body, "s3cret", signature, stamp, now=1_764_547_200 + skew)
    # Replaying the body under a fresh timestamp needs the secret.
    assert not verify(body, "s3cret", signature, "1764547999", now=1_764_547_999)
    assert not verify(body, "other", signature, stamp, now=1_764_547_200)
    assert not verify(b'{"id":"b"}', "s3cret", signature, stamp, now=1_764_547_200)
    assert not verify(body, "s3cret", signature, "soon", now=1_764_547_200)
    assert verify(body, "s3cret", signature, stamp, tolerance=10, now=1_764_547_210)
    assert not verify(body, "s3cret", signature, stamp, tolerance=10, now=1_764_547_211)
    assert sign(body, "s3cret", 1) != sign(body, "s3cret", 2)


def _jittered(delivery: Delivery, rng: random.Random) -> Callable[[int], float]:
    """The backoff of the outbox's delivery (``AlertDelivery.backoff``)."""
    return exponential_backoff(delivery.backoff_seconds, cap=delivery.max_backoff_seconds,
                               jitter=rng)


def test_backoff_is_exponential_with_equal_jitter() -> None:
    delivery = Delivery(backoff_seconds=0.5, max_backoff_seconds=30)
    for seed in range(200):
        wait = _jittered(delivery, random.Random(seed))
        for n in range(1, 10):
            full = min(30.0, 0.5 * 2 ** (n - 1))
            assert full / 2 <= wait(n) <= full
    # The jitter spreads the waits: over 2 000 draws the factor's mean is 3/4 (uniform on
    # [1/2, 1], standard deviation 0.144; the mean's is 0.0032, so 0.02 is over 6 of them).
    wait = _jittered(delivery, random.Random(7))
    factors = [wait(3) / 2.0 for _ in range(2000)]
    assert abs(sum(factors) / len(factors) - 0.75) < 0.02
    assert min(factors) < 0.52 and max(factors) > 0.98
