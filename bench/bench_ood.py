"""OOD benchmarks: scorer and decision-rule throughput, and the FDR Monte Carlo on real data.

Run ``python bench/bench_ood.py`` (add ``--json`` for machine-readable output, ``--quick`` for a
short run). Sections:

- throughput: events/s of every scorer on 128-dim embeddings with 5 000 calibration points, and of
  every decision rule on windows of 256 events;
- FDR Monte Carlo: in-distribution = digits 0–4 of scikit-learn's bundled ``load_digits`` with an
  MLP fitted on 300 of them (its logits and hidden activations feed the scorers), OOD = digits
  5–9; and river's bundled ``Shuttle`` (normal rows in-distribution, anomalies OOD; tabular
  scorers fitted on 2 000 separate normal rows) for calibration sizes up to 1 000, which digits
  cannot supply. Each repetition draws a calibration set of m in-distribution rows and a test
  window of 192 in-distribution + 64 OOD rows from the held-out pools without replacement, so
  calibration and null test points are exchangeable and the guarantees apply exactly.
  ``shuttle-splits`` runs the stream decider's own path instead: :class:`OODDecider` fits a
  tabular KNN on half of the calibration rows (one split for g-BH and LOND, 5 for eg-BH).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.decisions import (
    LOND,
    BatchDecision,
    benjamini_hochberg,
    conformal_p_values,
    ensemble_bh,
)
from monitor.core.ood import SCORERS, Scorer, make_scorer

FloatArray = np.ndarray


@dataclass(frozen=True)
class Experiment:
    """Scores of held-out in-distribution and OOD pools under several fitted scorers."""

    name: str
    scorer_names: tuple[str, ...]
    id_scores: FloatArray  # (K, N_id)
    ood_scores: FloatArray  # (K, N_ood)


# --------------------------------------------------------------------------- data + models
def digits_inputs(
    seed: int = 0, n_train: int = 300
) -> tuple[dict[str, FloatArray], dict[str, FloatArray], dict[str, FloatArray], np.ndarray]:
    """Digits 0–4 in-distribution with an MLP fitted on ``n_train`` of them, 5–9 OOD.

    Returns the MLP's ``embedding`` (hidden activations) and ``logits`` for its training rows,
    the held-out in-distribution pool and the OOD rows, and the labels of the training rows.
    """
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rng = np.random.default_rng(seed)
    id_rows = rng.permutation(np.flatnonzero(y < 5))
    train, pool, ood = id_rows[:n_train], id_rows[n_train:], np.flatnonzero(y >= 5)
    mlp = MLPClassifier(hidden_layer_sizes=(64,), max_iter=2000, random_state=seed)
    mlp.fit(X[train], y[train])

    def inputs(rows: np.ndarray) -> dict[str, FloatArray]:
        hidden = np.maximum(X[rows] @ mlp.coefs_[0] + mlp.intercepts_[0], 0.0)
        return {"embedding": hidden, "logits": hidden @ mlp.coefs_[1] + mlp.intercepts_[1]}

    return inputs(train), inputs(pool), inputs(ood), y[train]


def digits_experiment(seed: int = 0, n_train: int = 300) -> Experiment:
    """Digits 0–4 in-distribution (MLP trained on ``n_train`` of them), 5–9 OOD."""
    fit_in, pool_in, ood_in, y_train = digits_inputs(seed, n_train)
    scorers: list[tuple[str, Scorer]] = [
        ("energy", make_scorer("energy")),
        ("knn", make_scorer("knn", k=5)),
        ("mahalanobis", make_scorer("mahalanobis")),
    ]
    for _, scorer in scorers:
        scorer.fit(fit_in[scorer.input], y_train)
    return Experiment(
        "digits",
        tuple(name for name, _ in scorers),
        np.vstack([s.score(pool_in[s.input]) for _, s in scorers]),
        np.vstack([s.score(ood_in[s.input]) for _, s in scorers]),
    )


def shuttle_data() -> tuple[FloatArray, np.ndarray]:
    """river's bundled Shuttle: 9 numeric features, label 1 = anomaly."""
    from river.datasets import Shuttle

    rows = [(list(x.values()), y) for x, y in Shuttle()]
    return np.array([r for r, _ in rows], dtype=np.float64), np.array([y for _, y in rows])


def shuttle_experiment(seed: int = 0, n_train: int = 2000) -> Experiment:
    """river's Shuttle: normal rows in-distribution, anomalies OOD; tabular KNN + Mahalanobis."""
    X, y = shuttle_data()
    rng = np.random.default_rng(seed)
    normal = rng.permutation(np.flatnonzero(y == 0))
    train, pool, ood = normal[:n_train], normal[n_train:], np.flatnonzero(y == 1)
    scorers = [
        ("knn", make_scorer("knn", k=5, standardize=True, normalize=False)),
        ("mahalanobis", make_scorer("mahalanobis", standardize=True)),
    ]
    for _, scorer in scorers:
        scorer.fit(X[train])
    return Experiment(
        "shuttle",
        tuple(name for name, _ in scorers),
        np.vstack([s.score(X[pool]) for _, s in scorers]),
        np.vstack([s.score(X[ood]) for _, s in scorers]),
    )


# --------------------------------------------------------------------------- Monte Carlo
def lond_window(p: FloatArray, alpha: float) -> BatchDecision:
    """LOND over one window in arrival order, horizon = window length."""
    lond = LOND(alpha, horizon=p.size)
    flags = np.zeros(p.size, dtype=bool)
    for i, value in enumerate(p):
        lond.update(float(value))
        flags[i] = lond.rejected
    return BatchDecision(flags, lond.level)


def _bh_row(P: FloatArray, row: int, alpha: float) -> BatchDecision:
    return benjamini_hochberg(P[row], alpha)


def rules_for(exp: Experiment, alpha: float) -> dict[str, Callable[[FloatArray], BatchDecision]]:
    """Decision rules on a (K, n) p-value matrix (row k = scorer k)."""
    rules: dict[str, Callable[[FloatArray], BatchDecision]] = {
        f"bh[{name}]": functools.partial(_bh_row, row=k, alpha=alpha)
        for k, name in enumerate(exp.scorer_names)
    }
    rules["eg_bh"] = lambda P: ensemble_bh(P, alpha)  # base level 0.9·alpha
    rules["eg_bh[base=alpha]"] = lambda P: ensemble_bh(P, alpha, base_alpha=alpha)
    rules["eg_bh[base=alpha/2]"] = lambda P: ensemble_bh(P, alpha, base_alpha=alpha / 2)
    rules["eg_bh[twice_mean]"] = lambda P: ensemble_bh(P, alpha, merge="twice_mean")
    rules[f"lond[{exp.scorer_names[0]}]"] = lambda P: lond_window(P[0], alpha)
    return rules


def monte_carlo(
    exp: Experiment,
    m: int,
    alpha: float,
    reps: int,
    n_null: int = 192,
    n_ood: int = 64,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Mean FDP (FDR), its standard error and mean TPR of every rule over ``reps`` draws."""
    rng = np.random.default_rng([seed, m, int(alpha * 1000)])
    rules = rules_for(exp, alpha)
    fdp = {name: np.empty(reps) for name in rules}
    tpr = {name: np.empty(reps) for name in rules}
    is_ood = np.r_[np.zeros(n_null, dtype=bool), np.ones(n_ood, dtype=bool)]
    for r in range(reps):
        id_draw = rng.choice(exp.id_scores.shape[1], size=m + n_null, replace=False)
        ood_draw = rng.choice(exp.ood_scores.shape[1], size=n_ood, replace=False)
        cal = exp.id_scores[:, id_draw[:m]]
        test = np.hstack([exp.id_scores[:, id_draw[m:]], exp.ood_scores[:, ood_draw]])
        order = rng.permutation(n_null + n_ood)  # arrival order, for LOND
        test, truth = test[:, order], is_ood[order]
        P = np.vstack([conformal_p_values(test[k], cal[k]) for k in range(test.shape[0])])
        for name, rule in rules.items():
            rejected = rule(P).rejected
            fdp[name][r] = (rejected & ~truth).sum() / max(rejected.sum(), 1)
            tpr[name][r] = (rejected & truth).sum() / n_ood
    return {name: fdr_summary(fdp[name], tpr[name]) for name in rules}


def splits_monte_carlo(
    X: FloatArray,
    is_anomaly: np.ndarray,
    m: int,
    alpha: float,
    reps: int,
    splits: int = 5,
    n_null: int = 192,
    n_ood: int = 64,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """The stream decider's own path: a tabular KNN fitted by :class:`OODDecider` on half of the
    m calibration rows; g-BH / LOND use one split, eg-BH averages ``splits`` random splits."""
    from monitor.core.decisions import OODDecider
    from monitor.core.ood import KNN

    rng = np.random.default_rng([seed, m, int(alpha * 1000), splits])
    normal, anomalies = np.flatnonzero(~is_anomaly), np.flatnonzero(is_anomaly)
    truth = np.r_[np.zeros(n_null, dtype=bool), np.ones(n_ood, dtype=bool)]
    names = ("bh", "eg_bh", "eg_bh[twice_mean]", "lond")
    fdp, tpr = {n: np.empty(reps) for n in names}, {n: np.empty(reps) for n in names}
    for r in range(reps):
        ids = rng.choice(normal, size=m + n_null, replace=False)
        test_rows = np.r_[ids[m:], rng.choice(anomalies, size=n_ood, replace=False)]
        order = rng.permutation(truth.size)
        cal, test, t = {"features": X[ids[:m]]}, {"features": X[test_rows[order]]}, truth[order]
        knn = KNN(k=5, standardize=True, normalize=False)
        one = OODDecider("bh", alpha, scorers=[knn], seed=r, conformal="split")
        one_p = one.fit(cal).p_values(test)
        many = OODDecider("eg_bh", alpha, scorers=[knn], splits=splits, seed=r, conformal="split")
        many.fit(cal)
        P = many.p_values(test)
        decisions = {
            "bh": benjamini_hochberg(one_p[0], alpha),
            "eg_bh": ensemble_bh(P, alpha),
            "eg_bh[twice_mean]": ensemble_bh(P, alpha, merge="twice_mean"),
            "lond": lond_window(one_p[0], alpha),
        }
        for name, decision in decisions.items():
            rejected = decision.rejected
            fdp[name][r] = (rejected & ~t).sum() / max(rejected.sum(), 1)
            tpr[name][r] = (rejected & t).sum() / n_ood
    return {name: fdr_summary(fdp[name], tpr[name]) for name in names}


def fdr_summary(fdp: FloatArray, tpr: FloatArray) -> dict[str, float]:
    """Mean false-discovery proportion and TPR over Monte Carlo repetitions, with their SEs."""
    n = fdp.size
    return {
        "fdr": float(fdp.mean()),
        "fdr_se": float(fdp.std(ddof=1) / np.sqrt(n)),
        "tpr": float(tpr.mean()),
        "tpr_se": float(tpr.std(ddof=1) / np.sqrt(n)),
    }


def fdr_table(reps: int, sizes: Mapping[str, Sequence[int]], seed: int = 0) -> list[dict[str, Any]]:
    """Monte Carlo rows for every dataset, calibration size m and alpha in {0.05, 0.1}."""
    builders = {"digits": digits_experiment, "shuttle": shuttle_experiment}
    rows = []
    for name, ms in sizes.items():
        if name == "shuttle-splits":
            X, y = shuttle_data()
            runs = {
                (m, a): splits_monte_carlo(X, y == 1, m, a, reps, seed=seed)
                for m in ms
                for a in (0.05, 0.1)
            }
        else:
            exp = builders[name](seed)
            runs = {
                (m, a): monte_carlo(exp, m, a, reps, seed=seed) for m in ms for a in (0.05, 0.1)
            }
        for (m, alpha), result in runs.items():
            for rule, stats in result.items():
                ok = stats["fdr"] <= alpha + 3 * stats["fdr_se"]
                rows.append(
                    {
                        "dataset": name,
                        "m": m,
                        "alpha": alpha,
                        "rule": rule,
                        **stats,
                        "fdr_ok": bool(ok),
                    }
                )
    return rows


# --------------------------------------------------------------------------- throughput
def _events_per_second(fn: Callable[[], object], n_events: int, min_seconds: float = 0.5) -> float:
    fn()  # warm-up
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        fn()
        runs += 1
    return runs * n_events / (time.perf_counter() - start)


def scorer_throughput(dim: int = 128, n_cal: int = 5000, batch: int = 1024) -> dict[str, float]:
    """Events/s of each scorer scoring batches, fitted on ``n_cal`` points of width ``dim``."""
    rng = np.random.default_rng(0)
    n_classes = 10
    W, b = rng.normal(size=(n_classes, dim)) / np.sqrt(dim), rng.normal(size=n_classes)
    cal = np.maximum(rng.normal(size=(n_cal, dim)), 0.0)
    test = np.maximum(rng.normal(size=(batch, dim)), 0.0)
    labels = rng.integers(0, n_classes, n_cal)
    out = {}
    for name, cls in SCORERS.items():
        params = {"W": W, "b": b} if "W" in cls.__init__.__code__.co_varnames else {}
        scorer = make_scorer(name, **params)
        X_cal, X_test = (cal @ W.T + b, test @ W.T + b) if scorer.input == "logits" else (cal, test)
        scorer.fit(X_cal, labels)
        out[name] = _events_per_second(functools.partial(scorer.score, X_test), batch)
    fast_knn = make_scorer("knn", dtype="float32").fit(cal)
    out["knn[float32]"] = _events_per_second(functools.partial(fast_knn.score, test), batch)
    return out


def rule_throughput(window: int = 256, k: int = 5) -> dict[str, float]:
    """Events/s of each decision rule deciding windows of ``window`` p-values."""
    rng = np.random.default_rng(1)
    P = rng.uniform(size=(k, window)) ** 2
    return {
        "bh": _events_per_second(lambda: benjamini_hochberg(P[0], 0.1), window),
        f"eg_bh (K={k})": _events_per_second(lambda: ensemble_bh(P, 0.1), window),
        "lond": _events_per_second(lambda: lond_window(P[0], 0.1), window),
        "conformal_p_values (m=5000)": _events_per_second(
            lambda: conformal_p_values(P[0], rng.uniform(size=5000)), window
        ),
    }


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--reps", type=int, default=500, help="Monte Carlo repetitions")
    parser.add_argument("--quick", action="store_true", help="100 repetitions, m <= 200 only")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-fdr", action="store_true")
    args = parser.parse_args(argv)
    reps = 100 if args.quick else args.reps
    shuttle_sizes = [50, 100, 200] if args.quick else [50, 100, 200, 1000]
    sizes = {"digits": [50, 100, 200], "shuttle": shuttle_sizes, "shuttle-splits": shuttle_sizes}
    result: dict[str, Any] = {}
    if not args.skip_throughput:
        result["scorer_events_per_s"] = scorer_throughput()
        result["rule_events_per_s"] = rule_throughput()
    if not args.skip_fdr:
        result["fdr_reps"] = reps
        result["fdr"] = fdr_table(reps, sizes)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_human(result)
    return 0 if all(r["fdr_ok"] for r in result.get("fdr", [])) else 1


def _print_human(result: dict[str, Any]) -> None:
    for section in ("scorer_events_per_s", "rule_events_per_s"):
        if section in result:
            print(f"\n{section} (128-dim embeddings, 5000 calibration points / windows of 256)")
            for name, rate in result[section].items():
                print(f"  {name:32s} {rate:14,.0f}")
    if "fdr" in result:
        print(f"\nFDR Monte Carlo ({result['fdr_reps']} repetitions; n = 192 ID + 64 OOD)")
        print(
            f"  {'dataset':8s} {'m':>5s} {'alpha':>5s} {'rule':24s} {'FDR':>7s} {'±SE':>6s} "
            f"{'TPR':>6s} {'±SE':>6s} ok"
        )
        for r in result["fdr"]:
            print(
                f"  {r['dataset']:8s} {r['m']:5d} {r['alpha']:5.2f} {r['rule']:24s} "
                f"{r['fdr']:7.4f} {r['fdr_se']:6.4f} {r['tpr']:6.3f} {r['tpr_se']:6.3f} "
                f"{'yes' if r['fdr_ok'] else 'NO'}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
