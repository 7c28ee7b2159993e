"""Statistical benchmarks of the detectors and the diagnosis on real bundled data (Shuttle).

Run ``python bench/bench_statistical.py`` (``--json`` for machine-readable output, ``--quick``
for the CI-sized run, ``--workers N`` for processes). Sections:

- validity: Ville's rule at alpha on exchangeable streams (random permutations of held-out
  Shuttle rows; the model was fitted on another split): the share of streams with any alarm for
  the covariate monitor, the CTM and the WCTM with estimated weights (adaptation from t = 0),
  with its bound alpha + 3 standard errors;
- run length: CUSUM and Shiryaev–Roberts on long stationary streams (rebaseline=0, stopped at
  the first alarm or at a horizon): the mean run length against the configured ARL;
- power and diagnosis: WATCH-style scripted shifts (``monitor.ops.datasets``), each after 500
  stable events, with the stream's default detectors (Shiryaev–Roberts, threshold 10 000):
  detection within 500 events, diagnosis of the alarms, and for the benign covariate shift the
  share of seeds with a harmful (conditional) alarm from the WCTM and from the plain CTM.

The statistical tests in ``tests/statistical`` call the same functions with fewer seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.ops.datasets import ScriptedStream, load_shuttle_regression, make_stream
from monitor.streams.detectors import DetectorAlarm, StreamDetectors

N_CALIBRATION = 1000
N_BEFORE = 500
WINDOW = 500
SCENARIOS: dict[str, tuple[tuple[str, int], ...]] = {
    "concept": (("stable", N_BEFORE), ("concept", 1000)),
    "extreme_covariate": (("stable", N_BEFORE), ("extreme_covariate", 1000)),
    "benign_covariate": (("stable", N_BEFORE), ("benign_covariate", 1500)),
}
EXPECTED_KIND = {
    "concept": "concept_shift",
    "extreme_covariate": "extreme_covariate_shift",
    "benign_covariate": "benign_covariate_shift",
}


# ------------------------------------------------------------------------------- helpers
def _stream(
    seed: int, phases: Sequence[tuple[str, int]]
) -> tuple[ScriptedStream, np.ndarray, np.ndarray]:
    data = make_stream(load_shuttle_regression(), phases, N_CALIBRATION, seed)
    cal_scores = np.abs(data.y_calibration - data.pred_calibration)
    return data, cal_scores, np.abs(data.y - data.pred)


def _bound(rate_null: float, n: int) -> float:
    return rate_null + 3.0 * math.sqrt(rate_null * (1.0 - rate_null) / n)


def _parallel(fn: Callable[[int], Any], seeds: Sequence[int], workers: int) -> list[Any]:
    if workers <= 1:
        return [fn(s) for s in seeds]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, seeds, chunksize=max(1, len(seeds) // (4 * workers))))


# ------------------------------------------------------------------------------ validity
def validity_run(seed: int, n_events: int = 2000, alpha: float = 0.05) -> dict[str, bool]:
    """Whether each detector raised any Ville alarm on one exchangeable stream."""
    data, cal_scores, scores = _stream(seed, [("stable", n_events)])
    ville: dict[str, Any] = {"rule": "ville", "alpha": alpha, "rebaseline": 0, "seed": seed}
    covariate = CovariateMonitor("knn", data.X_calibration, **ville)
    covariate.update_many(data.X)
    out = {"covariate": covariate.n_alarms > 0}
    for name, weighted in (("ctm", False), ("wctm", True)):
        monitor = ConditionalMonitor(cal_scores, data.X_calibration, weighted=weighted, **ville)
        monitor.start_adaptation()  # WCTM: estimated weights from t = 0 (a no-op for the CTM)
        for x, s in zip(data.X, scores, strict=True):
            monitor.update(x, s)
            if monitor.n_alarms:
                break
        out[name] = monitor.n_alarms > 0
    return out


def validity(n_streams: int, alpha: float = 0.05, workers: int = 1) -> dict[str, Any]:
    """Share of exchangeable streams with any alarm, per detector, and the bound."""
    runs = _parallel(_Validity(alpha), range(n_streams), workers)
    bound = _bound(alpha, n_streams)
    rates = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    return {"n_streams": n_streams, "alpha": alpha, "bound": bound, "rates": rates}


@dataclass(frozen=True)
class _Validity:
    alpha: float

    def __call__(self, seed: int) -> dict[str, bool]:
        return validity_run(seed, alpha=self.alpha)


# ---------------------------------------------------------------------------- run length
def _first_alarm(
    seed: int, rule: str, threshold: float, horizon: int
) -> dict[str, CovariateMonitor | ConditionalMonitor]:
    """The covariate monitor and the CTM run over one stationary stream of ``horizon`` events,
    the CTM stopped at its first alarm."""
    data, cal_scores, scores = _stream(seed, [("stable", horizon)])
    params: dict[str, Any] = {"rule": rule, "threshold": threshold, "rebaseline": 0, "seed": seed}
    covariate = CovariateMonitor("knn", data.X_calibration, **params)
    covariate.update_many(data.X)
    ctm = ConditionalMonitor(cal_scores, None, weighted=False, **params)
    for s in scores:
        ctm.update(None, s)
        if ctm.n_alarms:
            break
    return {"covariate": covariate, "ctm": ctm}


def run_length_run(
    seed: int, rule: str = "shiryaev_roberts", threshold: float = 100.0, horizon: int = 4000
) -> dict[str, int]:
    """Run length of the CTM and the covariate monitor to the first alarm (capped at horizon)."""
    first = _first_alarm(seed, rule, threshold, horizon)
    return {k: (m.last_alarms[0].index + 1 if m.n_alarms else horizon) for k, m in first.items()}


def early_alarm_run(seed: int, rule: str, threshold: float, horizon: int) -> dict[str, bool]:
    """Whether the CTM and the covariate monitor alarm within the first ``horizon`` events."""
    return {k: m.n_alarms > 0 for k, m in _first_alarm(seed, rule, threshold, horizon).items()}


def run_length(
    n_streams: int, rule: str, threshold: float, horizon: int, workers: int = 1
) -> dict[str, Any]:
    """Mean run length (capped runs count as the horizon: a lower bound of the mean)."""
    runs = _parallel(_RunLength(rule, threshold, horizon), range(n_streams), workers)
    out: dict[str, Any] = {
        "rule": rule,
        "arl": threshold,
        "horizon": horizon,
        "n_streams": n_streams,
    }
    for k in runs[0]:
        lengths = np.array([r[k] for r in runs], dtype=float)
        out[k] = {
            "mean": float(lengths.mean()),
            "se": float(lengths.std(ddof=1) / math.sqrt(lengths.size)),
            "censored": int(np.sum(lengths >= horizon)),
        }
    return out


def early_alarm_rate(
    n_streams: int, rule: str, threshold: float, horizon: int, workers: int = 1
) -> dict[str, float]:
    """Share of stationary streams with an alarm within ``horizon`` events, per detector.

    Under the null P(T ≤ L) ≤ L/c for CUSUM and SR at threshold c (docs/algorithms.md,
    "Average run length"); ``tests/statistical/test_validity.py`` checks it.
    """
    runs = _parallel(_EarlyAlarm(rule, threshold, horizon), range(n_streams), workers)
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


@dataclass(frozen=True)
class _EarlyAlarm:
    rule: str
    threshold: float
    horizon: int

    def __call__(self, seed: int) -> dict[str, bool]:
        return early_alarm_run(seed, self.rule, self.threshold, self.horizon)


@dataclass(frozen=True)
class _RunLength:
    rule: str
    threshold: float
    horizon: int

    def __call__(self, seed: int) -> dict[str, int]:
        return run_length_run(seed, self.rule, self.threshold, self.horizon)


# ----------------------------------------------------------------------- power/diagnosis
@dataclass
class ShiftRun:
    """Alarms of one scripted stream (event indices), for one scenario and seed; an alarm raised
    with too little evidence is listed once, with its revised (decided) kind."""

    scenario: str
    seed: int
    change: int
    alarms: list[dict[str, Any]] = field(default_factory=list)
    ctm_alarms: list[int] = field(default_factory=list)


def shift_run(scenario: str, seed: int, **overrides: Any) -> ShiftRun:
    """Run the default detectors (and a plain CTM beside them) over one scripted stream.

    ``overrides``: ``rule``, ``threshold`` and ``betting`` for every monitor; ``batch_size`` and
    ``penalty_alpha`` for the WCTM; ``conditional_betting`` for the WCTM and the plain CTM
    (their ``betting``, the covariate monitor's unchanged).
    """
    data, cal_scores, scores = _stream(seed, SCENARIOS[scenario])
    params: dict[str, Any] = {"rule": "shiryaev_roberts", "threshold": 10_000.0, "seed": seed}
    params |= {k: v for k, v in overrides.items() if k in ("rule", "threshold", "betting")}
    cond_extra = {k: v for k, v in overrides.items() if k in ("batch_size", "penalty_alpha")}
    ctm_params = dict(params)
    if "conditional_betting" in overrides:
        cond_extra["betting"] = ctm_params["betting"] = overrides["conditional_betting"]
    detectors = StreamDetectors(
        CovariateMonitor("knn", data.X_calibration, **params),
        ConditionalMonitor(cal_scores, data.X_calibration, **(params | cond_extra)),
    )
    ctm = ConditionalMonitor(cal_scores, None, weighted=False, **ctm_params)
    run = ShiftRun(scenario, seed, data.change_points[0])
    for t, (x, s) in enumerate(zip(data.X, scores, strict=True)):
        detectors.update(x, s, event_index=t)
        for a in detectors.new_alarms:  # a revision (decided kind) replaces its first version
            same = [i for i, b in enumerate(run.alarms)
                    if (b["detector"], b["event_index"]) == (a.detector, a.event_index)]
            if same:
                run.alarms[same[0]] = _alarm_json(a)
            else:
                run.alarms.append(_alarm_json(a))
        ctm.update(None, s)
        if ctm.alarm:
            run.ctm_alarms.append(t)
    return run


def _alarm_json(alarm: DetectorAlarm) -> dict[str, Any]:
    return {
        "detector": alarm.detector,
        "kind": alarm.kind,
        "event_index": alarm.event_index,
        "changepoint": alarm.changepoint,
        "evidence": alarm.evidence,
        "revision": alarm.revision,
    }


@dataclass(frozen=True)
class _ShiftJob:
    scenario: str
    overrides: tuple[tuple[str, Any], ...] = ()

    def __call__(self, seed: int) -> ShiftRun:
        return shift_run(self.scenario, seed, **dict(self.overrides))


def summarize(runs: Sequence[ShiftRun]) -> dict[str, Any]:
    """Detection, diagnosis and harmful-alarm shares over the seeds of one scenario."""
    scenario = runs[0].scenario
    expected = EXPECTED_KIND[scenario]
    n = len(runs)
    after = [[a for a in r.alarms if a["event_index"] >= r.change] for r in runs]
    window = [
        [a for a in al if a["event_index"] < r.change + WINDOW]
        for r, al in zip(runs, after, strict=True)
    ]
    detected = [bool(w) for w in window]
    first_ok = [w[0]["kind"] == expected for w in window if w]
    all_ok = [all(a["kind"] == expected for a in w) for w in window if w]
    delays = [w[0]["event_index"] - r.change for r, w in zip(runs, window, strict=True) if w]
    out: dict[str, Any] = {
        "scenario": scenario,
        "n_seeds": n,
        "detected_within_500": float(np.mean(detected)),
        "diagnosis_first_alarm": float(np.mean(first_ok)) if first_ok else math.nan,
        "diagnosis_all_alarms": float(np.mean(all_ok)) if all_ok else math.nan,
        "median_delay": float(np.median(delays)) if delays else math.nan,
        "pre_change_alarm": float(
            np.mean([any(a["event_index"] < r.change for a in r.alarms) for r in runs])
        ),
    }
    for det in ("covariate", "conditional"):
        hits = [[a for a in w if a["detector"] == det] for w in window]
        out[f"{det}_detected_within_500"] = float(np.mean([bool(h) for h in hits]))
        kinds = [h[0]["kind"] == expected for h in hits if h]
        out[f"{det}_diagnosis"] = float(np.mean(kinds)) if kinds else math.nan
    covariate_any = [any(a["detector"] == "covariate" for a in al) for al in after]
    out["covariate_detected_after_change"] = float(np.mean(covariate_any))
    ctm_delays = [
        min(t for t in r.ctm_alarms if t >= r.change) - r.change
        for r in runs
        if any(t >= r.change for t in r.ctm_alarms)
    ]
    out["ctm_median_delay"] = float(np.median(ctm_delays)) if ctm_delays else math.nan
    harmful = [any(a["detector"] == "conditional" for a in al) for al in after]
    out["wctm_harmful_after_change"] = float(np.mean(harmful))
    out["ctm_harmful_after_change"] = float(
        np.mean([any(t >= r.change for t in r.ctm_alarms) for r in runs])
    )
    return out


def power(
    n_seeds: int, scenarios: Sequence[str] = tuple(SCENARIOS), workers: int = 1, **overrides: Any
) -> dict[str, Any]:
    """:func:`summarize` for each scenario over seeds 0..n_seeds-1."""
    job_overrides = tuple(sorted(overrides.items()))
    return {
        s: summarize(_parallel(_ShiftJob(s, job_overrides), range(n_seeds), workers))
        for s in scenarios
    }


# --------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="the CI-sized run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sections", default="validity,run_length,power")
    parser.add_argument("--power-seeds", type=int, help="seeds of the power section "
                        "(default 100; quick 30)")
    parser.add_argument("--scenarios", help="comma-separated subset of the power scenarios")
    parser.add_argument("--conditional-betting", help="betting of the conditional monitors "
                        "(default: the service's, plug_in_power)")
    parser.add_argument("--threshold", type=float, help="Shiryaev–Roberts threshold of every "
                        "monitor in the power section (default 10 000)")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    n_valid, n_rl, n_power = (100, 100, 30) if args.quick else (500, 300, 100)
    n_power = args.power_seeds or n_power
    scenarios = tuple(args.scenarios.split(",")) if args.scenarios else tuple(SCENARIOS)
    overrides: dict[str, Any] = ({"conditional_betting": args.conditional_betting}
                                 if args.conditional_betting else {})
    if args.threshold:
        overrides["threshold"] = args.threshold
    results: dict[str, Any] = {}
    started = time.perf_counter()
    if "validity" in sections:
        results["validity"] = validity(n_valid, workers=args.workers)
    if "run_length" in sections:
        results["run_length"] = [
            run_length(n_rl, rule, 200.0, 4000, workers=args.workers)
            for rule in ("cusum", "shiryaev_roberts")
        ]
    if "power" in sections:
        results["power"] = power(n_power, scenarios, workers=args.workers, **overrides)
    results["seconds"] = time.perf_counter() - started
    print(json.dumps(results, indent=None if args.json else 2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
