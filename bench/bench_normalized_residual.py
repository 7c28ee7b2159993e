"""``normalized_residual`` against ``abs_residual`` on a heteroscedastic real stream (Shuttle).

Run ``python bench/bench_normalized_residual.py`` (``--seeds N``, ``--json``). The Shuttle
regression model's errors are strongly heteroscedastic (the median |y − ŷ| is about 0.2 on the
third of inputs where it is smallest and about 6 on the third where it is largest). The scale
model σ̂(x) is fitted once, on a split of the pool that no calibration set or stream ever uses
(a gradient-boosted regression of |y − ŷ| on x, floored at the 10th percentile of |y − ŷ| on that
split so that it is positive), as a deployed model's predicted scale would be: fixed before the
calibration and test data.

Per seed, from the rest of the pool: ``n_calibration`` calibration rows and a stream of
``n_stable`` stable rows followed by ``n_shift`` rows in which the label of every *low-noise*
input (σ̂(x) below the lower tercile of σ̂ on the fit split) is moved by ``delta`` (a concept
shift confined to the inputs where the model is precise; the others are untouched). Both scores
run the same conformal test martingale: smoothed conformal p-values with a growing reference
(Vovk, Gammerman & Shafer 2022, Sec. 8), the stream's default conditional betting
(``plug_in_power``) and Shiryaev–Roberts at the default threshold 10 000. Reported: the share of
seeds with a false alarm before the change, the share detecting within the ``n_shift`` events and
the mean detection delay (a seed not detecting counts as ``n_shift``, so the mean is a lower
bound for that score).

Validity: Ville's rule at ``alpha`` on exchangeable streams (no shift) scored with
``normalized_residual``; the share of streams with any alarm must stay below alpha (reported
with its bound alpha + 3 standard errors).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.martingales import conformal_p_values, make_alarm_rule, make_betting
from monitor.core.scores import abs_residual, normalized_residual
from monitor.ops.datasets import load_shuttle_regression

#: Pool rows the scale model is fitted on (never drawn for calibration or streams).
N_SCALE_FIT = 4000


@dataclass(frozen=True)
class ScaledPool:
    """The Shuttle pool without the scale-fit split, with the fixed σ̂(x) of every row."""

    y: np.ndarray
    pred: np.ndarray
    scale: np.ndarray
    low_noise: np.ndarray  # σ̂(x) below the lower tercile of σ̂ on the fit split


@cache
def scaled_pool() -> ScaledPool:
    """Fit σ̂ on a fixed split of the pool (once) and score the rest of the pool with it."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    task = load_shuttle_regression()
    residual = np.abs(task.y - task.pred)
    order = np.random.default_rng(20261201).permutation(task.y.size)
    fit, rest = order[:N_SCALE_FIT], order[N_SCALE_FIT:]
    model = HistGradientBoostingRegressor(max_iter=100, loss="absolute_error", random_state=0)
    with threadpool_limits(1):
        model.fit(task.X[fit], residual[fit])
        fitted, predicted = model.predict(task.X[fit]), model.predict(task.X[rest])
    floor = float(np.quantile(residual[fit], 0.1))
    scale = np.maximum(predicted, floor)
    cut = float(np.quantile(np.maximum(fitted, floor), 1 / 3))
    return ScaledPool(task.y[rest], task.pred[rest], scale, scale < cut)


def _alarm_index(scores: np.ndarray, reference: np.ndarray, seed: int, rule: Any) -> int | None:
    p = conformal_p_values(scores, reference, seed)
    return rule.update_many(make_betting("plug_in_power").update_many(p))


def detection(
    seed: int, delta: float = 1.0, n_calibration: int = 500, n_stable: int = 500,
    n_shift: int = 1500, threshold: float = 10_000.0,
) -> dict[str, tuple[bool, int]]:
    """One seed: per score, (false alarm before the change, detection delay capped at n_shift)."""
    pool = scaled_pool()
    rows = np.random.default_rng(seed).permutation(pool.y.size)[
        : n_calibration + n_stable + n_shift]
    cal, stream = rows[:n_calibration], rows[n_calibration:]
    y = pool.y[stream].copy()
    after = np.arange(stream.size) >= n_stable
    y[after & pool.low_noise[stream]] += delta
    scores = {
        "abs_residual": (abs_residual(pool.y[cal], pool.pred[cal]),
                         abs_residual(y, pool.pred[stream])),
        "normalized_residual": (
            normalized_residual(pool.y[cal], pool.pred[cal], pool.scale[cal]),
            normalized_residual(y, pool.pred[stream], pool.scale[stream]),
        ),
    }
    out = {}
    for name, (reference, test) in scores.items():
        rule = make_alarm_rule("shiryaev_roberts", threshold=threshold)
        hit = _alarm_index(test, reference, seed, rule)
        false_alarm = hit is not None and hit < n_stable
        if false_alarm:  # the delay is measured from a fresh start at the change
            rule = make_alarm_rule("shiryaev_roberts", threshold=threshold)
            hit = _alarm_index(test[n_stable:], reference, seed + 1, rule)
            hit = None if hit is None else hit + n_stable
        delay = n_shift if hit is None else hit - n_stable
        out[name] = (false_alarm, delay)
    return out


def detection_summary(seeds: range, **kwargs: Any) -> dict[str, dict[str, float]]:
    """Per score: false-alarm share, detection share, mean delay (and its standard error), and
    the paired difference of delays (normalized − abs) with its standard error."""
    runs = [detection(seed, **kwargs) for seed in seeds]
    n_shift = kwargs.get("n_shift", 1500)
    out: dict[str, dict[str, float]] = {}
    for name in ("abs_residual", "normalized_residual"):
        delays = np.array([r[name][1] for r in runs], float)
        out[name] = {
            "false_alarm": float(np.mean([r[name][0] for r in runs])),
            "detected": float(np.mean(delays < n_shift)),
            "mean_delay": float(delays.mean()),
            "se": float(delays.std(ddof=1) / math.sqrt(delays.size)),
        }
    diff = np.array([r["normalized_residual"][1] - r["abs_residual"][1] for r in runs], float)
    out["paired"] = {"mean": float(diff.mean()),
                     "se": float(diff.std(ddof=1) / math.sqrt(diff.size))}
    return out


def ville_rate(seeds: range, alpha: float = 0.05, n_calibration: int = 500,
               n_stream: int = 1000) -> dict[str, float]:
    """Share of exchangeable ``normalized_residual`` streams on which Ville's rule at ``alpha``
    ever alarms (composite_jumper and plug_in_power betting), with the bound alpha + 3 s.e."""
    pool = scaled_pool()
    scores = normalized_residual(pool.y, pool.pred, pool.scale)
    alarms = {"composite_jumper": 0, "plug_in_power": 0}
    for seed in seeds:
        rows = np.random.default_rng(seed).permutation(pool.y.size)[: n_calibration + n_stream]
        p = conformal_p_values(scores[rows[n_calibration:]], scores[rows[:n_calibration]], seed)
        for betting in alarms:
            rule = make_alarm_rule("ville", alpha=alpha)
            alarms[betting] += rule.update_many(make_betting(betting).update_many(p)) is not None
    n = len(seeds)
    return {**{k: v / n for k, v in alarms.items()},
            "bound": alpha + 3 * math.sqrt(alpha * (1 - alpha) / n)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--delta", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = {
        "detection": detection_summary(range(args.seeds), delta=args.delta),
        "validity": ville_rate(range(1000, 1000 + args.seeds)),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"concept shift of {args.delta} on low-noise inputs, {args.seeds} seeds "
          "(SR 10 000, plug_in_power, 1500 events after the change)")
    for name in ("abs_residual", "normalized_residual"):
        r = result["detection"][name]
        print(f"  {name:20s} false alarm {r['false_alarm']:.3f}  detected {r['detected']:.3f}"
              f"  mean delay {r['mean_delay']:7.1f} ± {r['se']:.1f}")
    paired = result["detection"]["paired"]
    print(f"  paired delay difference (normalized - abs): {paired['mean']:.1f}"
          f" ± {paired['se']:.1f}")
    v = result["validity"]
    print(f"Ville alpha 0.05 on exchangeable normalized_residual streams: composite_jumper "
          f"{v['composite_jumper']:.3f}, plug_in_power {v['plug_in_power']:.3f} "
          f"(bound {v['bound']:.3f})")


if __name__ == "__main__":
    main()
