"""Feature attribution of covariate alarms: power of the ranking and validity when the alarm
chooses the window (docs/explain.md).

1. Ranking: Shuttle rows (river's bundled data; features f2, f3, f4, f6, f7), 500 calibration
   rows and a window of 200 later rows whose features f3 and f7 are moved up by a fraction of
   their interquartile range; reported is how often f3 and f7 are the two first-ranked features,
   for several shift sizes, over ``--seeds`` seeds.
2. Validity with the alarm choosing the window: an exchangeable Shuttle stream (no shift) runs
   through a covariate monitor whose Shiryaev–Roberts threshold is low (``--threshold``, default
   20), so that false alarms are frequent; after each alarm the next 200 prediction events are
   attributed against the calibration rows, as the service does. Reported are the rejection
   rates P(p_value <= a) per feature and the family-wise rate P(min p_adjusted <= a), with their
   standard errors, over all the alarms of ``--streams`` seeded streams. Shuttle's tied integer
   readings make the KS test conservative, so the same runs on continuous data (``--continuous``:
   5 independent standard normal features, where the KS p-value is exact) show whether the
   choice of the window by the alarm costs validity.

    python bench/bench_attribution.py                 # the figures of docs/explain.md
    python bench/bench_attribution.py --streams 20    # quick look
    python bench/bench_attribution.py --continuous    # validity on continuous data
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from monitor.core.detectors import CovariateMonitor
from monitor.ops.datasets import SHUTTLE_COLUMNS, SHUTTLE_FEATURES, load_shuttle
from monitor.streams.attribution import AlarmAttribution, attribute_features

N_CALIBRATION, WINDOW = 500, 200
SHIFTED = ("f3", "f7")
LEVELS = (0.01, 0.05, 0.1)


def features() -> np.ndarray:
    data = load_shuttle()
    return data[:, [SHUTTLE_COLUMNS.index(c) for c in SHUTTLE_FEATURES]]


def ranking(seeds: int, shifts: tuple[float, ...]) -> None:
    X = features()
    cols = [SHUTTLE_FEATURES.index(c) for c in SHIFTED]
    q75, q25 = np.percentile(X[:, cols], [75, 25], axis=0)
    print(f"ranking: {SHIFTED} shifted, {N_CALIBRATION} calibration rows, window {WINDOW}")
    for shift in shifts:
        hits = 0
        for seed in range(seeds):
            rows = np.random.default_rng(seed).choice(X.shape[0], N_CALIBRATION + WINDOW,
                                                      replace=False)
            calibration, window = X[rows[:N_CALIBRATION]], X[rows[N_CALIBRATION:]].copy()
            window[:, cols] += shift * (q75 - q25)
            out = attribute_features(calibration, window, SHUTTLE_FEATURES)
            hits += {f["feature"] for f in out["features"][:2]} == set(SHIFTED)
        print(f"  shift {shift:.2f} IQR: shifted features ranked first in {hits}/{seeds} seeds")


def selected_p_values(
    streams: int, length: int, threshold: float, continuous: bool
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """The feature names, then per attributed false alarm the p-value of each feature (one
    row per alarm) and the smallest Holm-adjusted p-value."""
    X = np.random.default_rng(0).normal(size=(49_097, 5)) if continuous else features()
    names = tuple(f"x{j}" for j in range(5)) if continuous else SHUTTLE_FEATURES
    p_values: list[list[float]] = []
    p_min_adjusted: list[float] = []
    for seed in range(streams):
        rows = np.random.default_rng(1000 + seed).choice(X.shape[0], N_CALIBRATION + length,
                                                         replace=False)
        calibration, stream = X[rows[:N_CALIBRATION]], X[rows[N_CALIBRATION:]]
        monitor = CovariateMonitor("knn", calibration, threshold=threshold, seed=seed)
        attribution = AlarmAttribution(calibration, names, WINDOW)
        done = []
        for t in range(length):
            monitor.update(stream[t])
            done += attribution.add(stream[t : t + 1], t)
            for _ in monitor.last_alarms:
                attribution.open(f"{seed}-{t}")
        for d in done:
            by_name = {f["feature"]: f for f in d.attribution["features"]}
            p_values.append([by_name[name]["p_value"] for name in names])
            p_min_adjusted.append(min(f["p_adjusted"] for f in by_name.values()))
    return names, np.asarray(p_values).reshape(-1, len(names)), np.asarray(p_min_adjusted)


def selected_validity(streams: int, length: int, threshold: float, continuous: bool) -> None:
    started = time.perf_counter()
    names, p, p_min_adjusted = selected_p_values(streams, length, threshold, continuous)
    n = p.shape[0]
    data = "continuous N(0, 1) features" if continuous else "Shuttle"
    print(f"validity with the alarm choosing the window ({data}): {streams} streams of "
          f"{length} events, "
          f"SR threshold {threshold}, {n} attributed false alarms "
          f"({time.perf_counter() - started:.0f} s)")
    for a in LEVELS:
        se = math.sqrt(a * (1 - a) / max(n, 1))
        rates = ", ".join(f"{name} {r:.3f}" for name, r in zip(names, (p <= a).mean(0),
                                                                   strict=True))
        fwer = float(np.mean(p_min_adjusted <= a))
        print(f"  a = {a}: P(p <= a) {rates}; family-wise (Holm) {fwer:.3f}; "
              f"standard error {se:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--length", type=int, default=3000)
    parser.add_argument("--threshold", type=float, default=20.0)
    parser.add_argument("--continuous", action="store_true")
    args = parser.parse_args()
    if not args.continuous:
        ranking(args.seeds, (0.1, 0.15, 0.25, 0.5))
    selected_validity(args.streams, args.length, args.threshold, args.continuous)


if __name__ == "__main__":
    main()
