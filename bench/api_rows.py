"""Rows and tokens of an API database: shared by the API tests (their fixtures are in
tests/api/conftest.py) and ``bench/bench_api.py --fuzz``, which seeds its database with ``seed``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from monitor.db.queries import create_stream
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.settings import Settings
from monitor.streams.config import StreamConfig
from monitor.streams.records import Alarm, DeadLetter, OODWindow, PerformanceWindow, TracePoint
from monitor.streams.state import Checkpoint

READ_TOKEN = "read-token-0123456789"
WRITE_TOKEN = "write-token-9876543210"
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
WRITE = {"Authorization": f"Bearer {WRITE_TOKEN}"}
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KINDS = ("concept_shift", "extreme_covariate_shift", "benign_covariate_shift")
DETECTORS = ("covariate", "conditional", "ood")


def make_settings(database_url: str, **values: Any) -> Settings:
    """Settings of a test app; ``values`` override the defaults."""
    defaults: dict[str, Any] = {
        "database_url": database_url,
        "api_tokens": f"read:{READ_TOKEN},write:{WRITE_TOKEN}",
        "max_body_bytes": 1_000_000,
        "auto_migrate": False,  # the fixtures migrate each database once
    }
    return Settings(**(defaults | values))


def calibration_rows(n: int = 40, seed: int = 0, d: int = 3) -> list[dict[str, Any]]:
    """Labeled regression rows in the wire format: y = sum(x) + noise, prediction = sum(x)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = x.sum(axis=1) + rng.normal(scale=0.5, size=n)
    return [
        {
            "features": x[i].round(4).tolist(),
            "prediction": float(x[i].sum().round(4)),
            "label": float(y[i].round(4)),
        }
        for i in range(n)
    ]


def stream_config(name: str, **values: Any) -> dict[str, Any]:
    return {"name": name, "task": "regression", "calibration": calibration_rows()} | values


def register(session: Session, name: str) -> None:
    """Store a registered stream directly (without the monitor-building validation), with the
    fixed threshold 10 000 the metrics tests read back."""
    alarm = {"rule": "shiryaev_roberts", "threshold": 10_000}
    config = StreamConfig.model_validate(stream_config(name, calibration=[], alarm=alarm))
    create_stream(session, config, calibration_rows())


def alarm(
    stream: str,
    i: int,
    *,
    kind: str | None = None,
    detector: str | None = None,
    ts: datetime | None = None,
) -> Alarm:
    return Alarm(
        stream=stream,
        detector=detector or DETECTORS[i % 3],
        kind=kind or KINDS[i % 3],
        event_id=f"e-{i:06d}",
        event_index=i,
        ts=ts or T0 + timedelta(seconds=i),
        changepoint=max(0, i - 50),
        statistic=10_000.0 + i,
        threshold=10_000.0,
        rule="shiryaev_roberts",
        evidence={"covariate_statistic": 3.1, "penalised_fraction": 0.0, "weights_ess": 812.4},
    )


def trace(
    stream: str,
    detector: str,
    indexes: Sequence[int],
    log_statistic: Callable[[int], float] = float,
) -> list[TracePoint]:
    return [
        TracePoint(
            stream,
            detector,
            i,
            T0 + timedelta(seconds=i),
            log_martingale=0.01 * i,
            p_value=0.5,
            log_statistic=log_statistic(i),
            log_threshold=9.21,
            weights_ess=None,
        )
        for i in indexes
    ]


def ood_window(stream: str, w: int, flagged: tuple[str, ...] = ()) -> OODWindow:
    return OODWindow(
        stream,
        w,
        256 * w,
        256 * (w + 1),
        T0 + timedelta(minutes=w),
        256,
        len(flagged),
        0.001,
        "eg_bh",
        0.1,
        flagged,
    )


def dead_letter(offset: int, source: str = "http") -> DeadLetter:
    return DeadLetter(source, 0, offset, "not valid JSON", b"{", T0)


def checkpoint(
    stream: str, event_index: int, pending_ts: Sequence[float] = (), last_ts: datetime = T0
) -> Checkpoint:
    """A checkpoint whose label-join part is realistic (the metrics read only that part)."""
    join = {
        "version": 1,
        "predictions": [[f"p{i}", i, t, [0.0], 1.0] for i, t in enumerate(pending_ts)],
        "labels": [["early", 1.0, T0.timestamp()]],
        "counts": [2, 1, 10],
    }
    state = {"version": 1, "event_index": event_index, "last_ts": last_ts.isoformat(), "join": join}
    return Checkpoint(stream, 1, event_index, state)


def store(session: Session, alerts: Sequence[Mapping[str, Any]] = (), **records: Any) -> None:
    """``persist_batch`` of a :class:`Batch` of keyword lists of records, with ``alerts``."""
    persist_batch(session, Batch(**records), alerts=alerts)


def seed(session: Session) -> None:
    """Rows of every kind, on the stream names the OpenAPI examples use."""
    for name in ("bikes", "taxis"):
        register(session, name)
    store(
        session,
        alarms=[alarm("bikes" if i % 2 else "taxis", i) for i in range(60)],
        trace_points=trace("bikes", "covariate", range(0, 3000, 3))
        + trace("bikes", "conditional", range(1, 3000, 7)),
        ood_windows=[ood_window("bikes", w, (f"e-{w}",)) for w in range(12)],
        performance_windows=[
            PerformanceWindow("bikes", w, 500 * w, 500 * w + 499, T0, 500, {"mae": 1.5})
            for w in range(4)
        ],
        dead_letters=[dead_letter(i) for i in range(3)],
        # A stream that is not registered (monitored with `monitor run --config`).
        checkpoints={"legacy": checkpoint("legacy", 3000, pending_ts=[1.7e9])},
    )
