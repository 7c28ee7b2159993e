"""Records as the store tests write them: alarms and OOD windows at fixed times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from monitor.streams.records import Alarm, OODWindow

T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)


def alarm(i: int, stream: str = "bikes", detector: str = "conditional") -> Alarm:
    return Alarm(
        stream=stream,
        detector=detector,
        kind="concept_shift",
        event_id=f"e-{i}",
        event_index=i,
        ts=T0 + timedelta(seconds=i),
        changepoint=i - 5,
        statistic=10342.7 + i,
        threshold=10_000.0,
        rule="shiryaev_roberts",
        evidence={"weights_ess": 812.4, "penalised_fraction": 0.0},
    )


def window(i: int) -> OODWindow:
    return OODWindow(
        "bikes", i, 256 * i, 256 * (i + 1), T0, 256, 2, 0.003, "eg_bh", 0.1, (f"e-{i}a", f"e-{i}b")
    )
