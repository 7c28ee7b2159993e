"""Label-free estimation and harm detection (``monitor.core.estimation``) on bundled real data.

Run ``python bench/bench_label_free.py`` (``--quick`` for the CI size, ``--seeds N``); it writes
``bench/results/label_free.json``.

Tasks (``monitor.ops.tasks``): the Banana classifier (4 000 pool rows, accuracy 0.89) and the
Shuttle regressor (39 097 pool rows). Per seed the pool is permuted; the first ``n_calibration``
rows are the labelled calibration set, the others the stream's source. The *hard region* is
fixed once per task from the pool's own errors: rows whose 50-nearest-neighbour mean error (0/1
error, or |y − ŷ|) is in the region's top share (``HARD_LOCAL_ERROR`` for Banana, the top
``HARD_SHARE`` for Shuttle), an oracle no detector sees.

Streams, after ``n_stable`` rows drawn without replacement from the rest of the pool:

- ``null``: the rest of the pool in random order, at most ``N_NULL`` rows (exchangeable with
  the calibration rows);
- ``harmful``: ``n_shift`` rows drawn with replacement, a share ``mix`` from the hard region
  and the others from the whole rest (a covariate shift into where the model is worse);
- ``benign``: ``n_shift`` rows drawn with replacement inside each of 20 strata of the model's
  confidence (or of the error model's ℓ̂ for regression), in the calibration's proportions,
  but only from rows whose first feature is above the stratum's median: the inputs move, the
  error stays (measured, reported as ``error_after``);
- ``stationary``: as ``benign`` without the feature restriction (its reference alarm rate).

The detector is :class:`~monitor.core.estimation.LabelFreeHarmDetector` (q = 0.1,
tolerance None, so P(false alarm) ≤ 2 alpha). Delays count events from the change to the
first alarm (a seed without an alarm counts as ``n_shift``, so the mean is a lower bound).

Estimation: windows of ``window`` events of a harmful stream (the accuracy / MAE moves); the
mean absolute error |estimate − realised| per window of our estimators and of faithful
re-implementations of NannyML's CBPE (binary: isotonic calibration of p̂(class 1), expected
accuracy the mean calibrated probability of the predicted class) and DLE (a gradient-boosted
model with scikit-learn's defaults on the features and prediction, fitted to |y − ŷ| on the
whole calibration set), and of the calibration's own metric held constant (no estimation).

Against the conditional monitor (plain CTM on 1 − p̂(y|x) or |y − ŷ|, and the weighted one):
it scores an event only once its label arrives, so its delay is the label lag plus its
detection delay in labelled events; reported for lags of 1 000 and 10 000 events.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.detectors import ConditionalMonitor
from monitor.core.estimation import (
    AbsoluteErrorModel,
    CalibratedConfidence,
    LabelFreeHarmDetector,
    LossEstimator,
    with_prediction,
)
from monitor.ops.tasks import load_banana_classification, load_shuttle_regression

RESULTS = Path(__file__).resolve().parent / "results" / "label_free.json"
HARD_LOCAL_ERROR = 0.3  # Banana: local error rate above this (14 % of rows, error 0.45 there)
HARD_SHARE = 0.2  # Shuttle: the fifth of rows with the largest local |y − ŷ|
LAGS = (1000, 10_000)
N_NULL = 10_000


@dataclass(frozen=True, eq=False)
class Task:
    """One task's pool in the detector's input form, with its oracle hard region."""

    name: str
    Z: np.ndarray  # estimator inputs: probabilities, or features + prediction
    y: np.ndarray
    X: np.ndarray
    loss: np.ndarray  # per-row loss: 0/1 error, or |y − ŷ|
    score: np.ndarray  # conditional nonconformity: 1 − p̂(y|x), or |y − ŷ|
    hard: np.ndarray
    n_calibration: int
    make_estimator: Callable[[], LossEstimator]


def _local_mean(X: np.ndarray, values: np.ndarray) -> np.ndarray:
    from sklearn.neighbors import KNeighborsRegressor
    from threadpoolctl import threadpool_limits

    scaled = (X - X.mean(0)) / X.std(0)
    with threadpool_limits(1):
        return np.asarray(KNeighborsRegressor(50).fit(scaled, values).predict(scaled))


@cache
def banana() -> Task:
    t = load_banana_classification(0)
    loss = (t.proba.argmax(1) != t.y).astype(np.float64)
    score = 1.0 - t.proba[np.arange(t.y.size), t.y]
    hard = _local_mean(t.X, loss) > HARD_LOCAL_ERROR
    return Task("banana", np.asarray(t.proba), np.asarray(t.y), np.asarray(t.X), loss, score,
                hard, 2000, CalibratedConfidence)


@cache
def shuttle() -> Task:
    t = load_shuttle_regression(0)
    loss = np.abs(t.y - t.pred)
    local = _local_mean(t.X, loss)
    hard = local > np.quantile(local, 1.0 - HARD_SHARE)
    return Task("shuttle", with_prediction(t.X, t.pred), np.asarray(t.y), np.asarray(t.X), loss,
                loss, hard, 2000, lambda: AbsoluteErrorModel(max_iter=100))


TASKS = {"banana": banana, "shuttle": shuttle}


# ------------------------------------------------------------------------------------ streams
def split(task: Task, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Calibration rows and the rest of the pool, in random order."""
    order = np.random.default_rng(seed).permutation(task.y.size)
    return order[: task.n_calibration], order[task.n_calibration:]


def _strata(values: np.ndarray, reference: np.ndarray, k: int = 20) -> np.ndarray:
    edges = np.quantile(reference, np.linspace(0, 1, k + 1)[1:-1])
    return np.searchsorted(edges, values)


def stream(task: Task, seed: int, kind: str, n_stable: int = 1000, n_shift: int = 3000,
           mix: float = 0.3, stratify_by: np.ndarray | None = None) -> np.ndarray:
    """Pool indices of one stream (``kind``: null, harmful, benign, stationary)."""
    cal, rest = split(task, seed)
    if kind == "null":
        return rest[:N_NULL]
    rng = np.random.default_rng([seed, 1])
    stable = rest[:n_stable]
    if kind == "harmful":
        hard = rest[task.hard[rest]]
        pick = np.where(rng.uniform(size=n_shift) < mix, rng.choice(hard, n_shift),
                        rng.choice(rest, n_shift))
        return np.r_[stable, pick]
    if stratify_by is None:
        raise ValueError(f"a {kind} stream needs the strata's values")
    strata = _strata(stratify_by[rest], stratify_by[cal])
    counts = np.bincount(rng.choice(_strata(stratify_by[cal], stratify_by[cal]), n_shift),
                         minlength=20)
    picks = []
    for s, count in enumerate(counts):
        members = rest[strata == s]
        if kind == "benign":
            x = task.X[members, 0]
            members = members[x > np.median(x)]
        picks.append(rng.choice(members, count))
    return np.r_[stable, rng.permutation(np.concatenate(picks))]


def detector(task: Task, seed: int, alpha: float) -> LabelFreeHarmDetector:
    cal, _ = split(task, seed)
    return LabelFreeHarmDetector(task.make_estimator(), task.Z[cal], task.y[cal], q=0.1,
                                 alpha=alpha, seed=seed)


def first_alarm(det: LabelFreeHarmDetector, Z: np.ndarray) -> int | None:
    hits: list[int] = []
    det.update_batch(Z, on_alarm=lambda i, _: hits.append(i))
    return hits[0] if hits else None


# ------------------------------------------------------------------------------- experiments
def _share(values: Iterable[bool]) -> dict[str, float]:
    arr = np.fromiter(values, float)
    return {"rate": float(arr.mean()), "se": float(math.sqrt(max(arr.mean() * (1 - arr.mean()),
                                                                 1e-12) / arr.size)),
            "n": int(arr.size)}


def null_runs(task_name: str, seeds: Iterable[int], alpha: float = 0.05) -> dict[str, Any]:
    """False alarms on exchangeable streams, with the proved bound alpha + threshold risk."""
    task = TASKS[task_name]()
    alarms, risks, rates = [], [], []
    for seed in seeds:
        det = detector(task, seed, alpha)
        Z = task.Z[stream(task, seed, "null")]
        rates.append(float(det.flags(Z).mean()))
        alarms.append(first_alarm(det, Z) is not None)
        risks.append(det.threshold_risk)
    out = _share(alarms)
    out |= {"bound": alpha + float(np.mean(risks)), "alpha": alpha,
            "flag_rate_mean": float(np.mean(rates)),
            "flag_rate_se": float(np.std(rates, ddof=1) / math.sqrt(len(rates)))}
    return out


def harmful_runs(task_name: str, seeds: Iterable[int], alpha: float = 0.01,
                 n_stable: int = 1000, n_shift: int = 3000, mix: float = 0.3) -> dict[str, Any]:
    task = TASKS[task_name]()
    delays, false = [], []
    for seed in seeds:
        idx = stream(task, seed, "harmful", n_stable, n_shift, mix)
        det = detector(task, seed, alpha)
        hit = first_alarm(det, task.Z[idx[:n_stable]])
        false.append(hit is not None)
        det = detector(task, seed, alpha)  # the delay from a fresh start at the change
        hit = first_alarm(det, task.Z[idx[n_stable:]])
        delays.append(n_shift if hit is None else hit)
    d = np.array(delays, float)
    return {"detected": float(np.mean(d < n_shift)), "median_delay": float(np.median(d)),
            "mean_delay": float(d.mean()), "false_alarm_before": float(np.mean(false)),
            "n": int(d.size), "loss_after": _mean_loss(task, seeds, "harmful", n_stable,
                                                        n_shift, mix)}


def _mean_loss(task: Task, seeds: Iterable[int], kind: str, n_stable: int, n_shift: int,
               mix: float = 0.3, stratify: bool = False) -> float:
    losses = []
    for seed in seeds:
        strata = _stratify_values(task, seed) if stratify else None
        idx = stream(task, seed, kind, n_stable, n_shift, mix, strata)
        losses.append(task.loss[idx[n_stable:]].mean())
    return float(np.mean(losses))


@cache
def _flag_scores(task_name: str, seed: int) -> np.ndarray:
    task = TASKS[task_name]()
    return detector(task, seed, 0.01).fitted_estimator.flag_score(task.Z)


def _stratify_values(task: Task, seed: int) -> np.ndarray:
    """What the benign shift keeps the law of: the flag score of the seed's detector (the
    split, and so the fitted estimator, does not depend on alpha)."""
    return _flag_scores(task.name, seed)


def benign_runs(task_name: str, seeds: Iterable[int], alpha: float = 0.01,
                n_shift: int = 3000) -> dict[str, Any]:
    """Alarm shares on benign and stationary streams of the same length."""
    task = TASKS[task_name]()
    seeds = list(seeds)
    out: dict[str, Any] = {}
    for kind in ("benign", "stationary"):
        alarms = []
        for seed in seeds:
            values = _stratify_values(task, seed)
            idx = stream(task, seed, kind, 0, n_shift, stratify_by=values)
            alarms.append(first_alarm(detector(task, seed, alpha), task.Z[idx]) is not None)
        out[kind] = _share(alarms) | {
            "loss_after": _mean_loss(task, seeds, kind, 0, n_shift, stratify=True)}
    out["calibration_loss"] = float(task.loss.mean())
    return out


# -------------------------------------------------------------------------------- estimation
def cbpe_accuracy(cal_p: np.ndarray, cal_y: np.ndarray) -> Callable[[np.ndarray], float]:
    """NannyML's CBPE for a binary classifier, re-implemented: isotonic calibration of
    p̂(class 1) on the reference; a window's expected accuracy is the mean calibrated
    probability of the predicted class."""
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(cal_p[:, 1], cal_y)

    def estimate(window_p: np.ndarray) -> float:
        p1 = iso.predict(window_p[:, 1])
        return float(np.mean(np.where(window_p[:, 1] >= 0.5, p1, 1.0 - p1)))

    return estimate


def dle_mae(cal_Z: np.ndarray, cal_y: np.ndarray) -> Callable[[np.ndarray], float]:
    """NannyML's DLE for MAE, re-implemented: a gradient-boosted regression (defaults) on the
    features and the prediction, fitted to |y − ŷ| of the reference; a window's expected MAE
    is the mean of its predictions."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    model = HistGradientBoostingRegressor(random_state=0)
    with threadpool_limits(1):
        model.fit(cal_Z, np.abs(cal_y - cal_Z[:, -1]))

    def estimate(window_Z: np.ndarray) -> float:
        with threadpool_limits(1):
            return float(np.mean(np.maximum(model.predict(window_Z), 0.0)))

    return estimate


def estimation_runs(task_name: str, seeds: Iterable[int], window: int = 500,
                    n_shift: int = 3000) -> dict[str, Any]:
    """Mean |estimate − realised| per window of harmful streams (several mixes)."""
    task = TASKS[task_name]()
    errors: dict[str, list[float]] = {"ours": [], "nannyml_reimplementation": [], "constant": []}
    for seed in seeds:
        cal, _ = split(task, seed)
        est = task.make_estimator().fit(task.Z[cal], task.y[cal])
        constant = est.realised(task.Z[cal], task.y[cal])
        baseline = (cbpe_accuracy if task.name == "banana" else dle_mae)(task.Z[cal], task.y[cal])
        for mix in (0.0, 0.3, 0.6):
            idx = stream(task, seed, "harmful", 0, n_shift, mix)
            for start in range(0, idx.size - window + 1, window):
                w = idx[start:start + window]
                truth = est.realised(task.Z[w], task.y[w])
                errors["ours"].append(abs(est.estimate(task.Z[w]) - truth))
                errors["nannyml_reimplementation"].append(abs(baseline(task.Z[w]) - truth))
                errors["constant"].append(abs(constant - truth))
    out: dict[str, Any] = {"metric": task.make_estimator().metric, "window": window}
    for name, values in errors.items():
        arr = np.array(values)
        out[name] = {"mae": float(arr.mean()), "se": float(arr.std(ddof=1) / math.sqrt(arr.size))}
    diff = np.array(errors["ours"]) - np.array(errors["nannyml_reimplementation"])
    out["paired_difference"] = {"mean": float(diff.mean()),
                                "se": float(diff.std(ddof=1) / math.sqrt(diff.size))}
    out["n_windows"] = len(errors["ours"])
    return out


# ------------------------------------------------------------------- against the labelled one
def conditional_delay(task: Task, seed: int, idx: np.ndarray, weighted: bool,
                      n_shift: int) -> int:
    """The conditional monitor's detection delay in labelled events after the change."""
    cal, _ = split(task, seed)
    monitor = ConditionalMonitor(task.score[cal], task.X[cal], weighted=weighted, seed=seed)
    hits: list[int] = []
    monitor.update_batch(task.X[idx], task.score[idx], on_alarm=lambda i, _: hits.append(i))
    return n_shift if not hits else hits[0]


def delay_runs(task_name: str, seeds: Iterable[int], n_shift: int = 3000,
               mix: float = 0.3) -> dict[str, Any]:
    """Median delays (events after the change) of the label-free detector and of the
    conditional monitors once labels arrive ``lag`` events late."""
    task = TASKS[task_name]()
    rows: dict[str, list[float]] = {"label_free": [], "conditional_plain": [],
                                    "conditional_weighted": []}
    for seed in seeds:
        idx = stream(task, seed, "harmful", 0, n_shift, mix)
        hit = first_alarm(detector(task, seed, 0.01), task.Z[idx])
        rows["label_free"].append(n_shift if hit is None else hit)
        for weighted, name in ((False, "conditional_plain"), (True, "conditional_weighted")):
            rows[name].append(conditional_delay(task, seed, idx, weighted, n_shift))
    out: dict[str, Any] = {"n_shift": n_shift, "mix": mix}
    for name, delays in rows.items():
        d = np.array(delays, float)
        out[name] = {"median_delay": float(np.median(d)), "detected": float(np.mean(d < n_shift))}
    for lag in LAGS:
        for name in ("conditional_plain", "conditional_weighted"):
            out[name][f"median_delay_lag_{lag}"] = lag + out[name]["median_delay"]
    return out


# ------------------------------------------------------------------------------------- main
def run(n_seeds: int, quick: bool) -> dict[str, Any]:
    seeds = range(n_seeds)
    few = range(max(3, n_seeds // 4))
    out: dict[str, Any] = {"seeds": n_seeds, "quick": quick}
    for name in TASKS:
        out[name] = {
            "null": null_runs(name, range(4 * n_seeds)),
            "harmful": harmful_runs(name, seeds),
            "benign": benign_runs(name, seeds),
            "estimation": estimation_runs(name, few),
            "delays": delay_runs(name, few),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI size (a few seeds)")
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args()
    n = args.seeds or (5 if args.quick else 50)
    result = run(n, args.quick)
    text = json.dumps(result, indent=2)
    if not args.quick:
        RESULTS.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
