"""False alarms right after a re-baseline vs at the stream's start, on exchangeable streams.

Run ``python bench/bench_restart.py`` (``--json``, ``--quick`` for the CI-sized run, ``--workers
N``). Streams are random permutations of held-out Shuttle rows (as in
``bench/bench_statistical.py``), so every event is exchangeable with the calibration and with
every other event, and any difference between the two rates is the re-baseline's doing.

For each seed and monitor (covariate monitor, CTM, WCTM with estimated weights from t = 0),
under Ville's rule at ``alpha`` with ``rebaseline`` = 300 (the default):

- *start*: whether a fresh monitor alarms within its first ``window`` events;
- *restart*: a second monitor on another stretch of the same stream is re-baselined after its
  first ``LEAD`` events exactly as an alarm re-baselines it (the martingale and the rule restart,
  the next ``rebaseline`` events become the reference), and whether it alarms within the first
  ``window`` events after it resumes.

Each restarted test is a fresh anytime-valid test on a reference exchangeable with what follows,
so both rates estimate the same probability; the report gives both, their difference and its
standard error.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_statistical import _parallel, _stream
from monitor.detectors import ConditionalMonitor, CovariateMonitor

REBASELINE = 300
#: Events monitored before the induced re-baseline of the *restart* monitor.
LEAD = 20
MONITORS = ("covariate", "ctm", "wctm")


def _monitor(name: str, data: Any, cal_scores: np.ndarray, seed: int, alpha: float
             ) -> CovariateMonitor | ConditionalMonitor:
    ville: dict[str, Any] = {"rule": "ville", "alpha": alpha, "rebaseline": REBASELINE,
                             "seed": seed}
    if name == "covariate":
        return CovariateMonitor("knn", data.X_calibration, **ville)
    return ConditionalMonitor(cal_scores, data.X_calibration, weighted=name == "wctm", **ville)


def _first_alarm(monitor: CovariateMonitor | ConditionalMonitor, X: np.ndarray,
                 scores: np.ndarray) -> int | None:
    """Feed events (one batch call); the absolute index of the first alarm they raise."""
    if isinstance(monitor, CovariateMonitor):
        monitor.update_batch(X)
    else:
        monitor.update_batch(X if monitor.weighted else None, scores)
    return monitor.last_alarms[0].index if monitor.last_alarms else None


def restart_run(seed: int, window: int = 100, alpha: float = 0.2,
                monitors: Sequence[str] = MONITORS) -> dict[str, tuple[bool, bool | None]]:
    """Per monitor: (alarm within ``window`` events of the start, alarm within ``window``
    events of the resume after an induced re-baseline; None when the restart monitor alarmed
    on its own before it, which leaves no clean restart to measure)."""
    n = window + LEAD + REBASELINE + window
    data, cal_scores, scores = _stream(seed, [("stable", n)])
    out: dict[str, tuple[bool, bool | None]] = {}
    for name in monitors:
        start = _monitor(name, data, cal_scores, seed, alpha)
        first = _first_alarm(start, data.X[:window], scores[:window])
        # The restart monitor sees the stream's other events (window..n-1): independent of the
        # start monitor's.
        again = _monitor(name, data, cal_scores, seed, alpha)
        lo = window
        if _first_alarm(again, data.X[lo : lo + LEAD], scores[lo : lo + LEAD]) is not None:
            out[name] = (first is not None, None)
            continue
        # Re-baseline exactly as an alarm does (MartingaleMonitor._raise: restart, warm up).
        again._raise(again._test.alarm_event(again.n_seen - 1))
        resumed = again.n_seen + REBASELINE
        hit = _first_alarm(again, data.X[lo + LEAD :], scores[lo + LEAD :])
        out[name] = (first is not None, hit is not None and hit < resumed + window)
    return out


def restart_rates(n_streams: int, window: int = 100, alpha: float = 0.2, workers: int = 1,
                  monitors: Sequence[str] = MONITORS) -> dict[str, dict[str, float]]:
    """Per monitor: the start and restart alarm rates, their difference and its standard
    error (two independent proportions)."""
    run = functools.partial(restart_run, window=window, alpha=alpha, monitors=tuple(monitors))
    runs = _parallel(run, range(n_streams), workers)
    result: dict[str, dict[str, float]] = {}
    for name in monitors:
        start = [r[name][0] for r in runs]
        restart = [r[name][1] for r in runs if r[name][1] is not None]
        p0, p1 = float(np.mean(start)), float(np.mean(restart))
        se = math.sqrt(p0 * (1 - p0) / len(start) + p1 * (1 - p1) / len(restart))
        result[name] = {"start": p0, "restart": p1, "difference": p1 - p0, "se": se,
                        "n_start": len(start), "n_restart": len(restart)}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="the CI-sized run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--alpha", type=float, default=0.2)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args(argv)
    n = 200 if args.quick else 1000
    started = time.perf_counter()
    results: dict[str, Any] = {
        "n_streams": n, "alpha": args.alpha, "window": args.window, "rebaseline": REBASELINE,
        "rates": restart_rates(n, args.window, args.alpha, args.workers),
    }
    results["seconds"] = time.perf_counter() - started
    print(json.dumps(results, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
