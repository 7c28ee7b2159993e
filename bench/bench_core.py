"""Throughput of the statistical core, each beside river's ADWIN measured in the same run.

    python bench/bench_core.py [--json] [--events N]

Figures (events per second, one core):
- ``ctm_batch``: conformal_p_values + CompositeJumper.update_many + ShiryaevRoberts.update_many;
- ``ctm_batch_no_numba``: the same with the interpreted kernels (numba's ``py_func``);
- ``ctm_per_event``: ConformalPValue.update + CompositeJumper.update + ShiryaevRoberts.update;
- ``wctm_per_event``: WeightedConformalPValue.update (adapting, d = 5, batch_size = 32) +
  CompositeJumper.update + ShiryaevRoberts.update, with 1 000 calibration points;
- ``adwin_per_event``: river ``drift.ADWIN().update`` on the same kind of stream.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from river import drift

import monitor.martingales.betting._jumpers as jumpers_mod
import monitor.martingales.pvalues as pvalues_mod
from monitor.martingales import (
    CompositeJumper,
    ConformalPValue,
    OnlineDensityRatio,
    ShiryaevRoberts,
    WeightedConformalPValue,
    conformal_p_values,
)
from monitor.martingales._jit import HAVE_NUMBA


def rate(n: int, run: Callable[[], object]) -> float:
    """Events per second of ``run`` (best of three, after one warm-up call)."""
    run()
    best = min(_timed(run) for _ in range(3))
    return n / best


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def ctm_batch(scores: np.ndarray, reference: np.ndarray) -> Callable[[], object]:
    def run() -> object:
        p = conformal_p_values(scores, reference, seed=0)
        return ShiryaevRoberts(1e4).update_many(CompositeJumper().update_many(p))

    return run


@contextmanager
def interpreted_kernels() -> Iterator[None]:
    """Swap the numba kernels for their pure-Python originals."""
    saved = pvalues_mod._p_values_kernel, jumpers_mod._jumpers_path
    pvalues_mod._p_values_kernel = getattr(saved[0], "py_func", saved[0])
    jumpers_mod._jumpers_path = getattr(saved[1], "py_func", saved[1])
    try:
        yield
    finally:
        pvalues_mod._p_values_kernel, jumpers_mod._jumpers_path = saved


def ctm_per_event(scores: list[float], reference: np.ndarray) -> Callable[[], object]:
    def run() -> object:
        cp, bet, rule = ConformalPValue(reference, seed=0), CompositeJumper(), ShiryaevRoberts()
        for s in scores:
            cp.update(s)
            bet.update(cp.p_value)
            rule.update(bet.log_martingale)
        return rule.alarm

    return run


def wctm_per_event(n: int, seed: int = 0) -> Callable[[], object]:
    rng = np.random.default_rng(seed)
    x_cal, s_cal = rng.normal(size=(1000, 5)), np.abs(rng.normal(size=1000))
    xs, ss = rng.normal(0.3, 1.0, size=(n, 5)), np.abs(rng.normal(size=n)).tolist()

    def run() -> object:
        wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(5, seed=0), seed=0)
        bet, rule = CompositeJumper(), ShiryaevRoberts()
        wcp.start_adaptation()
        for s, x in zip(ss, xs, strict=True):
            wcp.update(s, x)
            bet.update(wcp.p_value)
            rule.update(bet.log_martingale)
        return rule.alarm

    return run


def adwin_per_event(values: list[float]) -> Callable[[], object]:
    def run() -> object:
        adwin = drift.ADWIN()
        for v in values:
            adwin.update(v)
        return adwin.drift_detected

    return run


def measure(events: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    scores, reference = rng.normal(size=events), rng.normal(size=1000)
    per_event_n, wctm_n, slow_n = min(events, 200_000), min(events, 10_000), min(events, 100_000)
    figures = {
        "ctm_batch": rate(events, ctm_batch(scores, reference)),
        "ctm_per_event": rate(per_event_n, ctm_per_event(scores[:per_event_n].tolist(), reference)),
        "wctm_per_event": rate(wctm_n, wctm_per_event(wctm_n)),
        "adwin_per_event": rate(per_event_n, adwin_per_event(scores[:per_event_n].tolist())),
    }
    with interpreted_kernels():
        figures["ctm_batch_no_numba"] = rate(slow_n, ctm_batch(scores[:slow_n], reference))
    adwin = figures["adwin_per_event"]
    return {
        "events_per_second": {k: round(v) for k, v in figures.items()},
        "ratio_to_adwin": {k: round(v / adwin, 2) for k, v in figures.items()},
        "goals": {"ctm_batch": 1_000_000, "ctm_per_event": 200_000, "wctm_per_event": 100_000},
        "numba": HAVE_NUMBA,
        "events": events,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--events", type=int, default=1_000_000, help="batch stream length")
    args = parser.parse_args()
    result = measure(args.events)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"statistical core throughput (events/s, one core; numba={result['numba']})")
    for name, value in result["events_per_second"].items():
        goal = result["goals"].get(name)
        goal_text = f"  goal {goal:>9,}" if goal else ""
        print(f"  {name:<20} {value:>12,}  x{result['ratio_to_adwin'][name]:<7} ADWIN{goal_text}")


if __name__ == "__main__":
    main()
