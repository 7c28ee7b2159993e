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
from monitor.core.detectors import ConditionalMonitor, CovariateMonitor

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


#: No restart to measure: the restart monitor alarmed on its own before the induced re-baseline.
SKIPPED = -1


def restart_run(seed: int, window: int = 100, alpha: float = 0.2,
                monitors: Sequence[str] = MONITORS) -> dict[str, tuple[int | None, int | None]]:
    """Per monitor: events from the start to the first alarm, and from the resume after an
    induced re-baseline to the first alarm (None: none within ``window`` events; SKIPPED:
    no clean restart)."""
    n = window + LEAD + REBASELINE + window
    data, cal_scores, scores = _stream(seed, [("stable", n)])
    out: dict[str, tuple[int | None, int | None]] = {}
    for name in monitors:
        start = _monitor(name, data, cal_scores, seed, alpha)
        first = _first_alarm(start, data.X[:window], scores[:window])
        # The restart monitor sees the stream's other events (window..n-1): independent of the
        # start monitor's.
        again = _monitor(name, data, cal_scores, seed, alpha)
        lo = window
        if _first_alarm(again, data.X[lo : lo + LEAD], scores[lo : lo + LEAD]) is not None:
            out[name] = (first, SKIPPED)
            continue
        # Re-baseline exactly as an alarm does (MartingaleMonitor._raise: restart, warm up).
        again._raise(again._test.alarm_event(again.n_seen - 1))
        resumed = again.n_seen + REBASELINE
        hit = _first_alarm(again, data.X[lo + LEAD :], scores[lo + LEAD :])
        late = hit is None or hit >= resumed + window
        out[name] = (first, None if late else hit - resumed)
    return out


def restart_rates(n_streams: int, window: int = 100, alpha: float = 0.2, workers: int = 1,
                  monitors: Sequence[str] = MONITORS, early: int = 10
                  ) -> dict[str, dict[str, float]]:
    """Per monitor: the start and restart rates of an alarm within ``window`` events, their
    difference and its standard error (two independent proportions), and both rates within
    the first ``early`` events."""
    run = functools.partial(restart_run, window=window, alpha=alpha, monitors=tuple(monitors))
    runs = _parallel(run, range(n_streams), workers)
    result: dict[str, dict[str, float]] = {}
    for name in monitors:
        start = [r[name][0] for r in runs]
        restart = [r[name][1] for r in runs if r[name][1] != SKIPPED]

        def rate(firsts: list[int | None], within: int) -> float:
            return float(np.mean([f is not None and f < within for f in firsts]))

        p0, p1 = rate(start, window), rate(restart, window)
        se = math.sqrt(p0 * (1 - p0) / len(start) + p1 * (1 - p1) / len(restart))
        result[name] = {"start": p0, "restart": p1, "difference": p1 - p0, "se": se,
                        "n_start": len(start), "n_restart": len(restart),
                        "start_early": rate(start, early), "restart_early": rate(restart, early)}
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
        "n_streams": n, "alpha": args.alpha, "window": args.window, "early": 10,
        "rebaseline": REBASELINE,
        "rates": restart_rates(n, args.window, args.alpha, args.workers),
    }
    results["seconds"] = time.perf_counter() - started
    print(json.dumps(results, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
