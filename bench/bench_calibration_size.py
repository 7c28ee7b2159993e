"""How the calibration size m limits detection and OOD flags (docs/detectors.md, "How large a
calibration set").

Run ``python bench/bench_calibration_size.py`` (``--seeds N``, ``--json``; a few seconds). For
each m it prints:

- the p-value resolution 1/(m+1): an event stranger than all m calibration rows (and every
  earlier event) has the smoothed conformal p-value U/(m+1+k), U uniform, never a smaller
  p-value "on purpose";
- the plug-in power bet's largest factor at that p-value, ε_min·(m+1)^(1−ε_min) (ε_min = 0.05:
  the conditional monitor's default bet), which bounds the evidence one event adds;
- ``floor``: the fewest events of p = 1/(m+1) for Shiryaev–Roberts on the plug-in power to
  reach 100 000 (:func:`monitor.frontdoor.detection_floor`; the exponent needs a few events
  to move off 1, so this is more than log(10⁵) / log(largest factor));
- ``worst case``: the same on real conformal p-values of events each stranger than all
  before (the reference grows with them), the median and the fewest over seeds of U;
- the Composite Jumper's floor (the covariate monitor's default bet), whose factor is at most
  1.5 whatever p is, so the same for every m;
- ``ood``: the fewest flags in one window of 256 before BH at α = 0.1 can flag any, since
  p ≥ 1/(m+1) (docs/algorithms.md, "Discreteness floor").

``--shuttle`` adds measured delays on real data: the Shuttle streams of bench/bench_budget.py
(500 stable events, then ``concept`` or ``extreme_covariate``; m calibration rows), the median
over seeds of the events from the change to the conditional monitor's first crossing of
100 000, and to the stream's (either detector's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_budget import delay, log_statistics
from monitor.core.martingales import ConformalPValue
from monitor.core.martingales.alarms import ShiryaevRoberts
from monitor.core.martingales.betting import CompositeJumper, PlugInPower
from monitor.frontdoor import detection_floor, ood_floor

SIZES = (100, 200, 500, 1000, 2000, 5000)
THRESHOLD = 1e5
MIN_EPSILON = 0.05  # PlugInPower's default ε_min


def worst_case(m: int, seed: int, n: int = 200) -> int:
    """Events to the SR alarm when each event's score exceeds every earlier score."""
    p_values = ConformalPValue(reference=np.arange(m, dtype=float), seed=seed)
    ps = []
    for k in range(n):
        p_values.update(float(m + k))
        ps.append(p_values.p_value)
    hit = ShiryaevRoberts(threshold=THRESHOLD).update_many(PlugInPower().update_many(ps))
    assert hit is not None
    return hit + 1


def jumper_floor(m: int) -> int:
    path = CompositeJumper().update_many(np.full(200, 1.0 / (m + 1)))
    hit = ShiryaevRoberts(threshold=THRESHOLD).update_many(path)
    assert hit is not None
    return hit + 1


def row(m: int, seeds: int) -> dict[str, Any]:
    cases = [worst_case(m, seed) for seed in range(seeds)]
    return {"m": m, "resolution": 1.0 / (m + 1),
            "largest_factor": MIN_EPSILON * (m + 1) ** (1.0 - MIN_EPSILON),
            "floor": detection_floor(m, THRESHOLD), "worst_case_median": float(np.median(cases)),
            "worst_case_fewest": min(cases), "jumper_floor": jumper_floor(m),
            "ood_flags": ood_floor(m)}


def shuttle(m: int, scenario: str, seeds: int) -> dict[str, Any]:
    """Median delays on Shuttle with m calibration rows (``--shuttle``)."""
    runs = [log_statistics(scenario, seed, n_calibration=m) for seed in range(seeds)]
    return {"m": m, "scenario": scenario, "seeds": seeds,
            "conditional": float(np.median([delay((c,), THRESHOLD) for _, c in runs])),
            "stream": float(np.median([delay(r, THRESHOLD) for r in runs]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--shuttle", type=int, default=0, metavar="SEEDS",
                        help="also measure Shuttle delays over this many seeds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [row(m, args.seeds) for m in SIZES]
    measured = [shuttle(m, scenario, args.shuttle) for scenario in ("concept",
                "extreme_covariate") for m in (100, 500, 2000)] if args.shuttle else []
    if args.json:
        print(json.dumps({"floors": rows, "shuttle": measured}, indent=2))
        return
    for r in measured:
        print(f"shuttle {r['scenario']}, m = {r['m']}: median delay {r['conditional']:g} "
              f"(conditional), {r['stream']:g} (stream), {r['seeds']} seeds")
    print("| m | 1/(m+1) | largest factor | floor | worst case (median, fewest) | "
          "Composite Jumper | OOD flags in 256 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        size = f"{r['m']:,}".replace(",", " ")
        print(f"| {size} | {r['resolution']:.5f} | {r['largest_factor']:.1f} | {r['floor']} | "
              f"{r['worst_case_median']:g}, {r['worst_case_fewest']} | {r['jumper_floor']} | "
              f"{r['ood_flags']} |")


if __name__ == "__main__":
    main()
