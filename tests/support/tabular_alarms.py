"""Hand-built alarms of the tabular-data kinds (issue #27), with the evidence of the shared
design: a ``data_quality`` alarm, ``schema_change`` alarms (a new key, an absent declared
feature) and a covariate alarm whose attribution has a categorical feature. The report, the
alert payloads, the API, the CLI and the dashboards are tested on them while the detectors that
raise them are written.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.streams.records import Alarm

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
STREAM = "fraud-eu"


def data_quality_alarm(stream: str = STREAM, index: int = 1480, ts: datetime = T0) -> Alarm:
    """The missing rate of ``area`` rose from 5 % to 25 % at event 1200 (and ``merchant``'s
    unseen-category rate a little)."""
    return Alarm(
        stream, "data_quality", "data_quality", f"e-{index:06d}", index, ts, 1200,
        2.4e4, 1.0e4, "shiryaev_roberts",
        {
            "indicators": [
                {"feature": "area", "rate": "missing", "calibration_rate": 0.05,
                 "rate_after": 0.251, "log_e": 11.7},
                {"feature": "merchant", "rate": "unseen", "calibration_rate": 0.004,
                 "rate_after": 0.031, "log_e": 3.2},
            ],
            "changepoint_index": 1200,
            "events_after": index - 1200 + 1,
        },
    )


def schema_change_alarm(
    stream: str = STREAM, index: int = 310, ts: datetime = T0, *, key: str = "model_version",
    change: str = "new_key",
) -> Alarm:
    """One alarm for a key the calibration never had (or a declared feature absent)."""
    return Alarm(
        stream, "schema", "schema_change", f"e-{index:06d}", index, ts, index - 9,
        10.0, 10.0, "events",
        {"change": change, "key": key, "first_event_index": index - 9, "events": 10},
    )


def categorical_attribution(start: int, n: int = 200) -> dict[str, Any]:
    """An attribution whose first feature is categorical (frequencies before and after), then
    a numeric KS test and a missing-rate test, in the design's evidence format."""
    return {
        "method": "typed_holm_post_alarm",
        "guarantee": "per-feature tests of the window after the alarm against the calibration",
        "window": {"start_index": start, "end_index": start + n - 1, "n": n},
        "features": [
            {"feature": "country", "type": "categorical", "test": "g_test", "statistic": 61.4,
             "p_value": 4.1e-12, "adjusted_p_value": 1.2e-11,
             "frequencies": {
                 "calibration": {"DE": 0.48, "FR": 0.31, "IT": 0.15, "other": 0.04,
                                 "unseen": 0.0, "missing": 0.02},
                 "window": {"DE": 0.22, "FR": 0.30, "IT": 0.14, "other": 0.05,
                            "unseen": 0.27, "missing": 0.02},
             }},
            {"feature": "amount", "type": "numeric", "test": "ks", "statistic": 0.08,
             "p_value": 0.21, "p_adjusted": 0.42},
            {"feature": "area", "type": "missing", "test": "fisher_exact", "statistic": 1.3,
             "p_value": 0.6, "adjusted_p_value": 0.6},
        ],
    }


def categorical_shift_alarm(stream: str = STREAM, index: int = 900,
                            ts: datetime = T0) -> Alarm:
    """A covariate alarm whose attribution ranks the categorical ``country`` first."""
    return Alarm(
        stream, "covariate", "extreme_covariate_shift", f"e-{index:06d}", index, ts, 850,
        1.4e3, 1.0e3, "shiryaev_roberts",
        {"outside_support_fraction": 0.62, "attribution": categorical_attribution(index + 1)},
    )


def tabular_alarms(stream: str = STREAM, t0: datetime = T0) -> list[Alarm]:
    """One alarm of each tabular kind, a minute apart from ``t0`` (the covariate one at event
    1199, where the dashboards' example run raises none)."""
    minute = timedelta(minutes=1)
    return [
        schema_change_alarm(stream, ts=t0),
        schema_change_alarm(stream, 420, t0 + minute, key="amount", change="absent_feature"),
        categorical_shift_alarm(stream, 1199, t0 + 2 * minute),
        data_quality_alarm(stream, ts=t0 + 3 * minute),
    ]
