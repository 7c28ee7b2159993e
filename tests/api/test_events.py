"""POST /events: the worker's validation and dead-letter path, state restored from and persisted to
the database, alarms returned and sent to the webhooks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.api_rows import READ, WRITE, calibration_rows, make_settings, stream_config
from monitor.alerts import SEVERITY_OF_KIND
from monitor.alerts.signing import verify
from monitor.api import create_app
from monitor.db.models import (
    CalibrationEventRow,
    CheckpointRow,
    DeadLetterRow,
    SourceOffsetRow,
    TracePointRow,
    WebhookDeliveryRow,
)
from tests.support.api import NOON, VILLE, create, events, post


def test_valid_batch_is_processed_and_persisted(client: TestClient, session: Session) -> None:
    create(client)
    body = post(client, events(50, seed=1))
    assert body == {"accepted": 50, "dead_letters": [], "duplicates": [], "alarms": [],
                    "replayed": False}
    checkpoint = session.get(CheckpointRow, "bikes")
    assert checkpoint is not None and checkpoint.event_index == 50
    assert session.scalars(select(TracePointRow)).first() is not None
    offset = session.get(SourceOffsetRow, ("http", 0))
    assert offset is not None and offset.offset == 50
    assert client.get("/streams/bikes", headers=READ).json()["events"] == 50


def test_bad_items_become_dead_letters_and_never_stop_good_ones(
    client: TestClient, session: Session
) -> None:
    create(client)
    good = events(3, seed=2)
    batch = [
        good[0],
        {"kind": "prediction", "stream": "bikes", "id": "x1", "prediction": 1.0},
        {"kind": "prediction", "stream": "nope", "id": "x2", "features": [1.0], "prediction": 1.0},
        good[1],
        {"kind": "label", "stream": "bikes", "id": "x3", "label": float("nan")},
        {
            "kind": "prediction",
            "stream": "bikes",
            "id": "x4",
            "features": [1.0, 2.0],
            "prediction": 1.0,
        },
        {"kind": "telemetry"},
        good[2],
    ]
    response = client.post(
        "/events", content=json.dumps(batch), headers=WRITE | {"Content-Type": "application/json"}
    )
    assert response.status_code == 202
    body = response.json()
    assert body["accepted"] == 3
    reasons = {d["index"]: d["reason"] for d in body["dead_letters"]}
    assert sorted(reasons) == [1, 2, 4, 5, 6]
    assert "features" in reasons[1]
    assert reasons[2] == "unknown stream 'nope'"
    assert "NaN" in reasons[4]
    assert "kind" in reasons[6]
    stored = session.scalars(select(DeadLetterRow).order_by(DeadLetterRow.offset)).all()
    assert [(d.source, d.partition, d.offset) for d in stored] == [
        ("http", 0, i) for i in (1, 2, 4, 5, 6)
    ]
    assert json.loads(stored[1].payload)["stream"] == "nope"


def test_dead_letters_of_successive_requests_never_collide(
    client: TestClient, session: Session
) -> None:
    create(client)
    for _ in range(3):
        body = post(client, [{"kind": "label", "stream": "ghost", "id": "a", "label": 1}])
        assert body["dead_letters"] == [{"index": 0, "reason": "unknown stream 'ghost'"}]
    offsets = session.scalars(select(DeadLetterRow.offset).order_by(DeadLetterRow.offset)).all()
    assert offsets == [0, 1, 2]


def test_state_survives_across_batches_and_replicas(
    client: TestClient, session: Session, database_url: str
) -> None:
    """One batch of 240 into stream a, or 4 batches of 60 into stream b through two replicas
    taking turns: the database is the source of truth, so the results are identical."""
    create(client, "a")
    create(client, "b")
    stream = events(120, seed=3) + events(120, seed=4, shift=4.0, start=120)
    single = post(client, [e | {"stream": "a"} for e in stream])
    with TestClient(create_app(make_settings(database_url))) as replica:
        split = []
        for k, api in enumerate([client, replica, client, replica]):
            split += post(api, [e | {"stream": "b"} for e in stream[60 * k : 60 * (k + 1)]])[
                "alarms"
            ]
    assert single["alarms"], "the shift must raise an alarm"

    def strip(alarms: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(a["detector"], a["kind"], a["event_index"], a["statistic"]) for a in alarms]

    assert strip(single["alarms"]) == strip(split)
    traces = {
        name: [
            (t.detector, t.event_index, t.log_martingale, t.p_value)
            for t in session.scalars(
                select(TracePointRow)
                .where(TracePointRow.stream == name)
                .order_by(TracePointRow.detector, TracePointRow.event_index)
            )
        ]
        for name in ("a", "b")
    }
    assert traces["a"] == traces["b"]
    assert session.get(CheckpointRow, "a").event_index == 240  # type: ignore[union-attr]
    assert session.get(CheckpointRow, "b").event_index == 240  # type: ignore[union-attr]


def test_alarm_is_returned_listed_and_measured(client: TestClient, session: Session) -> None:
    create(client)
    post(client, events(100, seed=5))
    body = post(client, events(100, seed=6, shift=4.0, start=100))
    (raised,) = [a for a in body["alarms"] if a["kind"] == "concept_shift"]
    assert raised["stream"] == "bikes" and raised["detector"] == "conditional"
    assert raised["event_index"] >= 100 and raised["rule"] == "ville"
    detail = client.get(f"/alarms/{raised['id']}", headers=READ).json()
    versions = detail.pop("revisions")
    assert [v["revision"] for v in versions] == list(range(1, raised["revision"] + 1))
    if raised["revision"] > 1:  # raised with too few events, revised within the batch
        assert versions[0]["kind"] == "insufficient_evidence"
    assert detail == raised
    metrics = client.get("/metrics", headers=READ).text
    assert (
        'monitor_alarms_total{detector="conditional",kind="concept_shift",stream="bikes"}'
        in metrics
    )
    assert 'monitor_events_processed_total{kind="prediction",stream="bikes"} 200.0' in metrics


def test_concurrent_batches_are_serialised(client: TestClient, session: Session) -> None:
    create(client)
    batches = [events(40, seed=10 + k, start=40 * k) for k in range(4)]
    errors: list[BaseException] = []

    def send(batch: list[dict[str, Any]]) -> None:
        try:
            post(client, batch)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(b,)) for b in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert session.get(CheckpointRow, "bikes").event_index == 160  # type: ignore[union-attr]
    assert session.get(SourceOffsetRow, ("http", 0)).offset == 160  # type: ignore[union-attr]


def test_duplicate_prediction_ids_are_dead_letters(client: TestClient, session: Session) -> None:
    create(client)
    batch = events(1, seed=7)
    batch[0].pop("label")
    body = post(client, batch + batch)
    assert body["accepted"] == 1
    assert "duplicate prediction id" in body["dead_letters"][0]["reason"]


def test_integer_ids_epoch_times_and_long_ids_are_ingested(
    client: TestClient, session: Session
) -> None:
    """Issue #31: an integer id is its decimal string (a label with the string joins it), ``ts``
    may be epoch milliseconds or seconds, and ids have no length limit — in calibration rows,
    events, the de-duplication of retried events and the alarms."""
    long = "tenant-7/order/" + "y" * 400
    rows = [{**r, "id": i if i % 2 else f"{long}/c{i}"} for i, r in enumerate(
        calibration_rows(200))]
    body = stream_config("bikes", calibration=rows, alarm=VILLE)
    assert client.post("/streams", json=body, headers=WRITE).status_code == 201
    stored = session.scalars(select(CalibrationEventRow.event_id)
                             .order_by(CalibrationEventRow.idx)).all()
    assert stored[:3] == [f"{long}/c0", "1", f"{long}/c2"]
    post(client, events(100, seed=5))
    shifted = events(100, seed=6, shift=4.0, start=100)
    labels = []
    for i, event in enumerate(shifted):
        event["id"] = 1000 + i if i % 2 else f"{long}/{i}"
        event["ts"] = (NOON + 100 + i) * 1000  # epoch milliseconds, after the first 100 events
        labels.append({"kind": "label", "stream": "bikes", "id": str(event["id"]),
                       "ts": NOON + 100 + i + 0.5, "label": event.pop("label")})
    assert post(client, shifted)["dead_letters"] == []
    answer = post(client, labels)
    assert (answer["accepted"], answer["dead_letters"], answer["duplicates"]) == (100, [], [])
    retried = post(client, labels[:3])  # the ingest keys of long ids tell retries apart
    assert (retried["accepted"], len(retried["duplicates"])) == (0, 3)
    (raised,) = [a for a in answer["alarms"] if a["kind"] == "concept_shift"]
    wire_ids = {str(e["id"]) for e in shifted}
    assert raised["event_id"] in wire_ids
    assert client.get(f"/alarms/{raised['id']}", headers=READ).json()["event_id"] == (
        raised["event_id"])
    assert session.get(CheckpointRow, "bikes").event_index == 200  # type: ignore[union-attr]


# --- webhooks ---------------------------------------------------------------------------------


@pytest.fixture
def hook_receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    received: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(
                (dict(self.headers), self.rfile.read(int(self.headers["Content-Length"])))
            )
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alarms", received
    server.shutdown()
    server.server_close()


def test_alarms_from_http_ingest_reach_the_webhooks(
    database_url: str,
    session: Session,
    hook_receiver: tuple[str, list[tuple[dict[str, str], bytes]]],
) -> None:
    url, received = hook_receiver
    settings = make_settings(database_url, webhook_urls=url, webhook_secret="s3cret")
    with TestClient(create_app(settings)) as client:
        create(client)
        post(client, events(100, seed=5))
        alarms = post(client, events(100, seed=6, shift=4.0, start=100))["alarms"]
    # The alarms were queued in the alert outbox with their batch; leaving the client ran the
    # app's shutdown, which delivers what is due.
    assert alarms and len(received) == len(alarms)
    # Deliveries are POSTed concurrently: find the first alarm's by its idempotency key.
    key = f"{alarms[0]['id']}:{alarms[0]['revision']}"
    (headers, body), = [(h, b) for h, b in received if h["X-Monitor-Idempotency-Key"] == key]
    sent = json.loads(body)
    assert sent.pop("severity") == SEVERITY_OF_KIND[alarms[0]["kind"]].label
    assert sent == {
        k: v for k, v in alarms[0].items()
        if k not in ("acknowledged_at", "acknowledged_by", "fleet", "fleet_rule", "fleet_level")
    }
    assert verify(body, "s3cret", headers["X-Monitor-Signature"], headers["X-Monitor-Timestamp"])
    rows = session.scalars(select(WebhookDeliveryRow)).all()
    assert sorted((r.alarm_id, r.status_code, r.receiver) for r in rows) == sorted(
        (a["id"], 204, "webhook-1") for a in alarms
    )


def test_a_new_configuration_version_is_in_force_for_http_ingest(
    client: TestClient, session: Session
) -> None:
    """PUT /streams/{name} stores version 2: the next POST /events runs it (its alarms carry
    version 2) from the current event index on, as the worker does, instead of going on under
    version 1."""
    create(client)
    post(client, events(60, seed=1))
    changed = stream_config("bikes", calibration=calibration_rows(200),
                            alarm={"rule": "ville", "alpha": 0.02})
    assert client.put("/streams/bikes", json=changed, headers=WRITE).json()["version"] == 2
    alarms = post(client, events(100, seed=6, shift=4.0, start=60))["alarms"]
    assert alarms and {a["evidence"]["config_version"] for a in alarms} == {2}
    session.expire_all()
    checkpoint = session.get(CheckpointRow, "bikes")
    assert checkpoint is not None and checkpoint.event_index == 160  # the counters went on
    assert min(a["event_index"] for a in alarms) >= 60


NAMES = ("zeta", "alpha", "mid")  # an order PostgreSQL's JSONB does not keep


def named(rows: list[dict[str, Any]], stream: str) -> list[dict[str, Any]]:
    """``rows`` with object features (``NAMES``, in that order) for ``stream``."""
    return [r | {"stream": stream, "features": dict(zip(NAMES, r["features"], strict=True))}
            for r in rows]


def test_object_features_keep_their_order_across_replicas(
    client: TestClient, session: Session, database_url: str
) -> None:
    """A stream with object features (in an order JSONB does not keep), fed through two
    replicas taking turns (each restores the stream from the database), gives exactly what the
    same stream with list features gives; a checkpoint taken with the features in another
    order stops the stream: its events are dead letters saying so, never read permuted."""
    lists = stream_config("lists", calibration=calibration_rows(200), alarm=VILLE)
    objects = stream_config("objects", calibration=named(calibration_rows(200), "objects"),
                            alarm=VILLE)
    for body in (lists, objects):
        assert client.post("/streams", json=body, headers=WRITE).status_code == 201
    stream = events(120, seed=3) + events(120, seed=4, shift=4.0, start=120)
    single = post(client, [e | {"stream": "lists"} for e in stream])["alarms"]
    split = []
    with TestClient(create_app(make_settings(database_url))) as replica:
        for k, api in enumerate([client, replica, client, replica]):
            split += post(api, named(stream[60 * k : 60 * (k + 1)], "objects"))["alarms"]
        assert single

        def strip(alarms: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
            return [(a["detector"], a["kind"], a["event_index"], a["statistic"]) for a in alarms]

        assert strip(single) == strip(split)
        checkpoint = session.get(CheckpointRow, "objects")
        assert checkpoint is not None and '["zeta","alpha","mid"]' in checkpoint.state
        checkpoint.state = checkpoint.state.replace('["zeta","alpha","mid"]',
                                                    '["alpha","mid","zeta"]')
        session.commit()
        body = post(replica, named(events(2, seed=5, start=240), "objects"))
    assert body["accepted"] == 0
    reasons = {d["reason"] for d in body["dead_letters"]}
    assert len(reasons) == 1 and reasons.pop().startswith(
        "stream 'objects': its checkpoint was taken with the features in the order (alpha, mid, "
        "zeta), its configuration version 1 reads (zeta, alpha, mid)"
    )
