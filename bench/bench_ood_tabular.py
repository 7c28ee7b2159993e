"""OOD power on tabular data and embeddings: the stream decider against a plain baseline.

Run ``python bench/bench_ood_tabular.py`` (``--reps N`` repetitions per row, default 200;
``--json`` for machine-readable output). Everything is bundled, nothing is downloaded.

Tabular set-up (``shuttle-hot``). river's bundled Shuttle, normal rows only (45 586 rows, nine
sensor readings). The rows whose ``f7`` lies above its 90th percentile are the region the model
never saw (the analogue of "hot hours" in a bike-sharing demand model: a covariate region
absent from training and calibration); the other rows are in-distribution. Each repetition
draws m calibration rows and one window of ``window`` events, 20 % of them from the hot region,
without replacement, so calibration rows and in-distribution events are exchangeable.

Embedding set-up (``digits``). scikit-learn's ``load_digits``: digits 0–4 in-distribution, an
MLP fitted on 300 of them gives 64-dim hidden activations (``embedding``) and logits; digits 5–9
are OOD; the same 80/20 windows.

Methods, all at the same alpha and on the same draws:

- ``eg_bh`` / ``bh``: :class:`monitor.core.decisions.OODDecider` with its defaults (one KNN, k = 1,
  full-conformal p-values against all m calibration rows);
- ``eg_bh[split]`` / ``bh[split]``: the previous defaults (tabular: KNN k = 5 + Mahalanobis,
  each fitted on a random half and calibrated on the other half, 5 splits each for eg-BH;
  digits, which has logits: energy + MSP, which need no fit);
- ``baseline``: plain split-conformal BH on a 1-NN score of standardised features (half the
  calibration rows as the reference, half to calibrate; digits: L2-normalised embeddings);
- ``bh[full k=K]``: full-conformal KNN with other k, to choose k.

``--profile`` prints the diagnosis figures of docs/ood.md instead (p-value floor, BH cut,
agreement between eg-BH's split runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ood import digits_inputs, fdr_summary

from monitor.core.decisions import (
    OODDecider,
    benjamini_hochberg,
    conformal_p_values,
    ensemble_bh,
)
from monitor.core.ood import KNN, MSP, Energy, Mahalanobis, Scorer
from monitor.ops.datasets import load_shuttle

FloatArray = np.ndarray
Inputs = dict[str, FloatArray]
#: A method: (calibration inputs, window inputs, seed) -> flags of the window's events.
Method = Callable[[Inputs, Inputs, int], np.ndarray]

OOD_SHARE = 0.2
HOT_QUANTILE = 0.9


class Pools:
    """In-distribution and OOD pools of model inputs (dicts of row-aligned matrices)."""

    def __init__(self, name: str, kind: str, id_pool: Inputs, ood_pool: Inputs) -> None:
        self.name, self.kind, self.id_pool, self.ood_pool = name, kind, id_pool, ood_pool

    def draw(self, rng: np.random.Generator, m: int, window: int) -> tuple[Inputs, Inputs, Any]:
        """m calibration rows and a window with 20 % OOD rows, in random arrival order."""
        n_ood = round(OOD_SHARE * window)
        id_rows = rng.choice(_rows(self.id_pool), size=m + window - n_ood, replace=False)
        ood_rows = rng.choice(_rows(self.ood_pool), size=n_ood, replace=False)
        order = rng.permutation(window)
        cal = {k: X[id_rows[:m]] for k, X in self.id_pool.items()}
        test = {
            k: np.vstack([X[id_rows[m:]], self.ood_pool[k][ood_rows]])[order]
            for k, X in self.id_pool.items()
        }
        truth = np.r_[np.zeros(window - n_ood, dtype=bool), np.ones(n_ood, dtype=bool)][order]
        return cal, test, truth


def _rows(pool: Inputs) -> int:
    return next(iter(pool.values())).shape[0]


def shuttle_hot() -> Pools:
    """Shuttle normal rows; ``f7`` above its 90th percentile = the region never seen."""
    data = load_shuttle()
    X = np.asarray(data[data[:, 9] == 0, :9])
    hot = X[:, 6] > np.quantile(X[:, 6], HOT_QUANTILE)
    return Pools("shuttle-hot", "features", {"features": X[~hot]}, {"features": X[hot]})


def digits() -> Pools:
    """Digits 0–4 (held-out pool of the MLP) in-distribution, 5–9 OOD; embeddings and logits."""
    _, pool, ood, _ = digits_inputs(seed=0)
    return Pools("digits", "embedding", pool, ood)


# --------------------------------------------------------------------------- methods
def decider_method(rule: str, alpha: float, window: int, **kwargs: Any) -> Method:
    """The stream decider's own path: fit on the calibration inputs, add the window, read it."""

    def run(cal: Inputs, test: Inputs, seed: int) -> np.ndarray:
        decider = OODDecider(rule, alpha=alpha, window=window, seed=seed, **kwargs).fit(cal)
        ids = [str(i) for i in range(window)]
        decider.add_many(ids, test)
        (decision,) = decider.windows()
        return np.isin(ids, decision.flagged_ids)

    return run


def baseline_method(alpha: float, kind: str) -> Method:
    """Split-conformal BH on a 1-NN score: half the calibration rows as the reference."""

    def run(cal: Inputs, test: Inputs, seed: int) -> np.ndarray:
        X = cal[kind]
        half = np.random.default_rng([seed, 1]).permutation(X.shape[0])
        ref, calib = X[half[: X.shape[0] // 2]], X[half[X.shape[0] // 2 :]]
        scorer = _knn(kind, k=1).fit(ref)
        p = conformal_p_values(scorer.score(test[kind]), scorer.score(calib))
        return benjamini_hochberg(p, alpha).rejected

    return run


def _knn(kind: str, k: int) -> KNN:
    if kind == "features":
        return KNN(k=k, standardize=True, normalize=False)
    return KNN(k=k)


def _old_defaults(kind: str) -> list[Scorer]:
    """The defaults before full conformal: tabular KNN k = 5 + Mahalanobis; with logits
    available (digits), energy + MSP."""
    if kind == "features":
        return [_knn(kind, 5), Mahalanobis(standardize=True)]
    return [Energy(), MSP()]


def methods(pools: Pools, alpha: float, window: int, ks: Sequence[int]) -> dict[str, Method]:
    """Every method of the module docstring for one data set."""
    out: dict[str, Method] = {
        "eg_bh": decider_method("eg_bh", alpha, window),
        "bh": decider_method("bh", alpha, window),
        "eg_bh[split]": decider_method(
            "eg_bh", alpha, window, scorers=_old_defaults(pools.kind), conformal="split"
        ),
        "bh[split]": decider_method(
            "bh", alpha, window, scorers=_old_defaults(pools.kind), conformal="split"
        ),
        "baseline": baseline_method(alpha, pools.kind),
    }
    for k in ks:
        out[f"bh[full k={k}]"] = decider_method("bh", alpha, window, scorers=[_knn(pools.kind, k)])
    return out


# --------------------------------------------------------------------------- Monte Carlo
def power_monte_carlo(
    pools: Pools,
    m: int,
    alpha: float,
    window: int,
    reps: int,
    seed: int = 0,
    names: Sequence[str] | None = None,
    ks: Sequence[int] = (),
) -> dict[str, dict[str, float]]:
    """FDR (mean FDP), TPR and their standard errors of each method over ``reps`` draws.

    Every method sees the same draws, so differences between methods are paired.
    """
    chosen = methods(pools, alpha, window, ks)
    if names is not None:
        chosen = {name: chosen[name] for name in names}
    fdp = {name: np.empty(reps) for name in chosen}
    tpr = {name: np.empty(reps) for name in chosen}
    rng = np.random.default_rng([seed, m, window, int(alpha * 1000)])
    for r in range(reps):
        cal, test, truth = pools.draw(rng, m, window)
        for name, method in chosen.items():
            flags = method(cal, test, r)
            fdp[name][r] = (flags & ~truth).sum() / max(int(flags.sum()), 1)
            tpr[name][r] = (flags & truth).sum() / truth.sum()
    return {name: fdr_summary(fdp[name], tpr[name]) for name in chosen}


# --------------------------------------------------------------------------- diagnosis
def profile(pools: Pools, m: int, alpha: float, window: int, reps: int) -> dict[str, float]:
    """Why the split eg-BH flags nothing: the p-value floor and the split runs' agreement.

    For eg-BH's 5 split runs of the KNN alone (at base level 0.9·alpha): the mean number of
    rejections per run, the mean size of the rejection set common to all runs, and how often
    eg-BH rejects anything. A point rejected by every run clears e-BH only if at least
    0.9·(harmonic mean of the R_k) points are rejected by every run.
    """
    rng = np.random.default_rng([7, m, window])
    per_run, common, any_rejected = [], [], []
    for r in range(reps):
        cal, test, _ = pools.draw(rng, m, window)
        decider = OODDecider(
            "eg_bh", alpha, window, scorers=[_knn(pools.kind, 5)], seed=r, conformal="split"
        )
        P = decider.fit(cal).p_values(test)
        runs = np.array([benjamini_hochberg(p, 0.9 * alpha).rejected for p in P])
        per_run.append(runs.sum(axis=1).mean())
        common.append(runs.all(axis=0).sum())
        any_rejected.append(ensemble_bh(P, alpha).rejected.any())
    m_split = m - round(0.5 * m)
    return {
        "calibration points per p-value (split)": m_split,
        "calibration points per p-value (full)": m,
        "smallest p-value (split)": 1 / (m_split + 1),
        "smallest p-value (full)": 1 / (m + 1),
        "BH cut for R = 1": alpha / window,
        "rejections needed for any BH rejection (split)": window / (alpha * (m_split + 1)),
        "rejections needed for any BH rejection (full)": window / (alpha * (m + 1)),
        "mean rejections per split run": float(np.mean(per_run)),
        "mean rejections common to all 5 runs": float(np.mean(common)),
        "share of windows where split eg-BH rejects": float(np.mean(any_rejected)),
    }


# --------------------------------------------------------------------------- CLI
def table(reps: int, sizes: Mapping[str, Sequence[tuple[int, int]]]) -> list[dict[str, Any]]:
    """Rows (data, m, window, method, figures) for every data set and (m, window)."""
    builders = {"shuttle-hot": shuttle_hot, "digits": digits}
    rows = []
    for name, settings in sizes.items():
        pools = builders[name]()
        for m, window in settings:
            result = power_monte_carlo(pools, m, 0.1, window, reps, ks=(1, 5, 10))
            rows += [
                {"data": name, "m": m, "window": window, "method": method, **stats}
                for method, stats in result.items()
            ]
    return rows


SIZES: dict[str, list[tuple[int, int]]] = {
    "shuttle-hot": [(200, 100), (400, 100), (400, 256), (1000, 100), (1000, 256)],
    "digits": [(200, 100), (200, 256), (400, 100)],
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if args.profile:
        out: Any = {
            f"{p.name} m={m} window={w}": profile(p, m, 0.1, w, args.reps)
            for p in (shuttle_hot(),)
            for m, w in ((400, 100), (1000, 256))
        }
        print(json.dumps(out, indent=2))
        return 0
    rows = table(args.reps, SIZES)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"alpha 0.1, {OOD_SHARE:.0%} OOD per window, {args.reps} repetitions; TPR ± SE, FDR ± SE")
    for row in rows:
        print(
            f"{row['data']:12s} m={row['m']:5d} window={row['window']:4d} {row['method']:15s}"
            f" TPR {row['tpr']:.3f} ± {row['tpr_se']:.3f}"
            f"  FDR {row['fdr']:.3f} ± {row['fdr_se']:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
