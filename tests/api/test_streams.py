"""/streams: register, list, read; downsampled traces; OOD windows; performance windows."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.api_rows import (
    READ,
    T0,
    WRITE,
    alarm,
    calibration_rows,
    checkpoint,
    ood_window,
    register,
    store,
    stream_config,
    trace,
)
from monitor.api import bodies
from monitor.api.schemas import TracePointPublic
from monitor.db import queries
from monitor.db.models import CalibrationEventRow, StreamRow
from monitor.streams.records import PerformanceWindow

# --- POST /streams ----------------------------------------------------------------------------


def test_create_stream_stores_config_and_calibration(client: TestClient, session: Session) -> None:
    response = client.post("/streams", json=stream_config("bikes"), headers=WRITE)
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/streams/bikes"
    body = response.json()
    assert body["name"] == "bikes" and body["task"] == "regression"
    assert body["calibration_events"] == 40 and body["events"] == 0 and body["alarms"] == 0
    assert body["config"]["score"] == "abs_residual" and "calibration" not in body["config"]
    rows = session.scalars(select(CalibrationEventRow).order_by(CalibrationEventRow.idx)).all()
    assert [r.features for r in rows] == [r["features"] for r in calibration_rows()]
    # The rows are kept once, in calibration_events, not again inside the configuration.
    assert session.get(StreamRow, "bikes").config["calibration"] == []  # type: ignore[union-attr]


def test_a_normalized_residual_stream_keeps_its_calibration_scales(
    client: TestClient, session: Session
) -> None:
    scaled = [r | {"scale": 0.5 + i / 10} for i, r in enumerate(calibration_rows())]
    body = stream_config("bikes") | {"score": "normalized_residual", "calibration": scaled}
    response = client.post("/streams", json=body, headers=WRITE)
    assert response.status_code == 201, response.text
    rows = session.scalars(select(CalibrationEventRow).order_by(CalibrationEventRow.idx)).all()
    assert [r.scale for r in rows] == [r["scale"] for r in scaled]


def test_create_existing_stream_is_409(client: TestClient, session: Session) -> None:
    # The same configuration again is a 200 (tests/api/test_stream_versions.py); another is 409.
    assert client.post("/streams", json=stream_config("bikes"), headers=WRITE).status_code == 201
    response = client.post("/streams", json=stream_config("bikes", seed=1), headers=WRITE)
    assert response.status_code == 409
    assert "already registered" in response.json()["detail"]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"calibration": "/etc/passwd"}, "Input should be a valid list"),
        ({"calibration": calibration_rows(19)}, "at least 20 items"),
        ({"calibration": [{"features": [1.0], "prediction": 1.0}] * 20}, "must carry a label"),
        (
            {"calibration": [{"features": [1.0], "prediction": "x", "label": 1.0}] * 20},
            "calibration row 0",
        ),
        (
            {
                "calibration": [{"features": [1.0, float("nan")], "prediction": 1.0, "label": 1.0}]
                * 20
            },
            "calibration row 0",
        ),
        ({"task": "classification", "score": "abs_residual"}, "use score 'one_minus_prob'"),
        ({"task": "classification", "score": "one_minus_prob"}, "probability-vector"),
        ({"name": "../../etc"}, "pattern"),
        ({"alarm": {"rule": "magic"}}, "ville"),
        ({"colour": "red"}, "Extra inputs are not permitted"),
        ({"score": "normalized_residual"}, "needs a 'scale' on every calibration row"),
    ],
    ids=[
        "server-path",
        "too-few",
        "unlabeled",
        "bad-prediction",
        "nan",
        "task-score",
        "task-calibration",
        "name",
        "rule",
        "extra-field",
        "scale-missing",
    ],
)
def test_invalid_stream_is_422_and_nothing_is_stored(
    client: TestClient, session: Session, change: dict[str, Any], fragment: str
) -> None:
    # json.dumps writes NaN as the (non-standard) token NaN, which the server must refuse.
    body = json.dumps(stream_config("bikes") | change)
    headers = WRITE | {"Content-Type": "application/json"}
    response = client.post("/streams", content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert fragment in response.text
    assert session.scalars(select(StreamRow)).all() == []


# --- GET /streams, /streams/{name} ------------------------------------------------------------


def test_list_and_get_streams_with_progress(client: TestClient, session: Session) -> None:
    register(session, "taxis")
    register(session, "bikes")
    store(
        session,
        alarms=[alarm("bikes", i) for i in range(3)],
        checkpoints={"bikes": checkpoint("bikes", 1234)},
    )
    body = client.get("/streams", headers=READ).json()
    assert body["count"] == 2
    assert [s["name"] for s in body["data"]] == ["bikes", "taxis"]
    bikes, taxis = body["data"]
    assert (bikes["events"], bikes["alarms"], bikes["calibration_events"]) == (1234, 3, 40)
    assert bikes["last_event_at"] is not None
    assert (taxis["events"], taxis["alarms"], taxis["last_event_at"]) == (0, 0, None)
    # one stream's read adds what its checkpoint says of events without ts (null in the list)
    assert (bikes["events_without_ts"], bikes["warnings"]) == (None, None)
    one = client.get("/streams/bikes", headers=READ).json()
    assert one == {**bikes, "events_without_ts": 0, "warnings": []}
    assert client.get("/streams/taxis", headers=READ).json()["events_without_ts"] == 0


def test_unknown_stream_is_404_on_every_stream_route(client: TestClient, session: Session) -> None:
    for suffix in ("", "/trace", "/ood", "/performance"):
        response = client.get(f"/streams/nope{suffix}", headers=READ)
        assert response.status_code == 404
        assert "no stream named 'nope'" in response.json()["detail"]


def test_invalid_stream_name_is_422(client: TestClient, session: Session) -> None:
    assert client.get("/streams/-bad", headers=READ).status_code == 422


# --- GET /streams/{name}/trace ----------------------------------------------------------------


def test_trace_returns_every_point_below_max_points(client: TestClient, session: Session) -> None:
    register(session, "bikes")
    points = trace("bikes", "covariate", range(0, 500, 10)) + trace(
        "bikes", "conditional", range(5, 100, 10)
    )
    store(session, trace_points=points)
    body = client.get("/streams/bikes/trace", headers=READ).json()
    assert body["count"] == body["stored"] == 60 and not body["downsampled"]
    first = body["data"][0]
    assert first == {
        "detector": "covariate",
        "event_index": 0,
        "ts": "2026-11-30T12:00:00Z",
        "log_martingale": 0.0,
        "p_value": 0.5,
        "log_statistic": 0.0,
        "log_threshold": 9.21,
        "weights_ess": None,
    }
    only = client.get(
        "/streams/bikes/trace", params={"detector": "conditional"}, headers=READ
    ).json()
    assert [p["event_index"] for p in only["data"]] == list(range(5, 100, 10))


def test_downsampling_keeps_peaks_and_the_latest_point(
    client: TestClient, session: Session
) -> None:
    register(session, "bikes")
    spike = 4321

    def statistic(i: int) -> float:
        return 50.0 if i == spike else math.sin(i / 300.0)

    store(session, trace_points=trace("bikes", "covariate", range(10_000), statistic))
    body = client.get("/streams/bikes/trace", params={"max_points": 100}, headers=READ).json()
    indexes = [p["event_index"] for p in body["data"]]
    assert body["stored"] == 10_000 and body["downsampled"]
    assert 90 <= body["count"] <= 100
    assert spike in indexes and indexes[-1] == 9999
    assert indexes == sorted(indexes)


def test_trace_time_range(client: TestClient, session: Session) -> None:
    register(session, "bikes")
    store(session, trace_points=trace("bikes", "covariate", range(100)))
    body = client.get(
        "/streams/bikes/trace",
        headers=READ,
        params={"since": "2026-11-30T12:00:10Z", "until": "2026-11-30T12:00:20Z"},
    )
    assert [p["event_index"] for p in body.json()["data"]] == list(range(10, 20))


@pytest.mark.parametrize(
    ("detector", "since", "until", "max_points"),
    [
        (None, None, None, 50),
        (None, None, None, 2),
        ("conditional", None, None, 37),
        (None, T0 + timedelta(seconds=100), T0 + timedelta(seconds=900), 40),
        (None, None, None, 5000),
        ("ood", None, None, 10),
    ],
    ids=["both", "two-points", "one-detector", "range", "all-points", "none-stored"],
)
def test_trace_written_by_postgresql_equals_the_orm_downsampling(
    session: Session,
    detector: str | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
) -> None:
    """The one-statement PostgreSQL trace keeps exactly the points of the ORM downsampling (ties
    between peaks, NULL statistics, whole buckets of NULLs, uneven spans) with the same JSON
    values as pydantic writes for them."""
    register(session, "bikes")
    rng = np.random.default_rng(7)
    levels = rng.integers(0, 4, size=1200).astype(float)  # many ties inside a bucket
    levels[rng.random(1200) < 0.15] = np.nan  # NULLs, ranked last
    levels[600:640] = np.nan  # buckets holding only NULLs
    points = trace("bikes", "covariate", range(1200), lambda i: float(levels[i])) + trace(
        "bikes", "conditional", range(3, 1203, 3), lambda i: float(levels[i % 1200]) * 2.5
    )
    store(session, trace_points=points)
    rows, stored = queries.downsampled_trace(session, "bikes", detector, since, until, max_points)
    theirs = [
        TracePointPublic.model_validate(r, from_attributes=True).model_dump(mode="json")
        for r in rows
    ]
    ours = json.loads(
        bodies.trace_body_sql(session.connection(), "bikes", detector, since, until, max_points)
    )
    assert ours["data"] == theirs
    assert [list(p) for p in ours["data"]] == [list(p) for p in theirs]
    assert (ours["count"], ours["stored"]) == (len(theirs), stored)
    assert ours["downsampled"] == (len(theirs) < stored)
    assert ours["stream"] == "bikes"


@pytest.mark.parametrize(
    "params",
    [
        {"max_points": 1},
        {"detector": "all"},
        {"since": "2026-11-30T13:00Z", "until": "2026-11-30T12:00Z"},
    ],
)
def test_bad_trace_query_is_422(
    client: TestClient, session: Session, params: dict[str, Any]
) -> None:
    register(session, "bikes")
    assert client.get("/streams/bikes/trace", params=params, headers=READ).status_code == 422


# --- GET /streams/{name}/ood ------------------------------------------------------------------


def test_ood_windows_newest_first_with_flags_over_pages(
    client: TestClient, session: Session
) -> None:
    register(session, "bikes")
    windows = [ood_window("bikes", w, tuple(f"e-{w}-{k}" for k in range(w % 3))) for w in range(7)]
    store(session, ood_windows=windows)
    seen, cursor = [], None
    while True:
        params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        body = client.get("/streams/bikes/ood", params=params, headers=READ).json()
        assert body["count"] == 7 and body["stream"] == "bikes"
        seen += body["data"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [w["window_index"] for w in seen] == [6, 5, 4, 3, 2, 1, 0]
    assert seen[1]["flagged_ids"] == ["e-5-0", "e-5-1"] and seen[1]["n_flagged"] == 2
    assert seen[0]["rule"] == "eg_bh" and seen[0]["alpha"] == 0.1 and seen[0]["n"] == 256


@pytest.mark.parametrize("cursor", ["###", "eyJrIjoiYWxhcm1zIiwibyI6ImRlc2MifQ"])
def test_bad_ood_cursor_is_422(client: TestClient, session: Session, cursor: str) -> None:
    register(session, "bikes")
    response = client.get("/streams/bikes/ood", params={"cursor": cursor}, headers=READ)
    assert response.status_code == 422
    assert "cursor" in response.text


# --- GET /streams/{name}/performance ----------------------------------------------------------


def test_performance_windows_latest_oldest_first_in_a_time_range(
    client: TestClient, session: Session
) -> None:
    register(session, "bikes")
    windows = [
        PerformanceWindow("bikes", w, 500 * w, 500 * w + 499, T0 + timedelta(minutes=w), 500,
                          {"mae": 0.5 * w, "rmse": 1.0 + w})
        for w in range(6)
    ]
    store(session, performance_windows=windows)
    body = client.get("/streams/bikes/performance", headers=READ).json()
    assert body["stream"] == "bikes" and body["count"] == 6
    assert body["data"][2] == {"window_index": 2, "start_index": 1000, "end_index": 1499,
                               "ts": "2026-11-30T12:02:00Z", "n": 500,
                               "metrics": {"mae": 1.0, "rmse": 3.0}}
    since = (T0 + timedelta(minutes=1)).isoformat()
    until = (T0 + timedelta(minutes=5)).isoformat()
    body = client.get("/streams/bikes/performance", headers=READ,
                      params={"since": since, "until": until, "limit": 2}).json()
    assert [w["window_index"] for w in body["data"]] == [3, 4]
    assert client.get("/streams/bikes/performance", params={"limit": 0},
                      headers=READ).status_code == 422
