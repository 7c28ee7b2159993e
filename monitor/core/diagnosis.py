"""Shift diagnosis: which kind of change raised an alarm (docs/detectors.md, "Diagnosis").

Two monitors watch one stream: the covariate monitor (an x-only score) and the conditional
monitor (a weighted CTM on s(x, y)). Each alarm gets a ``kind``:

Covariate alarm
    ``extreme_covariate_shift`` if at least :data:`OUTSIDE_SUPPORT_LEVEL` of the inputs of its
    evidence lie outside the calibration support, else ``benign_covariate_shift``
    (informational). An input is outside when a conformal test against the covariate monitor's
    calibration reference rejects at its ``support_level`` (the x-only p-value, or one
    coordinate beyond the reference range: :class:`~monitor.core.detectors.CovariateMonitor`);
    under no shift that happens with probability ≤ 0.02 per input at the default 0.01. Either
    way the weighted conditional monitor is told to adapt (a no-op when it already adapts from
    the start, the default).
Conditional alarm
    ``extreme_covariate_shift`` if, among the labelled events of its evidence, at least
    :data:`PENALISED_LEVEL` had a penalised weighted p-value (the test point's own normalised
    weight reached ``penalty_alpha``: WATCH, Sec. 4.3) or at least
    :data:`OUTSIDE_SUPPORT_LEVEL` had inputs outside the calibration support (the test above;
    it covers the alarm raised before the density ratio has learned the new inputs — weights
    are refreshed only every micro-batch and the martingale can cross its threshold within
    one — and the fading of the penalty once such inputs have joined the reference); else
    ``concept_shift``.

**Evidence needed.** No kind is decided from fewer than ``min_events`` (default
:data:`MIN_EVIDENCE`) events in the window from the alarm's changepoint estimate to the alarm.
An alarm with a shorter window (an alarm at the stream's first events: under Ville a single
p-value below ``alpha`` is enough to alarm) is raised with the kind
:data:`INSUFFICIENT_EVIDENCE`; the detector's next events (those the re-baseline collects)
complete the window, and once it holds ``min_events`` events the alarm is revised with the kind
decided over ``[changepoint, changepoint + min_events - 1]`` (and the trailing windows ending
there). A revised conditional alarm is decided by the support test alone: a re-baselining
monitor computes no weighted p-value, so no penalised flag, after its alarm.

"The events of its evidence" are those from the alarm's changepoint estimate to the alarm, or
the last k events for the k in [:data:`MIN_RECENT`, :data:`RECENT`] where the share is largest:
the changepoint estimate (the end of the martingale's last minimum, ``docs/algorithms.md``) is
near an abrupt change on most streams but can lie hundreds of events before it, and the
statistic can cross its threshold a few events after the change. Under no shift
half of the last k ≥ 5 inputs being outside has probability below 1e-4 per window.

:class:`monitor.streams.detectors.StreamDetectors` combines both monitors and this
diagnosis for one
stream.
"""

from __future__ import annotations

__all__ = [
    "DIAGNOSIS_KINDS",
    "INSUFFICIENT_EVIDENCE",
    "MIN_EVIDENCE",
    "MIN_RECENT",
    "OUTSIDE_SUPPORT_LEVEL",
    "PENALISED_LEVEL",
    "RECENT",
    "diagnose_conditional",
    "diagnose_covariate",
]

#: The kinds a diagnosis decides. Every alarm kind, with those of the data-quality and schema
#: detectors, is :data:`monitor.streams.records.ALARM_KINDS`.
DIAGNOSIS_KINDS: tuple[str, ...] = (
    "concept_shift",
    "extreme_covariate_shift",
    "benign_covariate_shift",
    "insufficient_evidence",
)

#: Kind of an alarm raised with fewer than ``min_events`` events of evidence (revised later).
INSUFFICIENT_EVIDENCE = "insufficient_evidence"
#: Default ``min_events``: fewest events in [changepoint, alarm] from which a kind is decided.
#: Under no shift an input is outside the support with probability <= 0.02, so a share >= 0.5
#: of 10 events has probability P(Bin(10, 0.02) >= 5) = 7.4e-7, against 0.02 for the
#: single input that decided an alarm at the stream's first event; and an extreme shift (every
#: input outside) still completes 10 events of evidence within 10 events.
MIN_EVIDENCE = 10

#: Share of inputs outside the calibration support that makes a shift "extreme" ("mostly").
OUTSIDE_SUPPORT_LEVEL = 0.5
#: Share of penalised weighted p-values in the evidence that makes a conditional alarm extreme.
PENALISED_LEVEL = 0.5
#: Trailing windows of MIN_RECENT..RECENT events up to the alarm are always examined.
MIN_RECENT = 5
RECENT = 20


def diagnose_covariate(outside_fraction: float, level: float = OUTSIDE_SUPPORT_LEVEL) -> str:
    """Kind of a covariate alarm from the share of post-changepoint inputs outside the support.

    Examples
    --------
    >>> diagnose_covariate(0.9), diagnose_covariate(0.01)
    ('extreme_covariate_shift', 'benign_covariate_shift')
    """
    if outside_fraction >= level:  # nan (no history) compares False: benign
        return "extreme_covariate_shift"
    return "benign_covariate_shift"


def diagnose_conditional(
    penalised_fraction: float,
    outside_fraction: float,
    penalised_level: float = PENALISED_LEVEL,
    outside_level: float = OUTSIDE_SUPPORT_LEVEL,
) -> str:
    """Kind of a conditional alarm from the shares of penalised p-values and of inputs outside
    the calibration support among the events of its evidence: extreme covariate shift when
    either reaches its level, else concept shift.

    Examples
    --------
    >>> diagnose_conditional(penalised_fraction=0.8, outside_fraction=0.0)
    'extreme_covariate_shift'
    >>> diagnose_conditional(penalised_fraction=0.0, outside_fraction=0.02)
    'concept_shift'
    """
    if penalised_fraction >= penalised_level or outside_fraction >= outside_level:
        return "extreme_covariate_shift"  # nan compares False
    return "concept_shift"


