"""GET /metrics: Prometheus text read from the database at scrape time."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert
from sqlalchemy.orm import Session

from bench.api_rows import (
    READ,
    T0,
    alarm,
    calibration_rows,
    checkpoint,
    dead_letter,
    make_settings,
    ood_window,
    register,
    store,
    stream_config,
    trace,
)
from monitor.api import create_app
from monitor.db.models import WebhookDeliveryRow
from monitor.db.queries import create_stream
from monitor.streams.config import StreamConfig
from monitor.streams.records import TracePoint


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _seed(session: Session) -> None:
    last = T0 + timedelta(minutes=10)
    register(session, "bikes")
    register(session, "taxis")
    alarms = [
        alarm("bikes", 0, kind="concept_shift", detector="conditional"),
        alarm("bikes", 1, kind="concept_shift", detector="conditional"),
        alarm("bikes", 2, kind="benign_covariate_shift", detector="covariate"),
        alarm("taxis", 3, kind="extreme_covariate_shift", detector="conditional"),
    ]
    store(
        session,
        alarms=alarms,
        trace_points=trace("bikes", "covariate", range(0, 100, 10))
        + trace("bikes", "conditional", range(5, 55, 10)),
        ood_windows=[ood_window("bikes", 0, ("e-1", "e-2")), ood_window("bikes", 1, ("e-9",))],
        dead_letters=[dead_letter(0), dead_letter(1), dead_letter(7, source="kafka:events")],
        checkpoints={
            "bikes": checkpoint(
                "bikes",
                100,
                pending_ts=[
                    (T0 + timedelta(minutes=4)).timestamp(),
                    (T0 + timedelta(minutes=7)).timestamp(),
                ],
                last_ts=last,
            ),
            "taxis": checkpoint("taxis", 7),
        },
    )
    first, second = alarms[0].id, alarms[1].id
    rows = [
        {
            "alarm_id": first,
            "url": "http://x",
            "attempt": n,
            "status_code": s,
            "error": e,
            "idempotency_key": first,
        }
        for n, s, e in ((1, 503, None), (2, None, "ConnectError"), (3, 200, None))
    ]
    rows.append(
        {
            "alarm_id": second,
            "url": "http://x",
            "attempt": 1,
            "status_code": None,
            "error": "dropped: queue full",
            "idempotency_key": second,
        }
    )
    with session.begin():
        session.execute(insert(WebhookDeliveryRow), rows)


def test_metrics_report_what_is_stored(client: TestClient, session: Session) -> None:
    _seed(session)
    response = client.get("/metrics", headers=READ)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = _samples(response.text)

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert value("monitor_events_processed_total", stream="bikes", kind="prediction") == 100
    assert value("monitor_events_processed_total", stream="taxis", kind="prediction") == 7
    # 10 joined + 1 waiting + 1 expired
    assert value("monitor_events_processed_total", stream="bikes", kind="label") == 12
    assert (
        value("monitor_alarms_total", stream="bikes", detector="conditional", kind="concept_shift")
        == 2
    )
    assert (
        value(
            "monitor_alarms_total",
            stream="taxis",
            detector="conditional",
            kind="extreme_covariate_shift",
        )
        == 1
    )
    assert value("monitor_alarms_unacknowledged", stream="bikes") == 3
    assert value("monitor_dead_letters_total", source="http", stream="unknown") == 2
    assert value("monitor_dead_letters_total", source="kafka", stream="unknown") == 1
    assert value("monitor_ood_windows_total", stream="bikes") == 2
    assert value("monitor_ood_flagged_total", stream="bikes") == 3
    assert value("monitor_label_join_pending_predictions", stream="bikes") == 2
    assert value("monitor_label_join_pending_labels", stream="bikes") == 1
    assert value("monitor_label_join_lag_seconds", stream="bikes") == 6 * 60
    assert value("monitor_label_join_expired_total", stream="bikes", kind="prediction") == 2
    # The latest trace point of each detector: covariate 90, conditional 45.
    assert value("monitor_trace_event_index", stream="bikes", detector="covariate") == 90
    assert value("monitor_trace_event_index", stream="bikes", detector="conditional") == 45
    assert math.isclose(value("monitor_log_martingale", stream="bikes", detector="covariate"), 0.9)
    assert value("monitor_log_statistic", stream="bikes", detector="conditional") == 45.0
    assert value("monitor_p_value", stream="bikes", detector="covariate") == 0.5
    assert value("monitor_log_threshold", stream="bikes", detector="covariate") == 9.21
    assert value("monitor_threshold", stream="bikes", detector="covariate") == 10_000
    assert value("monitor_webhook_deliveries_total", result="success") == 1
    assert value("monitor_webhook_deliveries_total", result="http_error") == 1
    assert value("monitor_webhook_deliveries_total", result="error") == 1
    assert value("monitor_webhook_deliveries_total", result="dropped") == 1
    assert value("monitor_database_up") == 1


def test_two_replicas_report_the_same_values(
    client: TestClient, session: Session, database_url: str
) -> None:
    _seed(session)
    with TestClient(create_app(make_settings(database_url))) as other:
        first = _samples(client.get("/metrics", headers=READ).text)
        second = _samples(other.get("/metrics", headers=READ).text)

    def stored(samples: dict[Any, float]) -> dict[Any, float]:
        # Request counts and process figures belong to each replica; the rest is read.
        return {
            k: v for k, v in samples.items()
            if not k[0].startswith(("monitor_http_", "process_", "python_"))
        }

    assert stored(first) == stored(second)


def test_metrics_follow_new_checkpoints(client: TestClient, session: Session) -> None:
    register(session, "bikes")
    store(session, checkpoints={"bikes": checkpoint("bikes", 10, pending_ts=[T0.timestamp()])})
    before = _samples(client.get("/metrics", headers=READ).text)
    store(session, checkpoints={"bikes": checkpoint("bikes", 20)})
    after = _samples(client.get("/metrics", headers=READ).text)
    key = ("monitor_label_join_pending_predictions", (("stream", "bikes"),))
    assert (before[key], after[key]) == (1, 0)


def test_unreachable_database_is_reported_not_raised() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1"
    with TestClient(create_app(make_settings(url))) as client:
        response = client.get("/metrics", headers=READ)
        assert response.status_code == 200
        assert _samples(response.text)[("monitor_database_up", ())] == 0
        assert client.get("/health").json() == {
            "status": "degraded",
            "database": "unreachable",
            "version": client.get("/health").json()["version"],
        }
        assert client.get("/alarms", headers=READ).status_code == 503


def test_metrics_carry_the_budget_and_the_threshold_in_force(
    client: TestClient, session: Session
) -> None:
    """A time budget's threshold moves with the event rate: monitor_threshold is the one in
    force at the latest trace point; an events budget's is 2 × events; the budget itself is
    monitor_alarm_budget_seconds."""
    config = StreamConfig.model_validate(stream_config(
        "bikes", alarm={"false_alarm_every": "7d"}, covariate_alarm={"events": 500}
    ))
    create_stream(session, config, calibration_rows())
    point = TracePoint("bikes", "conditional", 30, T0, log_martingale=0.1, p_value=0.5,
                       log_statistic=1.0, log_threshold=20.5, weights_ess=None)
    store(session, trace_points=[point])
    got = _samples(client.get("/metrics", headers=READ).text)

    def value(name: str, detector: str) -> float | None:
        return got.get((name, (("detector", detector), ("stream", "bikes"))))

    assert value("monitor_threshold", "conditional") == math.exp(20.5)
    assert value("monitor_threshold", "covariate") == 1000.0
    assert value("monitor_alarm_budget_seconds", "conditional") == 7 * 86400.0
    assert value("monitor_alarm_budget_seconds", "covariate") is None
