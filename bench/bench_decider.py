"""µs per event of the stream OOD decider: ``OODDecider.add`` one event at a time vs ``add_many``.

Default decider configuration (eg_bh, alpha 0.1, window 256, 5 splits, default tabular scorers:
standardised KNN k=5 + Mahalanobis) calibrated on 1 000 Shuttle rows (9 features ``f1 … f9``,
standardised), then fed 20 000 further rows, one ``add`` per event or ``add_many`` in batches of
500, with one BLAS thread as in the worker. Each mode is timed ``--repeats`` times (best kept)
on a freshly fitted decider, in process CPU time (the machine may be shared) and wall time;
both modes must produce identical windows.

Run ``python bench/bench_decider.py`` (``--profile`` prints a cProfile of each mode first,
``--events``, ``--batch``, ``--rule`` to vary).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.decisions import OODDecider
from monitor.ops.datasets import load_shuttle


def _data(n_cal: int, n_events: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    data = load_shuttle()[:, :9]
    data = (data - data.mean(axis=0)) / data.std(axis=0)
    order = np.random.default_rng(seed).permutation(data.shape[0])
    cal = np.ascontiguousarray(data[order[:n_cal]])
    events = np.ascontiguousarray(data[order[n_cal : n_cal + n_events]])
    return cal, events


def _decider(rule: str, cal: np.ndarray) -> OODDecider:
    return OODDecider(rule, alpha=0.1, window=256, splits=5, seed=0).fit({"features": cal})


def run_add(decider: OODDecider, ids: list[str], X: np.ndarray) -> list[Any]:
    for event_id, row in zip(ids, X, strict=True):
        decider.add(event_id, {"features": row})
    return decider.windows()


def run_add_many(decider: OODDecider, ids: list[str], X: np.ndarray, batch: int) -> list[Any]:
    for start in range(0, len(ids), batch):
        decider.add_many(ids[start : start + batch], {"features": X[start : start + batch]})
    return decider.windows()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--calibration", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rule", default="eg_bh")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only-add", action="store_true", help="time add() alone")
    parser.add_argument(
        "--blas-threads", type=int, default=1, help="BLAS threads (the worker runs with 1)"
    )
    args = parser.parse_args()
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        _run(args)


def _run(args: argparse.Namespace) -> None:

    cal, X = _data(args.calibration, args.events, seed=0)
    ids = [f"e-{i}" for i in range(len(X))]
    modes: dict[str, Any] = {"add": lambda d: run_add(d, ids, X)}
    if not args.only_add:
        modes["add_many"] = lambda d: run_add_many(d, ids, X, args.batch)

    if args.profile:
        for name, fn in modes.items():
            decider = _decider(args.rule, cal)
            prof = cProfile.Profile()
            prof.enable()
            fn(decider)
            prof.disable()
            print(f"==== cProfile: {name} ====")
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)

    results: dict[str, list[Any]] = {}
    for name, fn in modes.items():
        best_wall = best_cpu = float("inf")
        for _ in range(args.repeats):
            decider = _decider(args.rule, cal)
            t0, c0 = time.perf_counter(), time.process_time()
            results[name] = fn(decider)
            best_cpu = min(best_cpu, time.process_time() - c0)
            best_wall = min(best_wall, time.perf_counter() - t0)
        n_windows = len(results[name])
        print(
            f"{name:>9}: {1e6 * best_cpu / len(X):7.2f} µs/event CPU, "
            f"{1e6 * best_wall / len(X):7.2f} wall ({len(X)} events, {n_windows} windows, "
            f"rule {args.rule}, best of {args.repeats})"
        )
    if "add_many" in results:
        same = results["add"] == results["add_many"]
        print(f"identical windows: {same}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
