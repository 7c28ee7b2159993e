"""Resident memory of the weighted conditional monitor over a long stationary stream.

The default ``ConditionalMonitor`` (weighted, WATCH's WCTM with the density ratio learned from
the first event, Simple Mixture, Shiryaev–Roberts) is fed ``--events`` exchangeable events
(x ~ N(0, I_d), score = |N(0, 1)|, the calibration drawn the same way) through
``update_batch`` in chunks; the alarm rule is Ville at α = 1e-12 so that a false alarm, which
re-baselines the monitor and frees its reference, should not happen: the worst case for memory
(an alarm is counted in the ``alarms`` column; with the window it is a sign of the approximate
validity discussed in ``docs/algorithms.md``). Every
``--every`` events it prints the process RSS (``/proc/self/status`` VmRSS), the reference size
and the events per second. With the default ``reference_window`` (5 000) the reference stops
growing once 5 000 stream points have joined, and so does RSS; ``--window none`` shows the
unbounded reference for comparison.

Run ``python bench/bench_memory.py`` (10 M events, minutes); ``--events``, ``--window``,
``--dim``, ``--chunk`` to vary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.detectors import ConditionalMonitor
from monitor.core.detectors.conditional import DEFAULT_REFERENCE_WINDOW


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run(events: int, window: int | None, dim: int, chunk: int, every: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_cal = 1000
    monitor = ConditionalMonitor(
        np.abs(rng.normal(size=n_cal)), rng.normal(size=(n_cal, dim)),
        rule="ville", alpha=1e-12, reference_window=window, seed=seed,
    )
    print(f"weighted conditional monitor, d = {dim}, calibration {n_cal}, "
          f"reference_window = {window}, {events:,} events in chunks of {chunk:,}")
    print(f"{'events':>12} {'RSS MB':>8} {'reference':>10} {'evicted':>10} {'alarms':>7} "
          f"{'events/s':>9}")
    done, start, last_t, last_n = 0, time.perf_counter(), time.perf_counter(), 0
    first_rss = None
    while done < events:
        n = min(chunk, events - done)
        monitor.update_batch(rng.normal(size=(n, dim)), np.abs(rng.normal(size=n)))
        done += n
        if done % every == 0 or done == events:
            now = time.perf_counter()
            rss = rss_mb()
            first_rss = rss if first_rss is None else first_rss
            pv = monitor._pv
            print(f"{done:>12,} {rss:>8.1f} {monitor.n_reference:>10,} "
                  f"{getattr(pv, 'n_evicted', 0):>10,} {monitor.n_alarms:>7} "
                  f"{(done - last_n) / (now - last_t):>9,.0f}", flush=True)
            last_t, last_n = now, done
    total = time.perf_counter() - start
    print(f"RSS growth after the first checkpoint: {rss_mb() - (first_rss or 0.0):.1f} MB; "
          f"{events / total:,.0f} events/s overall")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--window", default=str(DEFAULT_REFERENCE_WINDOW),
                        help="reference_window: an integer, or 'none' (unbounded)")
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    window = None if args.window.lower() == "none" else int(args.window)
    if args.every % args.chunk:
        parser.error("--every must be a multiple of --chunk")
    run(args.events, window, args.dim, args.chunk, args.every, args.seed)


if __name__ == "__main__":
    main()
