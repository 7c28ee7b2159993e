"""Why the plug-in power WCTM alarms on some benign tilts: estimated against oracle weights.

Investigation behind "Benign shift, re-measured" in ``docs/detectors.md``. The streams are
``bench_compare``'s (Shuttle regression, |y − ŷ| scores, 1 000 calibration rows; ``stationary``
2 000 exchangeable events; ``benign_covariate`` and ``concept_abrupt`` 500 stable events then
1 500 shifted ones, the benign stream being ``bench_statistical``'s seed for seed). On each
stream the weighted conformal p-values are computed several ways (:data:`VARIANTS`):

``estimated``
    The service's WCTM (``ConditionalMonitor``, weights estimated from the first event on by
    the online density ratio, learning rate 0.05, micro-batches of 32) — exactly the p-values
    ``bench_compare`` bets on (its covariate-triggered ``start_adaptation`` is a no-op with
    ``adapt="start"``).
``lr=…``, ``batch=…``
    The same monitor with another density-ratio learning rate or micro-batch size.
``oracle``
    The true weights. The tilted rows are drawn ∝ r(x) = exp(λ·g(x)) from the pool the
    calibration and stable rows come from (``monitor.ops.datasets``), so after the change the test
    point has density q = r·p while the reference holds a points drawn from p (calibration,
    stable events) and b − 1 earlier tilted ones. Tibshirani et al. (NeurIPS 2019, Lemma 3)
    give the exact weight of point j as r_j·e_{b−1}(r_{−j}) (e the elementary symmetric
    polynomial); by the saddle point of Π(1 + z·r_i) at z = b/a this is ∝ r_j / (a + b·r_j) =
    q(x_j)/m(x_j), m = (a·p + b·q)/(a + b) the reference's mixture density, up to O(1/n),
    with r normalised to E_p[r] = 1 (its mean over the whole pool). Before the change every
    weight is 1 (plain conformal p-values).
``oracle_r``
    r(x) alone for every point (Tibshirani et al. 2019, eq. (7), as if the whole reference
    came from p): over-corrects once tilted points have joined the reference.
``ctm``
    Unweighted conformal p-values (what no weighting gives).

Each p-value is randomised as in ``monitor.core.martingales.weighted`` (Tibshirani et al. 2019,
eq. (7); Prinster et al., WATCH, ICML 2025, eq. (8)). Reported: per window of events, the mean
of −log p (1 under uniform p-values), the share of p ≤ 0.05 and the Kolmogorov–Smirnov
distance of the pooled p-values to U(0, 1); for the estimated weights the least-squares slope
of log ŵ on log r over the calibration inputs (0 before the estimate has learnt anything, ≈ 1
when ŵ tracks r); and per variant the first alarms of the plug-in power and the Simple Mixture
bets at Shiryaev–Roberts 10 000 and 100 000, CUSUM 1 000 and Ville's rule at α = 0.05 and 0.01
(on stationary streams: the share alarming must stay within α + 3 SE).

``--task classification`` runs the same on ``bench_compare``'s Banana streams (1 − p̂(y | x)
scores; the tilt exp(λ·x2), x2 standardised on the calibration rows).

Run ``python bench/bench_benign_weights.py --seeds 300 --workers 2 --out FILE``; ``--markdown
FILE`` prints the docs table of a saved result.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_compare import (
    CLASSIFICATION_TILT,
    Sizes,
    Stream,
    betting_segments,
    classification_stream,
    first_alarm,
    scenario_stream,
)

from monitor.core.detectors import ConditionalMonitor
from monitor.ops.datasets import (
    ClassificationTask,
    load_banana_classification,
    load_shuttle_regression,
)

FloatArray = np.ndarray
SIZES = Sizes(seeds=300, n_calibration=1000, n_stationary=2000, n_before=500, n_after=1500,
              ramp=300)
SCENARIOS: tuple[str, ...] = ("stationary", "benign_covariate", "concept_abrupt")
#: name -> ConditionalMonitor keyword arguments (estimated weights) or None (computed here).
VARIANTS: dict[str, dict[str, Any] | None] = {
    "estimated": {},
    "lr=0.1": {"ratio_learning_rate": 0.1},
    "lr=0.2": {"ratio_learning_rate": 0.2},
    "batch=8": {"batch_size": 8},
    "batch=4": {"batch_size": 4},
    "lr=0.1,batch=8": {"ratio_learning_rate": 0.1, "batch_size": 8},
    "oracle": None,
    "oracle_r": None,
    "ctm": None,
}
BETS: tuple[str, ...] = ("plug_in_power", "mixture")
SETTINGS: tuple[tuple[str, float], ...] = (
    ("shiryaev_roberts", 10_000.0), ("shiryaev_roberts", 100_000.0), ("cusum", 1000.0),
    ("ville", 0.05), ("ville", 0.01))
WINDOW = 50
TILT = 1.0  # monitor.ops.datasets.make_stream's default λ


def _log_r(task: Any, cal_X: FloatArray, X: FloatArray) -> FloatArray:
    """log r(x) = λ·g(x) for the rows ``X``, g standardised on the calibration rows ``cal_X``
    as the generators do: Shuttle (``monitor.ops.datasets._Shifts``) minus f3 − f7, Banana
    (``bench_compare.classification_stream``) x2."""
    if isinstance(task, ClassificationTask):
        x2 = task.column("x2")
        g_cal, g = cal_X[:, x2], X[:, x2]
        sign, lam = 1.0, CLASSIFICATION_TILT
    else:
        f3, f7 = task.column("f3"), task.column("f7")
        g_cal, g = cal_X[:, f3] - cal_X[:, f7], X[:, f3] - X[:, f7]
        sign, lam = -1.0, TILT
    return np.asarray(sign * lam * (g - g_cal.mean()) / g_cal.std(), np.float64)


def log_tilt(stream: Stream, task: Any) -> FloatArray:
    """log r(x) of every stream row (up to a constant, see :func:`log_mean_tilt`)."""
    return _log_r(task, stream.cal_X, stream.X)


def log_mean_tilt(stream: Stream, task: Any) -> float:
    """log E_p[r] over the pool the rows are drawn from (r as in :func:`log_tilt`)."""
    return float(np.log(np.mean(np.exp(_log_r(task, stream.cal_X, task.X)))))


def log_tilt_cal(stream: Stream, task: Any) -> FloatArray:
    """log r(x) of the calibration rows."""
    return _log_r(task, stream.cal_X, stream.cal_X)


def weighted_p_values(cal_scores: FloatArray, scores: FloatArray, weights_of: Any,
                      seed: int) -> FloatArray:
    """Randomised weighted conformal p-values with a growing reference (Tibshirani et al. 2019,
    eq. (7); WATCH eq. (8)): p_t = [Σ_i w_i·1{s_i > s_t} + U_t·(Σ_i w_i·1{s_i = s_t} + w_t)] /
    (Σ_i w_i + w_t), reference i = calibration and every earlier event. ``weights_of(t)``
    returns the unnormalised weights of the n_cal + t reference points and of the test point
    (the last entry), or None for weights all 1.

    >>> p = weighted_p_values(np.array([1.0, 2.0, 3.0]), np.array([2.5, 0.5]),
    ...                       lambda t: None, seed=0)
    >>> bool(0 < p[0] <= 0.5), bool(p[1] > 0.5)
    (True, True)
    """
    rng = np.random.default_rng(seed)
    all_scores = np.concatenate([cal_scores, scores])
    m, out = cal_scores.size, np.empty(scores.size)
    for t in range(scores.size):
        ref, s = all_scores[: m + t], scores[t]
        w = weights_of(t)
        u = rng.random()
        if w is None:
            above, tied = float(np.sum(ref > s)), float(np.sum(ref == s))
            w_t, total = 1.0, m + t + 1.0
        else:
            w_ref, w_t = w[:-1], float(w[-1])
            above, tied = float(w_ref[ref > s].sum()), float(w_ref[ref == s].sum())
            total = float(w_ref.sum()) + w_t
        out[t] = (above + u * (tied + w_t)) / total
    return out


def oracle_weights(log_r_all: FloatArray, m: int, change: int | None,
                   mixture: bool) -> Any:
    """weights_of(t) for the oracle: 1 before the change; after it r_j/(a + b·r_j) (mixture)
    or r_j (not), over the m calibration points, the t earlier events and the test point;
    ``log_r_all`` must be normalised to E_p[r] = 1 for the mixture weights."""
    r_all = np.exp(log_r_all)

    def weights_of(t: int) -> FloatArray | None:
        if change is None or t < change:
            return None
        r = r_all[: m + t + 1]
        if not mixture:
            return r
        b = t + 1 - change  # tilted points, the test point included
        a = m + change  # calibration and stable events
        return np.asarray(r / (a + b * r))

    return weights_of


def estimated_run(stream: Stream, params: dict[str, Any], log_r_cal: FloatArray,
                  every: int = 50) -> tuple[FloatArray, FloatArray]:
    """The WCTM's p-values (never alarming) and, every ``every`` events, the slope of log ŵ on
    log r over the calibration inputs."""
    monitor = ConditionalMonitor(stream.cal_scores, stream.cal_X, weighted=True,
                                 betting="composite_jumper", rule="ville", alpha=1e-300,
                                 rebaseline=0, seed=stream.seed, **params)
    ps = np.empty(stream.scores.size)
    slopes = []
    centred = log_r_cal - log_r_cal.mean()
    for t, (x, s) in enumerate(zip(stream.X, stream.scores.tolist(), strict=True)):
        monitor.update(x, s)
        ps[t] = monitor.p_value
        if (t + 1) % every == 0:
            pv: Any = monitor._pv  # bench introspection of the weighted p-values
            z = monitor._transform(stream.cal_X) if monitor._transform is not None else stream.cal_X
            lw = np.log(pv.density_ratio.weights(z))
            slopes.append(float(np.dot(lw - lw.mean(), centred) / np.dot(centred, centred)))
    if monitor.n_alarms:
        raise RuntimeError("the p-value monitor alarmed")
    return ps, np.array(slopes)


@dataclass(frozen=True)
class Job:
    scenario: str
    seed: int
    task: str = "regression"

    def __call__(self) -> dict[str, Any]:
        return run_stream(self.scenario, self.seed, self.task)


def run_stream(scenario: str, seed: int, task_name: str = "regression") -> dict[str, Any]:
    task: Any
    if task_name == "classification":
        task = load_banana_classification()
        stream = classification_stream(task, scenario, seed, SIZES)
    else:
        task = load_shuttle_regression()
        stream = scenario_stream(task, scenario, seed, SIZES)
    m = stream.cal_scores.size
    log_r = np.concatenate([log_tilt_cal(stream, task), log_tilt(stream, task)])
    log_r -= log_mean_tilt(stream, task)
    ps: dict[str, FloatArray] = {}
    slopes: dict[str, list[float]] = {}
    for name, params in VARIANTS.items():
        if params is not None:
            ps[name], sl = estimated_run(stream, params, log_r[:m])
            slopes[name] = sl.tolist()
    # the oracle knows where the tilt starts; there is none on the other scenarios
    change = stream.change if scenario == "benign_covariate" else None
    ps["oracle"] = weighted_p_values(stream.cal_scores, stream.scores,
                                     oracle_weights(log_r, m, change, True), seed)
    ps["oracle_r"] = weighted_p_values(stream.cal_scores, stream.scores,
                                       oracle_weights(log_r, m, change, False), seed)
    ps["ctm"] = weighted_p_values(stream.cal_scores, stream.scores, lambda t: None, seed)
    first = {name: {bet: {f"{rule}@{level:g}": first_alarm(betting_segments(p, bet, None),
                                                          rule, level)
                          for rule, level in SETTINGS} for bet in BETS}
             for name, p in ps.items()}
    return {"scenario": scenario, "seed": seed, "change": stream.change,
            "ps": {k: v.tolist() for k, v in ps.items()}, "slopes": slopes, "first": first}


def _call(job: Job) -> dict[str, Any]:
    return job()


def ks_uniform(p: FloatArray) -> float:
    """Kolmogorov–Smirnov distance of the sample ``p`` to U(0, 1).

    >>> ks_uniform(np.array([0.25, 0.75]))
    0.25
    """
    x = np.sort(p)
    n = x.size
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - x), np.max(x - (i - 1) / n)))


def window_table(runs: Sequence[dict[str, Any]], scenario: str) -> dict[str, list[dict[str, Any]]]:
    group = [r for r in runs if r["scenario"] == scenario]
    n_events = len(group[0]["ps"]["estimated"])
    out: dict[str, list[dict[str, Any]]] = {}
    for name in VARIANTS:
        rows = []
        for lo in range(0, n_events, WINDOW):
            p = np.concatenate([np.asarray(r["ps"][name][lo:lo + WINDOW]) for r in group])
            nlp = -np.log(p)
            rows.append({"from": lo, "mean_neg_log_p": round(float(nlp.mean()), 4),
                         "se": round(float(nlp.std(ddof=1) / math.sqrt(nlp.size)), 4),
                         "p_le_0.05": round(float(np.mean(p <= 0.05)), 4),
                         "ks": round(ks_uniform(p), 4)})
        out[name] = rows
    return out


def slope_table(runs: Sequence[dict[str, Any]], scenario: str) -> dict[str, list[float]]:
    group = [r for r in runs if r["scenario"] == scenario]
    out: dict[str, list[float]] = {}
    for name in group[0]["slopes"]:
        mean = np.mean([r["slopes"][name] for r in group], axis=0)
        out[name] = [round(float(v), 3) for v in mean]
    return out


def alarm_table(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    by = {s: [r for r in runs if r["scenario"] == s] for s in SCENARIOS}
    for name in VARIANTS:
        for bet in BETS:
            for rule, level in SETTINGS:
                key = f"{rule}@{level:g}"
                row: dict[str, Any] = {"variant": name, "bet": bet, "setting": key}
                if by["stationary"]:
                    hit = [r["first"][name][bet][key] is not None for r in by["stationary"]]
                    row["stationary"] = round(float(np.mean(hit)), 4)
                    row["stationary_seeds"] = [r["seed"] for r, h in
                                               zip(by["stationary"], hit, strict=True) if h]
                if by["benign_covariate"]:
                    g = by["benign_covariate"]
                    after = [(f := r["first"][name][bet][key]) is not None and f >= r["change"]
                             for r in g]
                    before = [(f := r["first"][name][bet][key]) is not None and f < r["change"]
                              for r in g]
                    row["benign_after"] = int(sum(after))
                    row["benign_before"] = int(sum(before))
                    row["benign_n"] = len(g)
                    row["benign_seeds"] = [r["seed"] for r, a in zip(g, after, strict=True) if a]
                    # events from the change to each harmful alarm (when the alarms come)
                    row["benign_alarm_after"] = sorted(
                        r["first"][name][bet][key] - r["change"]
                        for r, a in zip(g, after, strict=True) if a)
                if by["concept_abrupt"]:
                    g = by["concept_abrupt"]
                    delays = [f - r["change"] for r in g
                              if (f := r["first"][name][bet][key]) is not None
                              and f >= r["change"]]
                    row["concept_detected"] = round(len(delays) / len(g), 4)
                    row["concept_median_delay"] = float(np.median(delays)) if delays else None
                rows.append(row)
    return rows


def sign_test(a_only: int, b_only: int) -> float:
    """Exact two-sided sign test (McNemar) on the discordant counts.

    >>> sign_test(6, 0)
    0.03125
    """
    k, m = min(a_only, b_only), a_only + b_only
    return min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2**m) if m else 1.0


def paired_table(alarms: Sequence[dict[str, Any]], base: str = "estimated") -> list[dict[str, Any]]:
    """Every variant against ``base`` on the same streams (benign: harmful alarms after the
    change; stationary: any alarm): the count of each, the discordant seeds and the sign-test
    p-value, per bet and setting."""
    rows = {(r["variant"], r["bet"], r["setting"]): r for r in alarms}
    out = []
    for (variant, bet, setting), row in rows.items():
        for scenario in ("benign", "stationary"):
            if variant == base or f"{scenario}_seeds" not in row:
                continue
            a = set(rows[(base, bet, setting)][f"{scenario}_seeds"])
            b = set(row[f"{scenario}_seeds"])
            out.append({"scenario": scenario, "variant": variant, "bet": bet,
                        "setting": setting, base: len(a), "other": len(b),
                        f"{base}_only": len(a - b), "other_only": len(b - a),
                        "sign_test_p": float(f"{sign_test(len(a - b), len(b - a)):.3g}")})
    return out


def run(seeds: int, workers: int, scenarios: Sequence[str], first_seed: int = 0,
        task: str = "regression") -> dict[str, Any]:
    jobs = [Job(s, seed, task) for s in scenarios
            for seed in range(first_seed, first_seed + seeds)]
    start = time.perf_counter()
    if workers <= 1:
        runs = [job() for job in jobs]
    else:
        with ProcessPoolExecutor(workers) as pool:
            runs = list(pool.map(_call, jobs, chunksize=max(1, len(jobs) // (8 * workers))))
    result: dict[str, Any] = {"task": task, "seeds": seeds, "first_seed": first_seed,
                              "scenarios": list(scenarios),
                              "alarms": alarm_table(runs)}
    result["paired"] = paired_table(result["alarms"])
    if "benign_covariate" in scenarios:
        result["windows_benign"] = window_table(runs, "benign_covariate")
        result["slopes_benign"] = slope_table(runs, "benign_covariate")
    if "stationary" in scenarios:
        result["windows_stationary"] = window_table(runs, "stationary")
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def print_human(result: dict[str, Any]) -> None:
    for key in ("windows_benign", "windows_stationary"):
        if key not in result:
            continue
        print(f"\n{key}: mean -log p per {WINDOW}-event window (1 = uniform)")
        for name, rows in result[key].items():
            print(f"  {name:10s}", " ".join(f"{r['mean_neg_log_p']:.2f}" for r in rows))
        print(f"{key}: KS distance to U(0,1) per window")
        for name, rows in result[key].items():
            print(f"  {name:10s}", " ".join(f"{r['ks']:.3f}" for r in rows))
    if "slopes_benign" in result:
        print("\nslope of log w_hat on log r (every 50 events)")
        for name, sl in result["slopes_benign"].items():
            print(f"  {name:10s}", " ".join(f"{v:.2f}" for v in sl))
    print("\nvariant    bet            setting                 stationary benign(after/before) "
          "concept(det, median delay)")
    for r in result["alarms"]:
        print(f"  {r['variant']:10s} {r['bet']:14s} {r['setting']:22s} {r.get('stationary')!s:8s}"
              f" {r.get('benign_after')}/{r.get('benign_before')}"
              f"  {r.get('concept_detected')} {r.get('concept_median_delay')}")
    for r in result.get("paired", []):
        print(f"  paired {r['scenario']:10s} {r['variant']:15s} {r['bet']:14s} "
              f"{r['setting']:24s} estimated "
              f"{r['estimated']:3d} vs {r['other']:3d} (only {r['estimated_only']} / "
              f"{r['other_only']}, sign test p = {r['sign_test_p']})")
    print(f"\n{result['seconds']} s")


def markdown(result: dict[str, Any], bet: str = "plug_in_power",
             variants: Sequence[str] = ("estimated", "oracle", "lr=0.1", "batch=8",
                                        "lr=0.1,batch=8")) -> str:
    """The docs table: per variant and setting, stationary alarm rate, benign harmful alarms
    (count / n, and how many within 200 events of the change) and the abrupt concept delay."""
    rows = {(r["variant"], r["bet"], r["setting"]): r for r in result["alarms"]}
    lines = ["| weights | setting | stationary alarm rate | benign: harmful alarm after change "
             "(within 200 events) | abrupt concept: median delay (detected) |",
             "|---|---|---|---|---|"]
    for rule, level in SETTINGS:
        if rule == "ville":
            continue
        key = f"{rule}@{level:g}"
        for v in variants:
            r = rows[(v, bet, key)]
            early = sum(d < 200 for d in r.get("benign_alarm_after", []))
            lines.append(f"| {v} | {key} | {r['stationary']:.3f} | {r['benign_after']} / "
                         f"{r['benign_n']} ({early}) | {r['concept_median_delay']:g} "
                         f"({r['concept_detected']:.2f}) |")
    return "\n".join(lines)


def timing(seeds: int = 5, variants: Sequence[str] = ("estimated", "batch=8",
                                                        "lr=0.1,batch=8")) -> dict[str, float]:
    """Mean time per event (µs) of ``ConditionalMonitor.update`` on the benign streams (2 000
    events after 1 000 calibration rows), per estimated-weight variant, best of 3 passes."""
    task = load_shuttle_regression()
    streams = [scenario_stream(task, "benign_covariate", seed, SIZES) for seed in range(seeds)]
    out = {}
    for name in variants:
        params = VARIANTS[name] or {}
        best = math.inf
        for _ in range(3):
            elapsed = 0.0
            for stream in streams:
                monitor = ConditionalMonitor(stream.cal_scores, stream.cal_X, weighted=True,
                                             rule="ville", alpha=1e-300, rebaseline=0,
                                             seed=stream.seed, **params)
                start = time.perf_counter()
                for x, s in zip(stream.X, stream.scores.tolist(), strict=True):
                    monitor.update(x, s)
                elapsed += time.perf_counter() - start
            best = min(best, elapsed)
        out[name] = round(1e6 * best / sum(st.scores.size for st in streams), 1)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds first_seed … first_seed + seeds − 1 (a fresh range confirms "
                             "a variant chosen on another)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--task", choices=("regression", "classification"),
                        default="regression",
                        help="Shuttle |y − ŷ| (default) or Banana 1 − p̂(y | x) streams")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the JSON result to this file")
    parser.add_argument("--markdown", metavar="JSON",
                        help="print the docs table of a saved --out result and exit")
    parser.add_argument("--timing", action="store_true",
                        help="only time ConditionalMonitor.update per variant (µs per event)")
    args = parser.parse_args(argv)
    if args.timing:
        print(json.dumps(timing()))
        return 0
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    scenarios = [s for s in args.scenarios.split(",") if s]
    result = run(args.seeds, args.workers, scenarios, args.first_seed, args.task)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_human(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
