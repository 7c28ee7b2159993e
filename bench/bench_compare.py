"""Detection side by side on real bundled data: this project's conformal test martingales
against river's drift detectors, all fed the same conditional score streams.

    python bench/bench_compare.py [--json] [--quick] [--seeds N] [--workers N]
        [--task regression|classification] [--scenarios a,b] [--n-after N] [--variants]

Data (``--task``): ``regression`` (default), the Shuttle regression task bundled with river
(:mod:`monitor.ops.datasets`: a gradient boosting model predicts ``f9``; calibration rows and stream
rows are drawn from the held-out pool, never reused), score |y − ŷ|; ``classification``, the
Banana data bundled with river (a gradient boosting classifier fitted on 1 300 rows, the 4 000
others the pool; :func:`classification_stream`), score 1 − p̂(y | x), the service's
classification score ``one_minus_prob``, with the scenarios of :data:`TASKS` (no extreme shift:
a label has no meaning outside the inputs' support).

Scenarios (``FULL`` sizes; ``--quick`` shrinks them):

``stationary``
    2 000 exchangeable events: the share of streams with any alarm (the false-alarm rate; in
    Ville mode it is at most alpha for the martingales) and the run length to the first alarm
    (censored at 2 000) for CUSUM / Shiryaev–Roberts.
``concept_abrupt``
    500 stable events, then 1 000 with p(y | x) changed in half of the input space.
``concept_gradual``
    500 stable events, a 300-event ramp in which each event is drawn from the new concept with
    probability rising linearly from 0 to 1, then the new concept.
``benign_covariate``
    500 stable events, then 1 000 tilted inputs with p(y | x) unchanged (nothing harmful: an
    alarm of a conditional detector here is a false alarm in spirit).
``extreme_covariate``
    500 stable events, then 1 000 inputs outside the calibration support (the model fails).

``--scenarios`` runs a subset, ``--n-after`` changes the events after the change (1 500 makes
the benign stream the one of ``bench_statistical.py``, seed for seed), ``--variants`` adds the
WCTM with plug-in power bettors of single forgetting rates (:data:`VARIANTS`). The output's
``benign_paired`` compares the WCTM's previous (Simple Mixture) and current (plug-in power)
default bets on the same benign streams (:func:`paired_rates`).

Detectors and their settings (one run per stream; the first alarm counts, as with
``rebaseline=0``):

``ctm/<betting>``
    The unweighted conformal test martingale (:class:`ConditionalMonitor`, ``weighted=False``,
    otherwise the service's defaults), for every betting function; Ville at each alpha of
    :data:`ALPHAS`, CUSUM and Shiryaev–Roberts at each threshold of :data:`THRESHOLDS`.
``wctm/<betting>``
    The weighted CTM with the service's defaults, run as :class:`StreamDetectors` runs it:
    ``start_adaptation`` is called when the covariate monitor (1-NN score, composite jumper,
    Shiryaev–Roberts 10 000: the stream defaults) alarms (a no-op when the monitor adapts
    from the start, its default).
``adwin``, ``kswin``, ``page_hinkley``
    river's ``drift.ADWIN``, ``drift.KSWIN`` and ``drift.PageHinkley(mode="up")`` on the same
    scores, each warmed up on the calibration scores (KSWIN on its last ``window_size − 1``,
    its whole memory, so that every KS test is on stream events), at each value of its
    parameter grid (:data:`RIVER_GRID`).

Speed: the p-values a monitor's betting function sees do not depend on the betting function or
the alarm rule, so each family runs one never-alarming monitor per stream to collect them
(:func:`betting_input`); each betting path is then computed once by ``update_many`` and every
alarm setting reads it with the rule's ``update_many`` — the same steps as the monitor's own
``betting.update`` then ``rule.update`` (tested against monitors run event by event). KSWIN's
first detection for every alpha is read from one run's ``p_value`` path (a KS test with
p ≤ alpha ≤ 0.05 on 30 + 30 points always has the statistic > 0.1 that KSWIN also requires;
tested against direct runs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from river import drift

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.core.martingales import (
    BETTING_FUNCTIONS,
    make_alarm_rule,
    make_betting,
)
from monitor.core.scores import one_minus_prob
from monitor.ops.datasets import (
    ClassificationTask,
    RegressionTask,
    _weighted_sample,
    load_banana_classification,
    load_shuttle_regression,
    make_stream,
)

FloatArray = np.ndarray
Outcome = dict[str, int | None]  # setting label -> first alarm (stream index) or None

SCENARIOS: tuple[str, ...] = (
    "stationary", "concept_abrupt", "concept_gradual", "benign_covariate", "extreme_covariate",
)
SHIFT_SCENARIOS: tuple[str, ...] = SCENARIOS[1:]
#: The tasks and their scenarios (a classification label has no meaning outside the support of
#: the inputs, so the classification task has no extreme covariate shift).
TASKS: dict[str, tuple[str, ...]] = {
    "regression": SCENARIOS,
    "classification": ("stationary", "concept_abrupt", "concept_gradual", "benign_covariate"),
}
ALPHAS: tuple[float, ...] = (0.2, 0.1, 0.05, 0.01, 0.001)
THRESHOLDS: tuple[float, ...] = (20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10_000.0)
BETTINGS: tuple[str, ...] = tuple(BETTING_FUNCTIONS)
#: river detector -> (parameter, grid); river's defaults are 0.002, 0.005 and 50.
RIVER_GRID: dict[str, tuple[str, tuple[float, ...]]] = {
    "adwin": ("delta", (0.1, 0.01, 0.002, 1e-4, 1e-6, 1e-8)),
    "kswin": ("alpha", (0.05, 0.01, 0.005, 1e-3, 1e-4, 1e-5)),
    "page_hinkley": ("threshold", (25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0)),
}
#: The setting each detector family ships with (the stream defaults; river's defaults).
DEFAULT_SETTING: dict[str, str] = {
    "ctm": "shiryaev_roberts@10000",
    "wctm": "shiryaev_roberts@10000",
    "adwin": "delta@0.002",
    "kswin": "alpha@0.005",
    "page_hinkley": "threshold@50",
}
#: The covariate monitor that starts the WCTM's adaptation: the stream defaults.
COVARIATE: dict[str, str | float] = {"scorer": "knn", "betting": "composite_jumper",
                                     "rule": "shiryaev_roberts", "threshold": 10_000.0}
#: A Ville level no composite-jumper path can reach within 1 700 steps (log S grows by at most
#: log 1.5 per step), so the p-value-producing monitor never stops (asserted anyway).
_NEVER_ALPHA = 1e-300
DELAY_QUANTILES: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class Sizes:
    """Stream sizes and the number of seeds of a run."""

    seeds: int
    n_calibration: int
    n_stationary: int
    n_before: int
    n_after: int
    ramp: int


FULL = Sizes(seeds=100, n_calibration=1000, n_stationary=2000, n_before=500, n_after=1000,
             ramp=300)
QUICK = Sizes(seeds=2, n_calibration=300, n_stationary=300, n_before=150, n_after=200, ramp=60)


def label(name: str, value: float) -> str:
    """Setting label ``name@value`` with the value in its shortest form (``ville@0.05``)."""
    return f"{name}@{value:g}"


def martingale_settings() -> list[tuple[str, float]]:
    """Every (rule, level) pair: Ville at each alpha, CUSUM and SR at each threshold."""
    return [("ville", a) for a in ALPHAS] + [
        (rule, c) for rule in ("cusum", "shiryaev_roberts") for c in THRESHOLDS
    ]


# ----------------------------------------------------------------------------------- streams
@dataclass(frozen=True)
class Stream:
    """Calibration and stream of one scenario and seed; ``change`` is None when stationary."""

    scenario: str
    seed: int
    cal_scores: FloatArray
    cal_X: FloatArray
    scores: FloatArray
    X: FloatArray
    change: int | None


def scenario_phases(scenario: str, sizes: Sizes) -> list[tuple[str, int]]:
    """The ``(kind, n_events)`` phases of ``scenario`` (the gradual ramp's rows are reordered
    afterwards by :func:`gradual_rows`)."""
    n0, n1 = sizes.n_before, sizes.n_after
    return {
        "stationary": [("stable", sizes.n_stationary)],
        "concept_abrupt": [("stable", n0), ("concept", n1)],
        "concept_gradual": [("stable", n0 + sizes.ramp), ("concept", n1)],
        "benign_covariate": [("stable", n0), ("benign_covariate", n1)],
        "extreme_covariate": [("stable", n0), ("extreme_covariate", n1)],
    }[scenario]


def scenario_stream(task: RegressionTask, scenario: str, seed: int, sizes: Sizes) -> Stream:
    """The calibration set and the scored stream of ``scenario`` for ``seed``."""
    n0, n1 = sizes.n_before, sizes.n_after
    phases = scenario_phases(scenario, sizes)
    data = make_stream(task, phases, sizes.n_calibration, seed)
    X, residual = data.X, np.abs(data.y - data.pred)
    if scenario == "concept_gradual":
        rows = gradual_rows(n0, sizes.ramp, n1, seed)
        X, residual = X[rows], residual[rows]
    cal_scores = np.abs(data.y_calibration - data.pred_calibration)
    change = None if scenario == "stationary" else n0
    return Stream(scenario, seed, cal_scores, data.X_calibration, residual, X, change)


#: Classification shifts (Banana, :func:`monitor.ops.datasets.load_banana_classification`): the
#: concept region is ``x1 >= median`` of the calibration rows; the benign tilt is
#: exp(λ·g(x)), g = x2 standardised on the calibration rows (the model errs more where x2 is
#: large, so the unweighted CTM sees worse scores), λ = :data:`CLASSIFICATION_TILT`.
CLASSIFICATION_TILT = 1.0


def classification_stream(task: ClassificationTask, scenario: str, seed: int,
                          sizes: Sizes) -> Stream:
    """The calibration set and the scored stream of ``scenario`` for ``seed`` on a
    classification task; the score of an event is 1 − p̂(y | x) (``one_minus_prob``, the
    service's classification score).

    Calibration rows are drawn uniformly from the pool, stream rows from the rest, none used
    twice. ``stable`` rows are drawn uniformly (exchangeable with the calibration rows);
    ``concept`` rows too, but in the region ``x1 >= median`` each label is replaced by the label
    of a random pool row of the region (p(x) unchanged, p(y | x) = p(y | region) there);
    ``benign_covariate`` rows are a weighted sample without replacement ∝ exp(λ·g(x)) (real
    rows: p(y | x) and the support are unchanged).

    Examples
    --------
    >>> task = load_banana_classification()
    >>> s = classification_stream(task, "concept_abrupt", 0, QUICK)
    >>> s.scores.size, s.change, s.cal_scores.size, s.X.shape[1]
    (350, 150, 300, 2)
    """
    phases = scenario_phases(scenario, sizes)
    n_pool = task.y.size
    total = sizes.n_calibration + sum(n for _, n in phases)
    if "extreme_covariate" in dict(phases) or total > n_pool:
        raise ValueError(f"classification scenario {scenario!r} needs {total} rows of {n_pool}"
                         " (and no extreme shift)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_pool)
    cal, free = order[:sizes.n_calibration], order[sizes.n_calibration:]
    x1, x2 = task.X[:, task.column("x1")], task.X[:, task.column("x2")]
    region = x1 >= np.median(x1[cal])
    log_tilt = CLASSIFICATION_TILT * (x2 - x2[cal].mean()) / x2[cal].std()
    used = np.zeros(n_pool, dtype=bool)
    used[cal] = True
    rows_parts, label_parts = [], []
    for kind, n in phases:
        candidates = free[~used[free]]
        if kind == "benign_covariate":
            rows = _weighted_sample(candidates, log_tilt[candidates], n, rng)
        else:
            rows = rng.choice(candidates, size=n, replace=False)
        used[rows] = True
        y = task.y[rows].copy()
        if kind == "concept":
            inside = region[rows]
            y[inside] = task.y[rng.choice(np.flatnonzero(region), size=int(inside.sum()))]
        rows_parts.append(rows)
        label_parts.append(y)
    rows, y = np.concatenate(rows_parts), np.concatenate(label_parts)
    X, scores = task.X[rows], one_minus_prob(task.proba[rows], y)
    n0 = sizes.n_before
    if scenario == "concept_gradual":
        order_rows = gradual_rows(n0, sizes.ramp, sizes.n_after, seed)
        X, scores = X[order_rows], scores[order_rows]
    cal_scores = one_minus_prob(task.proba[cal], task.y[cal])
    change = None if scenario == "stationary" else n0
    return Stream(scenario, seed, cal_scores, task.X[cal].copy(), scores, X.copy(), change)


def gradual_rows(n_before: int, ramp: int, n_after: int, seed: int) -> np.ndarray:
    """Row order of a gradual shift built from ``n_before + ramp`` old rows then ``n_after``
    new rows: the first ``n_before`` old rows, then a ramp in which the i-th event is the next
    new row with probability (i + 1)/(ramp + 1) (else the next old row), then new rows only;
    ``n_before + n_after`` rows in all, none repeated.

    Examples
    --------
    >>> rows = gradual_rows(3, 4, 5, seed=0)
    >>> rows.size, bool(np.unique(rows).size == rows.size), rows[:3].tolist()
    (8, True, [0, 1, 2])
    """
    if n_after < ramp:
        raise ValueError(f"the ramp ({ramp}) must not be longer than the new regime ({n_after})")
    rng = np.random.default_rng([seed, 1])
    take_new = rng.uniform(size=ramp) < np.arange(1, ramp + 1) / (ramp + 1)
    old, new = iter(range(n_before, n_before + ramp)), iter(range(n_before + ramp, 10**12))
    ramp_rows = [next(new) if t else next(old) for t in take_new]
    tail = [next(new) for _ in range(n_after - ramp)]
    return np.array([*range(n_before), *ramp_rows, *tail], dtype=np.int64)


# ------------------------------------------------------------------------------ martingales
def covariate_alarm(stream: Stream) -> int | None:
    """Index of the covariate monitor's first alarm (the WCTM's adaptation start A)."""
    monitor = CovariateMonitor(str(COVARIATE["scorer"]), stream.cal_X,
                               betting=str(COVARIATE["betting"]), rule=str(COVARIATE["rule"]),
                               threshold=float(COVARIATE["threshold"]), rebaseline=0,
                               seed=stream.seed)
    monitor.update_many(stream.X)
    return monitor.last_alarms[0].index if monitor.n_alarms else None


@dataclass(frozen=True)
class BettingInput:
    """What a conditional monitor's betting function sees on one stream: its betting p-values
    and the index where its martingale restarted (adaptation), if it did."""

    ps: FloatArray
    restart: int | None


def betting_input(stream: Stream, weighted: bool, adaptation: int | None = None) -> BettingInput:
    """Run one never-alarming :class:`ConditionalMonitor` (the service's defaults, composite
    jumper, Ville at alpha = 1e-300) over the stream and collect its p-values.

    The WCTM gets ``start_adaptation`` before the update of event ``adaptation``, as
    :class:`StreamDetectors` does on a covariate alarm; a restart shows as ``log_martingale``
    falling to exactly 0. Self-check on every stream: betting on the collected p-values must
    reproduce the monitor's own ``log_martingale`` path bit for bit (else the monitor bets on
    something else than its ``p_value`` and this benchmark must be updated: it raises).
    """
    params: dict[str, Any] = {"weighted": weighted, "betting": "composite_jumper",
                              "rule": "ville", "alpha": _NEVER_ALPHA, "rebaseline": 0,
                              "seed": stream.seed}
    monitor = ConditionalMonitor(stream.cal_scores, stream.cal_X if weighted else None, **params)
    ps, log_s, restart = np.empty(stream.scores.size), np.empty(stream.scores.size), None
    for t, (x, s) in enumerate(zip(stream.X, stream.scores.tolist(), strict=True)):
        if weighted and t == adaptation:
            before = monitor.log_martingale
            monitor.start_adaptation()
            restart = t if before != 0.0 and monitor.log_martingale == 0.0 else restart
        monitor.update(x if weighted else None, s)
        ps[t], log_s[t] = monitor.p_value, monitor.log_martingale
    if monitor.n_alarms:
        raise RuntimeError("the p-value monitor alarmed: its stream is longer than 1 700 events")
    given = BettingInput(ps, restart)
    replay = np.concatenate([p for _, p in betting_segments(ps, "composite_jumper", restart)])
    if not np.array_equal(replay, log_s):
        raise RuntimeError("ConditionalMonitor's martingale is not a bet on its p_value any "
                           "more: update bench_compare.betting_input")
    return given


def betting_segments(
    ps: FloatArray, betting: str, restart: int | None, params: dict[str, Any] | None = None
) -> list[tuple[int, FloatArray]]:
    """(offset, log S path) of each segment: one, or two when the martingale restarts."""
    cuts = [0] if restart is None or restart == 0 else [0, restart]
    bounds = [*cuts, ps.size]
    return [(lo, make_betting(betting, **(params or {})).update_many(ps[lo:hi]))
            for lo, hi in itertools.pairwise(bounds) if hi > lo]


def first_alarm(segments: Sequence[tuple[int, FloatArray]], rule: str, level: float) -> int | None:
    """First alarm of ``rule`` at ``level`` (alpha for Ville, else threshold) over the paths,
    a fresh rule per segment (the rule restarts with the martingale)."""
    for offset, path in segments:
        hit = make_alarm_rule(rule, threshold=level, alpha=level).update_many(path)
        if hit is not None:
            return offset + hit
    return None


def martingale_first_alarms(given: BettingInput, betting: str,
                            params: dict[str, Any] | None = None,
                            extra: Sequence[tuple[str, float]] = ()) -> Outcome:
    segments = betting_segments(given.ps, betting, given.restart, params)
    return {label(rule, level): first_alarm(segments, rule, level)
            for rule, level in [*martingale_settings(), *extra]}


# ------------------------------------------------------------------------------------ river
def _first_detection(detector: Any, warmup: Iterable[float], scores: Iterable[float]) -> int | None:
    for v in warmup:
        detector.update(v)
    for t, v in enumerate(scores):
        detector.update(v)
        if detector.drift_detected:
            return t
    return None


def kswin_first_alarms(stream: Stream, alphas: Sequence[float]) -> Outcome:
    """KSWIN's first detection for every alpha from one run at the smallest alpha.

    Before its first detection KSWIN's state does not depend on alpha, and a detection at
    alpha is a step with p ≤ alpha (and a KS statistic > 0.1, implied for p ≤ 0.05 with
    30 + 30 points); the run stops at the smallest alpha's detection, after every other one.
    """
    detector = drift.KSWIN(alpha=min(alphas), seed=stream.seed)
    for v in stream.cal_scores[-(detector.window_size - 1):].tolist():
        detector.update(v)
    out: Outcome = {label("alpha", a): None for a in alphas}
    for t, v in enumerate(stream.scores.tolist()):
        detector.update(v)
        for a in alphas:
            if out[label("alpha", a)] is None and detector.p_value <= a:
                out[label("alpha", a)] = t
        if detector.drift_detected:
            break
    return out


def river_first_alarms(stream: Stream) -> dict[str, Outcome]:
    """First detection of each river detector at each grid value."""
    warm, scores = stream.cal_scores.tolist(), stream.scores.tolist()
    makers: dict[str, Callable[[float], Any]] = {
        "adwin": lambda v: drift.ADWIN(delta=v),
        "page_hinkley": lambda v: drift.PageHinkley(threshold=v, mode="up"),
    }
    out = {name: {label(RIVER_GRID[name][0], v): _first_detection(make(v), warm, scores)
                  for v in RIVER_GRID[name][1]}
           for name, make in makers.items()}
    out["kswin"] = kswin_first_alarms(stream, RIVER_GRID["kswin"][1])
    return out


# ------------------------------------------------------------------------------------- runs
#: Plug-in power bettors with one forgetting rate each (and the default mixture without its
#: fastest one), run with ``--variants`` on the WCTM's p-values: which forgetting rate raises
#: the benign shift's harmful alarms, and what dropping it costs on the concept shifts.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "plug_in_power[0.02]": ("plug_in_power", {"forgets": (0.02,)}),
    "plug_in_power[0.1]": ("plug_in_power", {"forgets": (0.1,)}),
    "plug_in_power[0.3]": ("plug_in_power", {"forgets": (0.3,)}),
    "plug_in_power[0.02,0.1]": ("plug_in_power", {"forgets": (0.02, 0.1)}),
    "plug_in_power[0.01,0.05]": ("plug_in_power", {"forgets": (0.01, 0.05)}),
}
#: Shiryaev–Roberts thresholds beyond the grid, for the WCTMs with ``--variants``: the ARL at
#: which a bet's stationary alarm rate within 2 000 events comes down to a given level.
VARIANT_SETTINGS: tuple[tuple[str, float], ...] = tuple(
    ("shiryaev_roberts", c) for c in (20_000.0, 50_000.0, 100_000.0))


@dataclass(frozen=True)
class Job:
    """One stream: scenario, seed, sizes and task (picklable for the process pool)."""

    scenario: str
    seed: int
    sizes: Sizes
    task: str = "regression"
    variants: bool = False

    def __call__(self) -> dict[str, Any]:
        return run_stream(self.scenario, self.seed, self.sizes, self.task, self.variants)


def make_scenario_stream(task: str, scenario: str, seed: int, sizes: Sizes) -> Stream:
    """The stream of ``scenario`` on the Shuttle regression or the Banana classification task."""
    if task == "classification":
        return classification_stream(load_banana_classification(), scenario, seed, sizes)
    if task == "regression":
        return scenario_stream(load_shuttle_regression(), scenario, seed, sizes)
    raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")


def run_stream(scenario: str, seed: int, sizes: Sizes, task: str = "regression",
               variants: bool = False) -> dict[str, Any]:
    """First alarms of every detector and setting on one stream."""
    stream = make_scenario_stream(task, scenario, seed, sizes)
    adaptation = covariate_alarm(stream)
    inputs = {"ctm": betting_input(stream, False), "wctm": betting_input(stream, True, adaptation)}
    first: dict[str, Outcome] = {}
    extra = VARIANT_SETTINGS if variants else ()
    for betting in BETTINGS:
        for family, given in inputs.items():
            first[f"{family}/{betting}"] = martingale_first_alarms(
                given, betting, extra=extra if family == "wctm" else ())
    if variants:
        for name, (betting, params) in VARIANTS.items():
            first[f"wctm/{name}"] = martingale_first_alarms(inputs["wctm"], betting, params,
                                                            extra)
    first |= river_first_alarms(stream)
    return {"scenario": scenario, "seed": seed, "change": stream.change,
            "length": int(stream.scores.size), "adaptation": adaptation,
            "restart": inputs["wctm"].restart, "first": first}


def _call(job: Job) -> dict[str, Any]:
    return job()


def run_jobs(jobs: Sequence[Job], workers: int) -> list[dict[str, Any]]:
    """Every job, in a process pool when ``workers`` > 1 (results in job order)."""
    if workers <= 1:
        return [job() for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_call, jobs, chunksize=max(1, len(jobs) // (8 * workers))))


# -------------------------------------------------------------------------------- summaries
def _round(x: float, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def stationary_summary(firsts: Sequence[int | None], horizon: int) -> dict[str, Any]:
    """Share of streams with any alarm (± SE) and the run length censored at ``horizon``.

    Examples
    --------
    >>> stationary_summary([None, 5, None, None], horizon=10)["alarm_rate"]
    0.25
    """
    n = len(firsts)
    alarmed = np.array([f is not None for f in firsts], dtype=float)
    lengths = np.array([horizon if f is None else f + 1 for f in firsts], dtype=float)
    rate = float(alarmed.mean())
    return {
        "n": n,
        "alarm_rate": _round(rate),
        "alarm_rate_se": _round(math.sqrt(rate * (1 - rate) / n)),
        "run_length_mean": _round(float(lengths.mean()), 1),
        "run_length_median": _round(float(np.median(lengths)), 1),
        "censored": int(n - alarmed.sum()),
    }


def shift_summary(firsts: Sequence[int | None], change: int, horizon: int) -> dict[str, Any]:
    """False alarms before the change, detections after it and the delay distribution.

    ``delay_mean_censored`` averages the delays of the streams without a false alarm before
    the change, counting a miss as ``horizon`` (the events after the change).

    Examples
    --------
    >>> s = shift_summary([None, 3, 12, 20], change=10, horizon=30)
    >>> s["false_alarm_before"], s["detected"], s["delay_median"], s["delay_mean_censored"]
    (0.25, 0.5, 6.0, 14.0)
    """
    n = len(firsts)
    delays = np.array([f - change for f in firsts if f is not None and f >= change], dtype=float)
    misses = sum(f is None for f in firsts)
    censored = np.concatenate([delays, np.full(misses, float(horizon))])
    out: dict[str, Any] = {
        "n": n,
        "false_alarm_before": _round(sum(f is not None and f < change for f in firsts) / n),
        "detected": _round(delays.size / n),
        "delay_mean": _round(float(delays.mean()), 1) if delays.size else None,
        "delay_se": _round(float(delays.std(ddof=1) / math.sqrt(delays.size)), 1)
        if delays.size > 1 else None,
        "delay_mean_censored": _round(float(censored.mean()), 1) if censored.size else None,
    }
    for q in DELAY_QUANTILES:
        value = float(np.quantile(delays, q)) if delays.size else math.nan
        out[f"delay_p{int(q * 100)}"] = _round(value, 1)
    out["delay_median"] = out["delay_p50"]
    return out


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """scenario -> detector -> setting -> summary over the seeds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for scenario in dict.fromkeys(r["scenario"] for r in runs):
        group = [r for r in runs if r["scenario"] == scenario]
        out[scenario] = {
            det: {setting: _summary_of(group, det, setting) for setting in settings}
            for det, settings in group[0]["first"].items()
        }
    return out


def _summary_of(group: Sequence[dict[str, Any]], detector: str, setting: str) -> dict[str, Any]:
    firsts = [r["first"][detector][setting] for r in group]
    change, length = group[0]["change"], group[0]["length"]
    if change is None:
        return stationary_summary(firsts, length)
    return shift_summary(firsts, change, length - change)


def adaptation_summary(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per scenario: the share of streams where the covariate monitor alarmed (and the WCTM's
    martingale restarted because of it) and the median alarm index relative to the change."""
    out = {}
    for scenario in dict.fromkeys(r["scenario"] for r in runs):
        group = [r for r in runs if r["scenario"] == scenario]
        starts = [r["adaptation"] for r in group if r["adaptation"] is not None]
        change = group[0]["change"] or 0
        out[scenario] = {
            "covariate_alarm": _round(len(starts) / len(group)),
            "restarted": _round(sum(r["restart"] is not None for r in group) / len(group)),
            "median_start_after_change": _round(float(np.median(starts)) - change, 1)
            if starts else None,
        }
    return out


def ville_validity(summary: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Ville-mode false-alarm rates of the martingales on stationary streams against alpha
    (+ 3 standard errors of a Bernoulli(alpha) mean, the Monte Carlo tolerance)."""
    rows = []
    for det, settings in summary.get("stationary", {}).items():
        for alpha in ALPHAS:
            stats = settings.get(label("ville", alpha))
            if stats is None:
                continue
            bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / stats["n"])
            rows.append({"detector": det, "alpha": alpha, "alarm_rate": stats["alarm_rate"],
                         "bound": _round(bound), "ok": stats["alarm_rate"] <= bound})
    return rows


#: False-alarm level of the matched comparison and the shifts whose delays it minimises.
MATCHED_LEVEL = 0.05
HARMFUL_SCENARIOS: tuple[str, ...] = ("concept_abrupt", "concept_gradual", "extreme_covariate")


def matched_settings(result: dict[str, Any], level: float = MATCHED_LEVEL) -> dict[str, Any]:
    """Per detector, the setting with stationary alarm rate ≤ ``level`` that minimises the mean
    censored delay over :data:`HARMFUL_SCENARIOS` (None when no setting is that quiet)."""
    summary = result["summary"]
    out: dict[str, Any] = {}
    for det, settings in summary.get("stationary", {}).items():
        best: tuple[float, float, str] | None = None
        for setting, stats in settings.items():
            if stats["alarm_rate"] > level:
                continue
            delays = [summary[sc][det][setting]["delay_mean_censored"] for sc in HARMFUL_SCENARIOS
                      if sc in summary]
            cost = (math.inf if not delays or any(d is None for d in delays)
                    else float(np.mean(delays)))
            key = (cost, stats["alarm_rate"], setting)
            best = key if best is None or key < best else best
        out[det] = None if best is None else {"setting": best[2], "alarm_rate": best[1],
                                              "mean_delay": _round(best[0], 1)}
    return out


#: The reference of the ADWIN-matched comparison: river's ADWIN at its default delta.
ADWIN_DEFAULT = ("adwin", "delta@0.002")
CONCEPT_SCENARIOS: tuple[str, ...] = ("concept_abrupt", "concept_gradual")


def adwin_matched(result: dict[str, Any]) -> dict[str, Any]:
    """Per martingale detector, its setting with the smallest mean of the median delays on the
    concept shifts among those whose stationary alarm rate is no higher than ADWIN's at its
    default on the same streams; with ADWIN's own figures as ``"adwin"``."""
    summary = result["summary"]
    if "stationary" not in summary:
        return {}
    limit = summary["stationary"][ADWIN_DEFAULT[0]][ADWIN_DEFAULT[1]]["alarm_rate"]
    out: dict[str, Any] = {"adwin": _matched_row(summary, *ADWIN_DEFAULT)}
    for det, settings in summary["stationary"].items():
        if not det.startswith(("ctm/", "wctm/")):
            continue
        rows = [_matched_row(summary, det, setting) for setting, stats in settings.items()
                if stats["alarm_rate"] <= limit]
        rows = [r for r in rows if r["concept_delay"] is not None]
        out[det] = min(rows, key=lambda r: (r["concept_delay"], r["alarm_rate"]), default=None)
    return out


def _matched_row(summary: dict[str, Any], det: str, setting: str) -> dict[str, Any]:
    row: dict[str, Any] = {"setting": setting,
                           "alarm_rate": summary["stationary"][det][setting]["alarm_rate"]}
    for sc in SHIFT_SCENARIOS:
        if sc in summary:
            stats = summary[sc][det][setting]
            row[sc] = {k: stats[k] for k in ("delay_median", "detected", "false_alarm_before")}
    medians = [row[sc]["delay_median"] for sc in CONCEPT_SCENARIOS if sc in row]
    row["concept_delay"] = (None if not medians or any(m is None for m in medians)
                            else float(np.mean(medians)))
    return row


#: The paired comparison of the benign shift: the previous and the current default bet of the
#: WCTM at the stream default (Shiryaev–Roberts 10 000) on the same streams.
PAIRED = ("wctm/mixture", "wctm/plug_in_power", DEFAULT_SETTING["wctm"])


def paired_rates(runs: Sequence[dict[str, Any]], scenario: str = "benign_covariate",
                 pair: tuple[str, str, str] = PAIRED) -> dict[str, Any] | None:
    """Share of ``scenario`` streams with an alarm after the change for detectors ``a`` and
    ``b`` of ``pair`` at its setting, on the same streams: each rate ± its binomial SE, the
    difference b − a ± its paired SE (SD of the per-stream differences / √n), the discordant
    counts and the exact two-sided sign-test (McNemar) p-value on them.

    Examples
    --------
    >>> runs = [{"scenario": "s", "change": 5, "first": {"a": {"x": f}, "b": {"x": g}}}
    ...         for f, g in [(None, 7), (6, 8), (None, None), (2, None)]]
    >>> r = paired_rates(runs, "s", ("a", "b", "x"))
    >>> r["a"]["rate"], r["b"]["rate"], r["b_only"], r["a_only"], r["difference"]
    (0.25, 0.5, 1, 0, 0.25)
    """
    group = [r for r in runs if r["scenario"] == scenario]
    if not group:
        return None
    a, b, setting = pair
    n, change = len(group), group[0]["change"]

    def after(r: dict[str, Any], det: str) -> bool:
        first = r["first"][det][setting]
        return first is not None and first >= change

    hits = np.array([[after(r, a), after(r, b)] for r in group], dtype=float)
    diff = hits[:, 1] - hits[:, 0]
    a_only, b_only = int((diff < 0).sum()), int((diff > 0).sum())
    seeds = [r.get("seed") for r in group]
    k, m = min(a_only, b_only), a_only + b_only
    p_sign = min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2**m) if m else 1.0
    rates = {}
    for name, col in ((a, 0), (b, 1)):
        rate = float(hits[:, col].mean())
        rates[name] = {"rate": _round(rate), "se": _round(math.sqrt(rate * (1 - rate) / n))}
    return {"scenario": scenario, "setting": setting, "n": n, "a": rates[a] | {"detector": a},
            "b": rates[b] | {"detector": b}, "difference": _round(float(diff.mean())),
            "difference_se": _round(float(diff.std(ddof=1) / math.sqrt(n))) if n > 1 else None,
            "a_only": a_only, "b_only": b_only, "sign_test_p": _round(p_sign),
            "seeds_a": [sd for sd, h in zip(seeds, hits[:, 0], strict=True) if h],
            "seeds_b": [sd for sd, h in zip(seeds, hits[:, 1], strict=True) if h]}


# ------------------------------------------------------------------------------------ paths
PATH_PHASES: tuple[tuple[str, int], ...] = (
    ("stable", 500), ("benign_covariate", 500), ("benign_covariate+concept", 500),
)


def martingale_paths(seed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    """log10 S of the CTM and the WCTM with every betting function on one shifted stream
    (stable → benign covariate → benign covariate + concept), without alarms; the WCTM
    restarts where its monitor restarts (at the covariate alarm, when it waits for it)."""
    phases = [(kind, max(20, int(n * scale))) for kind, n in PATH_PHASES]
    data = make_stream(load_shuttle_regression(), phases, max(100, int(1000 * scale)), seed)
    stream = Stream("paths", seed, np.abs(data.y_calibration - data.pred_calibration),
                    data.X_calibration, np.abs(data.y - data.pred), data.X, None)
    adaptation = covariate_alarm(stream)
    inputs = {"ctm": betting_input(stream, False), "wctm": betting_input(stream, True, adaptation)}
    paths = {}
    for family, given in inputs.items():
        for betting in BETTINGS:
            segments = betting_segments(given.ps, betting, given.restart)
            log_s = np.concatenate([p for _, p in segments])
            paths[f"{family}/{betting}"] = np.round(log_s / math.log(10), 3).tolist()
    return {"seed": seed, "phases": [{"kind": p.kind, "start": p.start, "stop": p.stop}
                                     for p in data.phases],
            "adaptation": adaptation, "restart": inputs["wctm"].restart,
            "log10_martingale": paths}


# ------------------------------------------------------------------------------------- main
DATASETS: dict[str, str] = {
    "regression": "river Shuttle regression task (monitor.ops.datasets), score |y - prediction|",
    "classification": "river Banana classification task (monitor.ops.datasets), score "
                      "1 - p(y | x) (one_minus_prob)",
}


def run(sizes: Sizes, workers: int = 2, seeds: int | None = None, task: str = "regression",
        scenarios: Sequence[str] | None = None, variants: bool = False) -> dict[str, Any]:
    """The whole comparison: every scenario × seed, summaries, Ville validity, paths (the
    regression task only)."""
    started = time.perf_counter()
    n_seeds = sizes.seeds if seeds is None else seeds
    chosen = TASKS[task] if scenarios is None else tuple(scenarios)
    unknown = set(chosen) - set(TASKS[task])
    if unknown:
        raise ValueError(f"task {task!r} has no scenario {sorted(unknown)}")
    jobs = [Job(scenario, seed, sizes, task, variants)
            for seed in range(n_seeds) for scenario in chosen]
    runs = run_jobs(jobs, workers)
    summary = summarize(runs)
    result = {
        "config": {
            "task": task, "scenarios": list(chosen), "variants": variants,
            "sizes": asdict(sizes) | {"seeds": n_seeds},
            "dataset": DATASETS[task],
            "alphas": list(ALPHAS), "thresholds": list(THRESHOLDS),
            "river_grid": {k: {"parameter": p, "values": list(v)}
                           for k, (p, v) in RIVER_GRID.items()},
            "defaults": DEFAULT_SETTING, "covariate_monitor": COVARIATE,
            "workers": workers,
        },
        "summary": summary,
        "adaptation": adaptation_summary(runs),
        "ville_validity": ville_validity(summary),
        "paths": martingale_paths(scale=1.0 if sizes == FULL else 0.2)
        if task == "regression" and scenarios is None else None,
        "benign_paired": paired_rates(runs),
    }
    result["matched"] = matched_settings(result)
    result["adwin_matched"] = adwin_matched(result)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def default_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (scenario, detector) at the detector family's default setting."""
    rows = []
    for scenario, detectors in result["summary"].items():
        for det, settings in detectors.items():
            setting = DEFAULT_SETTING[det.split("/")[0]]
            rows.append({"scenario": scenario, "detector": det, "setting": setting,
                         **settings[setting]})
    return rows


def print_human(result: dict[str, Any]) -> None:
    sizes = result["config"]["sizes"]
    print(f"detection side by side, {result['config']['task']} task ({sizes['seeds']} seeds per "
          f"scenario, {result['seconds']} s; defaults: martingales SR 10 000, river defaults)")
    for row in default_rows(result):
        if row["scenario"] == "stationary":
            text = (f"alarm rate {row['alarm_rate']:.3f}  run length (censored) "
                    f"{row['run_length_mean']:.0f}")
        else:
            delay = "-" if row["delay_median"] is None else f"{row['delay_median']:.0f}"
            text = (f"detected {row['detected']:.2f}  false alarm before "
                    f"{row['false_alarm_before']:.2f}  median delay {delay}")
        print(f"  {row['scenario']:<18} {row['detector']:<26} {row['setting']:<24} {text}")
    print("at a stationary alarm rate no higher than ADWIN's (delta 0.002) on the same streams:")
    for det, row in result["adwin_matched"].items():
        if row is None:
            print(f"  {det:<26} no setting is that quiet")
            continue
        delays = "  ".join(f"{sc} {row[sc]['delay_median']}" for sc in SHIFT_SCENARIOS
                           if sc in row)
        print(f"  {det:<26} {row['setting']:<24} stationary {row['alarm_rate']:.3f}  {delays}")
    for row in result["ville_validity"]:
        if not row["ok"]:
            print(f"  Ville bound exceeded: {row}")
    paired = result.get("benign_paired")
    if paired:
        a, b = paired["a"], paired["b"]
        print(f"{paired['scenario']}, alarm after the change at {paired['setting']} on the same "
              f"{paired['n']} streams: {a['detector']} {a['rate']:.3f} ± {a['se']:.3f}, "
              f"{b['detector']} {b['rate']:.3f} ± {b['se']:.3f}; difference "
              f"{paired['difference']:+.3f} ± {paired['difference_se']} (paired SE), "
              f"only {a['detector']} {paired['a_only']}, only {b['detector']} {paired['b_only']}"
              f", sign test p = {paired['sign_test_p']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="CI sizes (seconds)")
    parser.add_argument("--seeds", type=int, help="seeds per scenario (default 100; quick 2)")
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument("--task", choices=list(TASKS), default="regression",
                        help="Shuttle regression (default) or Banana classification")
    parser.add_argument("--scenarios", help="comma-separated subset of the task's scenarios")
    parser.add_argument("--n-after", type=int,
                        help="events after the change (default 1 000; 1 500 makes the benign "
                             "stream bench_statistical's, seed for seed)")
    parser.add_argument("--variants", action="store_true",
                        help="also the WCTM with plug-in power bettors of single forgetting rates")
    args = parser.parse_args(argv)
    scenarios = args.scenarios.split(",") if args.scenarios else None
    sizes = QUICK if args.quick else FULL
    if args.n_after is not None:
        sizes = replace(sizes, n_after=args.n_after)
    result = run(sizes, workers=args.workers, seeds=args.seeds,
                 task=args.task, scenarios=scenarios, variants=args.variants)
    if args.json:
        print(json.dumps(result))
    else:
        print_human(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
