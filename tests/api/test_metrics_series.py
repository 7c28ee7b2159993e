"""Bounded labels, series from start-up, events by kind and the configured threshold."""

from __future__ import annotations

from dataclasses import replace

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from bench.api_rows import (
    READ,
    alarm,
    calibration_rows,
    checkpoint,
    dead_letter,
    register,
    store,
    stream_config,
    trace,
)
from monitor.db.queries import create_stream
from monitor.ops.metrics import source_kind
from monitor.streams.config import StreamConfig
from monitor.streams.records import KINDS_OF_DETECTOR


def _samples(client: TestClient) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    text = client.get("/metrics", headers=READ).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def test_dead_letters_are_labelled_by_source_kind_never_path(
    client: TestClient, session: Session
) -> None:
    register(session, "bikes")
    path = "file:/srv/data/2026-12-01/events.jsonl"
    store(session, dead_letters=[dead_letter(0, source=path), dead_letter(1, source=path),
                                 dead_letter(2, source="kafka:predictions-eu")])
    got = _samples(client)["monitor_dead_letters_total"]
    assert got[(("source", "file"), ("stream", "unknown"))] == 2
    assert got[(("source", "kafka"), ("stream", "unknown"))] == 1
    values = {v for labels in got for _, v in labels}
    assert not any("/" in v or "predictions-eu" in v for v in values)
    assert {dict(labels)["source"] for labels in got} == {"file", "kafka", "http", "memory",
                                                          "unknown"}


def test_unregistered_streams_share_one_label_value(client: TestClient, session: Session) -> None:
    register(session, "bikes")
    store(session, checkpoints={f"adhoc-{i}": checkpoint(f"adhoc-{i}", 10) for i in range(3)})
    got = _samples(client)["monitor_events_processed_total"]
    assert got[(("kind", "prediction"), ("stream", "unknown"))] == 30
    assert {dict(labels)["stream"] for labels in got} == {"bikes", "unknown"}


def test_every_series_exists_from_start_up(client: TestClient, session: Session) -> None:
    register(session, "bikes")  # registered, nothing processed yet
    got = _samples(client)
    for kind in ("prediction", "label"):
        assert got["monitor_events_processed_total"][(("kind", kind), ("stream", "bikes"))] == 0
    alarms = got["monitor_alarms_total"]
    key = (("detector", "conditional"), ("kind", "concept_shift"), ("stream", "bikes"))
    assert alarms[key] == 0
    bikes = [k for k in alarms if dict(k)["stream"] == "bikes"]
    # the (detector, kind) pairs a detector can raise, no impossible one (ood × concept_shift)
    assert sorted((dict(k)["detector"], dict(k)["kind"]) for k in bikes) == sorted(
        (d, kind) for d, kinds in KINDS_OF_DETECTOR.items() for kind in kinds)
    assert got["monitor_dead_letters_total"][(("source", "kafka"), ("stream", "bikes"))] == 0
    for name in ("monitor_ood_windows_total", "monitor_ood_flagged_total",
                 "monitor_alarms_unacknowledged", "monitor_label_join_pending_predictions"):
        assert got[name][(("stream", "bikes"),)] == 0, name
    for result in ("success", "http_error", "error", "dropped"):
        assert got["monitor_webhook_deliveries_total"][(("result", result),)] == 0


def test_events_are_counted_by_kind(client: TestClient, session: Session) -> None:
    register(session, "bikes")
    state = checkpoint("bikes", 1200)  # join counts: 10 joined, 1 waiting label, 1 expired
    state.state["join"]["counts"] = [0, 0, 1199]
    state.state["join"]["labels"] = [["late", 1.0, 0.0]]
    store(session, checkpoints={"bikes": state})
    got = _samples(client)["monitor_events_processed_total"]
    assert got[(("kind", "prediction"), ("stream", "bikes"))] == 1200
    assert got[(("kind", "label"), ("stream", "bikes"))] == 1200


def test_threshold_is_the_configured_value(client: TestClient, session: Session) -> None:
    config = StreamConfig.model_validate(
        stream_config("bikes", calibration=[], alarm={"threshold": 10_000},
                      covariate_alarm={"rule": "ville", "alpha": 0.01})
    )
    create_stream(session, config, calibration_rows())
    # A trace whose log threshold would not round-trip through exp(log).
    store(session, trace_points=trace("bikes", "conditional", [0]))
    got = _samples(client)["monitor_threshold"]
    assert got[(("detector", "conditional"), ("stream", "bikes"))] == 10_000.0
    assert got[(("detector", "covariate"), ("stream", "bikes"))] == 100.0


def test_source_kind_is_bounded() -> None:
    assert source_kind("memory:t") == "memory"
    assert source_kind("file:" + "x" * 500) == "file"
    assert source_kind("ftp:/x") == "unknown"


def test_a_revision_never_makes_the_alarm_counter_go_down(
    client: TestClient, session: Session
) -> None:
    """Each version counts under the kind it was stored with: revising an
    ``insufficient_evidence`` alarm adds one under its decided kind and takes nothing away."""
    register(session, "bikes")
    raised = replace(alarm("bikes", 1), detector="conditional", kind="insufficient_evidence")
    store(session, alarms=[raised])
    key = {k: (("detector", "conditional"), ("kind", k), ("stream", "bikes"))
           for k in ("insufficient_evidence", "concept_shift")}
    before = _samples(client)["monitor_alarms_total"]
    store(session, alarms=[replace(raised, kind="concept_shift", revision=2, revised_at=raised.ts)])
    after = _samples(client)["monitor_alarms_total"]
    assert (before[key["insufficient_evidence"]], before[key["concept_shift"]]) == (1, 0)
    assert (after[key["insufficient_evidence"]], after[key["concept_shift"]]) == (1, 1)
    assert _samples(client)["monitor_alarms_unacknowledged"][(("stream", "bikes"),)] == 1
