"""Throughput of the statistical core, each beside river's ADWIN measured in the same run.

    python bench/bench_core.py [--json] [--events N] [--cpu-time]

Figures (events per second, one core):
- ``ctm_batch``: conformal_p_values + CompositeJumper.update_many + ShiryaevRoberts.update_many;
- ``ctm_batch_no_numba``: the same with the interpreted kernels (numba's ``py_func``);
- ``ctm_per_event``: ConformalPValue.update + CompositeJumper.update + ShiryaevRoberts.update;
- ``wctm_per_event``: WeightedConformalPValue.update (adapting, d = 5, batch_size = 32) +
  CompositeJumper.update + ShiryaevRoberts.update, with 1 000 calibration points;
- ``adwin_per_event``: river ``drift.ADWIN().update`` on the same kind of stream.

``--scaling`` adds the cost of one exact online p-value (µs per update) against the reference size,
for the compiled sorted array + √n buffer that ``ConformalPValue`` uses and for a
``sortedcontainers.SortedList`` (O(log n)) doing the same rank query and insert.
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
from sortedcontainers import SortedList

import monitor.core.martingales.betting._jumpers as jumpers_mod
import monitor.core.martingales.pvalues as pvalues_mod
from monitor.core.martingales import (
    CompositeJumper,
    ConformalPValue,
    OnlineDensityRatio,
    ShiryaevRoberts,
    WeightedConformalPValue,
    conformal_p_values,
)
from monitor.core.martingales.jit import HAVE_NUMBA

#: Wall-clock by default; ``--cpu-time`` switches to process CPU time, which a machine shared
#: with other jobs inflates much less.
_clock: Callable[[], float] = time.perf_counter


def rate(n: int, run: Callable[[], object]) -> float:
    """Events per second of ``run`` (best of three, after one warm-up call)."""
    run()
    best = min(_timed(run) for _ in range(3))
    return n / best


def _timed(run: Callable[[], object]) -> float:
    start = _clock()
    run()
    return _clock() - start


def ctm_batch(scores: np.ndarray, reference: np.ndarray) -> Callable[[], object]:
    def run() -> object:
        p = conformal_p_values(scores, reference, seed=0)
        return ShiryaevRoberts(1e4).update_many(CompositeJumper().update_many(p))

    return run


@contextmanager
def interpreted_kernels() -> Iterator[None]:
    """Swap the numba kernels of the batch path for their pure-Python originals."""
    saved = pvalues_mod._p_values_kernel, jumpers_mod._jumpers_path, jumpers_mod._jumpers_step
    pvalues_mod._p_values_kernel = getattr(saved[0], "py_func", saved[0])
    jumpers_mod._jumpers_path = getattr(saved[1], "py_func", saved[1])
    jumpers_mod._jumpers_step = getattr(saved[2], "py_func", saved[2])
    try:
        yield
    finally:
        pvalues_mod._p_values_kernel, jumpers_mod._jumpers_path, jumpers_mod._jumpers_step = saved


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


def p_value_cost_by_reference_size(
    sizes: tuple[int, ...] = (10**4, 10**5, 10**6, 4 * 10**6), updates: int = 50_000
) -> dict[str, dict[str, float]]:
    """µs per exact online p-value update at each reference size: ours vs a SortedList."""
    rng = np.random.default_rng(0)
    out: dict[str, dict[str, float]] = {}
    for n in sizes:
        reference, scores = rng.normal(size=n), rng.normal(size=updates).tolist()
        uniforms = rng.random(updates).tolist()
        cp = ConformalPValue(reference, seed=0)
        cp.update(0.0)  # compile outside the timing
        start = _clock()
        for s in scores:
            cp.update(s)
        ours = (_clock() - start) / updates * 1e6
        sl = SortedList(reference.tolist())
        start = _clock()
        for s, u in zip(scores, uniforms, strict=True):
            lo, hi, size = sl.bisect_left(s), sl.bisect_right(s), len(sl)
            _ = ((size - hi) + u * (hi - lo + 1)) / (size + 1)
            sl.add(s)
        sorted_list = (_clock() - start) / updates * 1e6
        out[str(n)] = {
            "compiled_buffered_us": round(ours, 2), "sortedlist_us": round(sorted_list, 2)
        }
    return out


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
        "clock": "cpu" if _clock is time.process_time else "wall",
        "events": events,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--events", type=int, default=1_000_000, help="batch stream length")
    parser.add_argument("--cpu-time", action="store_true", help="time with process CPU time")
    parser.add_argument("--scaling", action="store_true",
                        help="also time one p-value update against the reference size")
    args = parser.parse_args()
    if args.cpu_time:
        global _clock
        _clock = time.process_time
    result = measure(args.events)
    if args.scaling:
        result["p_value_us_by_reference_size"] = p_value_cost_by_reference_size()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"statistical core throughput (events/s, one core, {result['clock']} clock; "
          f"numba={result['numba']})")
    for name, value in result["events_per_second"].items():
        goal = result["goals"].get(name)
        goal_text = f"  goal {goal:>9,}" if goal else ""
        print(f"  {name:<20} {value:>12,}  x{result['ratio_to_adwin'][name]:<7} ADWIN{goal_text}")
    for n, cost in result.get("p_value_us_by_reference_size", {}).items():
        print(f"  p-value at n = {int(n):>9,}: {cost['compiled_buffered_us']:>6} µs (SortedList "
              f"{cost['sortedlist_us']} µs)")


if __name__ == "__main__":
    main()
