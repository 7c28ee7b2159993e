"""What each field of an alarm's evidence means, in one line, for the report's evidence table.

The fields are those of docs/detectors.md ("Diagnosis", "Alarm budgets"), docs/tabular.md (the
data-quality and schema detectors) and docs/operations.md (a configuration update).
"""

from __future__ import annotations

__all__ = ["EVIDENCE_MEANING", "evidence_meaning"]

EVIDENCE_MEANING: dict[str, str] = {
    "covariate_statistic": "The covariate monitor's alarm statistic at this alarm: how strongly "
    "the inputs' distribution is shown to have changed.",
    "penalised_fraction": "Share of the events since the changepoint (or in a recent window) "
    "whose density-ratio weight put them outside the reference's support, so their weighted "
    "p-value was penalised; high means inputs the model was never validated on.",
    "penalised_fraction_since_adaptation": "The same share, over every event since the "
    "conditional monitor started re-weighting its reference (WATCH adaptation).",
    "weights_ess": "Effective sample size (Σw)²/Σw² of the reference's density-ratio weights; "
    "far below the reference size, few reference points resemble the new inputs.",
    "adapting": "Whether the conditional monitor was re-weighting its reference to the new "
    "inputs (WATCH adaptation, started by a covariate alarm).",
    "log_statistic": "Natural log of the alarm statistic (the value compared with the "
    "threshold).",
    "log_martingale": "Natural log of the test martingale (the evidence against 'nothing "
    "changed' since the last restart).",
    "log_threshold": "Natural log of the alarm threshold in force at the alarm.",
    "outside_support_fraction": "Share of the events since the changepoint (or in a recent "
    "window) outside the calibration support; from half on, the shift is extreme.",
    "evidence_events": "Events from the changepoint estimate to the alarm that the diagnosis "
    "was decided on (fewer than diagnosis.min_events: insufficient_evidence).",
    "evidence_until": "Index of the event that completed the evidence of a revised alarm.",
    "config_version": "Version of the stream's configuration in force at the alarm.",
    "closed_by_config_version": "The configuration version whose update closed this alarm "
    "before its evidence was complete.",
    "reason": "Why the alarm was closed without a diagnosis.",
    "budget": "The detector's false-alarm budget as configured (P(a false alarm within t) ≤ "
    "t / budget).",
    "budget_seconds": "The false-alarm budget in seconds.",
    "budget_share": "Number of detectors sharing the stream's budget (each gets 1/share of it).",
    "min_threshold": "The lowest threshold the time budget allows.",
    "event_rate": "The event rate (updates per second) the budget's threshold followed at "
    "the alarm.",
    "at_min_threshold": "The threshold was at its floor (min_threshold): the event rate was "
    "too low to set it.",
    "changepoint_index": "The data-quality monitor's changepoint estimate (event index).",
    "events_after": "Events from the changepoint estimate to the alarm.",
    "bonferroni_over": "Number of data-quality indicators the alarm threshold is split across "
    "(Bonferroni).",
    "change": "What changed in the events' schema: a new key, or a declared feature absent.",
    "key": "The key (feature name) that changed.",
    "first_event_index": "Index of the first event with the change.",
    "events": "Events seen with the change when the alarm was raised.",
}


def evidence_meaning(field: str) -> str:
    """The one-line meaning of an evidence field; unknown fields say so rather than guess."""
    return EVIDENCE_MEANING.get(field, "Not documented for this report version.")
