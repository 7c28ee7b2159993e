"""Diagnosis needs evidence: an alarm with fewer than ``min_events`` events from its changepoint
is raised as ``insufficient_evidence`` and revised once the next events complete its evidence,
identically on the per-event and batch paths and across a checkpoint."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.core.diagnosis import INSUFFICIENT_EVIDENCE, MIN_EVIDENCE
from monitor.streams.detectors import DetectorAlarm, StreamDetectors


def _detectors(seed: int, min_events: int = MIN_EVIDENCE) -> StreamDetectors:
    rng = np.random.default_rng(seed)
    X_cal = rng.normal(size=(400, 3))
    scores_cal = np.abs(rng.normal(size=400))
    # Ville at 0.1 with the Simple Mixture (which bets hardest on its first p-values): one
    # residual above every calibration residual is enough to alarm, as in the report.
    ville: dict[str, Any] = {"rule": "ville", "alpha": 0.1, "seed": seed, "rebaseline": 50,
                             "betting": "mixture"}
    return StreamDetectors(
        CovariateMonitor("knn", X_cal, **ville), ConditionalMonitor(scores_cal, X_cal, **ville),
        min_events=min_events,
    )


def _stream(seed: int, outside: bool, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 1000)
    X = rng.normal(size=(n, 3))
    if outside:
        X[:, 0] += 8.0  # every input far outside the calibration support
    scores = np.abs(rng.normal(size=n))
    scores[0] = 50.0  # the stream's first residual is above every calibration residual
    return X, scores


def _per_event(det: StreamDetectors, X: np.ndarray, s: np.ndarray, start: int = 0
               ) -> list[tuple[int, DetectorAlarm]]:
    out = []
    for t in range(start, len(s)):
        det.update(X[t], float(s[t]), t)
        out += [(t, a) for a in det.new_alarms]
    return out


def _conditional(alarms: list[tuple[int, DetectorAlarm]]) -> list[tuple[int, DetectorAlarm]]:
    return [(t, a) for t, a in alarms if a.detector == "conditional"]


@pytest.mark.parametrize(("outside", "decided"), [
    (False, "concept_shift"), (True, "extreme_covariate_shift"),
])
def test_an_alarm_at_the_first_event_waits_for_its_evidence(outside: bool, decided: str) -> None:
    X, s = _stream(0, outside)
    first, revised = _conditional(_per_event(_detectors(0), X, s))[:2]
    assert first[0] == 0 and first[1].event_index == 0 and first[1].changepoint == 0
    assert first[1].kind == INSUFFICIENT_EVIDENCE and first[1].revision == 1
    assert first[1].evidence["evidence_events"] == 1
    # Revised right after the update that completes MIN_EVIDENCE events from the changepoint.
    assert revised[0] == MIN_EVIDENCE - 1
    alarm = revised[1]
    assert (alarm.event_index, alarm.changepoint, alarm.statistic) == (
        0, 0, first[1].statistic
    )
    assert alarm.kind == decided and alarm.revision == 2
    assert alarm.evidence["evidence_events"] == MIN_EVIDENCE
    assert alarm.evidence["evidence_until"] == MIN_EVIDENCE - 1


def test_min_events_one_decides_at_once() -> None:
    X, s = _stream(0, outside=True)
    alarms = _conditional(_per_event(_detectors(0, min_events=1), X, s))
    assert alarms and all(a.revision == 1 for _, a in alarms)
    assert alarms[0][1].kind == "extreme_covariate_shift"


def test_min_events_is_checked() -> None:
    with pytest.raises(ValueError, match="min_events"):
        _detectors(0, min_events=0)


def _batch(det: StreamDetectors, X: np.ndarray, s: np.ndarray, cuts: list[int]
           ) -> list[tuple[int, DetectorAlarm]]:
    """Each event's prediction then its label, in poll batches ending at ``cuts``."""
    out = []
    for a, b in zip([0, *cuts], [*cuts, len(s)], strict=True):
        n = b - a
        result = det.update_batch(
            X[a:b], list(range(a, b)), X[a:b], s[a:b], list(range(a, b)),
            np.arange(1, n + 1, dtype=np.int64),
        )
        out += [(a + i, alarm) for _, i, alarm in result.alarms]
    return out


def _key(alarms: list[tuple[int, DetectorAlarm]]) -> list[Any]:
    return sorted(((t, a.detector, a.revision), repr(a.to_json())) for t, a in alarms)


@pytest.mark.parametrize("cuts", [[], [1], [5, 9], [9, 10, 33]], ids=str)
@pytest.mark.parametrize("outside", [False, True])
def test_batch_path_revises_as_the_per_event_path(cuts: list[int], outside: bool) -> None:
    X, s = _stream(1, outside)
    reference = _per_event(_detectors(1), X, s)
    assert any(a.revision == 2 for _, a in reference)
    assert _key(_batch(_detectors(1), X, s, cuts)) == _key(reference)


@pytest.mark.parametrize("stop", [1, 4, 9])
def test_a_pending_revision_survives_a_checkpoint(stop: int) -> None:
    X, s = _stream(2, outside=True)
    reference = _per_event(_detectors(2), X, s)
    det = _detectors(2)
    before = _per_event(det, X[:stop], s[:stop])
    restored = StreamDetectors.from_state(det.state_dict())
    after = _per_event(restored, X, s, start=stop)
    assert _key(before + after) == _key(reference)


def _short_memory(seed: int) -> StreamDetectors:
    """Flags and event indexes of the last 60 updates only: a batch of hundreds must be split
    (:meth:`StreamDetectors._batch_limit`) for its revisions to read the flags still kept."""
    rng = np.random.default_rng(seed)
    X_cal = rng.normal(size=(400, 3))
    ville: dict[str, Any] = {"rule": "ville", "alpha": 0.1, "seed": seed, "rebaseline": 50}
    return StreamDetectors(
        CovariateMonitor("knn", X_cal, support_history=60, **ville),
        ConditionalMonitor(np.abs(rng.normal(size=400)), X_cal, **ville),
        history=60,
    )


@pytest.mark.parametrize("late", [0, 37], ids=["inline", "late-labels"])
def test_one_long_batch_revises_as_the_per_event_path(late: int) -> None:
    X, s = _stream(3, outside=True, n=300)
    reference = []
    det = _short_memory(3)
    for t in range(300 + late):  # label of event t arrives after prediction t + late
        if t < 300:
            det.update_covariate(X[t], t)
            reference += [(t, a) for a in det.new_alarms]
        if t >= late:
            det.update_conditional(X[t - late], float(s[t - late]), t - late)
            reference += [(t - late, a) for a in det.new_alarms]
    assert any(a.revision == 2 for _, a in reference)
    cov_before = np.minimum(np.arange(300) + late + 1, 300).astype(np.int64)
    result = _short_memory(3).update_batch(
        X, list(range(300)), X, s, list(range(300)), cov_before
    )
    got = [(i, a) for _, i, a in result.alarms]
    assert _key(got) == _key(reference)


def test_min_events_must_fit_in_the_history() -> None:
    with pytest.raises(ValueError, match="history // 2"):
        StreamDetectors(_detectors(0).covariate, _detectors(0).conditional, history=30,
                        min_events=16)
