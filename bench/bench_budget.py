"""Detection delay against the alarm budget (``alarm.false_alarm_every``), on real bundled data.

Run ``python bench/bench_budget.py`` (``--seeds N``, ``--json``). A budget of T seconds at a
stream rate of r events/s gives each of the stream's two detectors the Shiryaev–Roberts
threshold A = max(min_threshold, 2·T·r) (after warm-up; docs/detectors.md, "Alarm budgets");
``--min-threshold`` sets the floor (default the configuration's, 100 000; 2 for none). The SR
statistic's path does not depend on its threshold until the first alarm, so one run per seed with
an unreachable threshold gives the first crossing of every A at once: the stream's detection delay
is the first update after the change where either detector's log statistic reaches log A.

Scenarios (``monitor.ops.datasets``, WATCH-style, as bench/bench_statistical.py): 500 stable events,
then ``concept`` or ``extreme_covariate`` for 4 000 events; labels arrive with their predictions.
The table gives the median delay in events over the seeds and that delay as time at the rate
(streams not detected within 4 000 events count as 4 000: the median is then printed as > 4000).

``--false-alarms`` also runs exchangeable streams (4 000 stable events at 1 000 events/s, the
stream's configuration with only name, task and calibration) and counts their false alarms under
the default budget and under the previous default (threshold 10 000 per detector).
``--slow-false-alarms`` does the same at 0.01 events/s (36 an hour), where the floor sets the
threshold, against the budget alone (``min_threshold: 2``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.ops.datasets import load_shuttle_regression, make_stream
from monitor.streams.config import BUDGET_SHARE, DEFAULT_THRESHOLD, StreamConfig
from monitor.streams.detectors import StreamDetectors

N_CALIBRATION = 1000
N_BEFORE = 500
N_AFTER = 4000
BUDGETS = {"1 hour": 3600.0, "1 day": 86_400.0, "1 week": 604_800.0,
           "1 month": 2_592_000.0, "1 year": 31_536_000.0}
RATES = (0.01, 1.0, 1_000.0, 100_000.0)
#: The threshold of every detector before budgets (and before the floor).
PREVIOUS_DEFAULT = 10_000.0
UNREACHABLE = 1e200


def log_statistics(scenario: str, seed: int, n_calibration: int = N_CALIBRATION
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Both detectors' log SR statistic after each post-change event of one stream."""
    phases = (("stable", N_BEFORE), (scenario, N_AFTER))
    data = make_stream(load_shuttle_regression(), phases, n_calibration, seed)
    cal_scores = np.abs(data.y_calibration - data.pred_calibration)
    scores = np.abs(data.y - data.pred)
    params: dict[str, Any] = {"rule": "shiryaev_roberts", "threshold": UNREACHABLE, "seed": seed}
    detectors = StreamDetectors(
        CovariateMonitor("knn", data.X_calibration, **params),
        ConditionalMonitor(cal_scores, data.X_calibration, **params),
    )
    n = len(scores)
    index = list(range(n))
    result = detectors.update_batch(data.X, index, data.X, scores, index,
                                    np.arange(1, n + 1, dtype=np.int64))
    change = data.change_points[0]
    return result.cov_trace.log_statistic[change:], result.cond_trace.log_statistic[change:]


def delay(stats: tuple[np.ndarray, np.ndarray], threshold: float) -> int:
    """Events after the change to the stream's first alarm at ``threshold`` (N_AFTER: none)."""
    level = math.log(threshold)
    firsts = [np.flatnonzero(s >= level) for s in stats]
    return min([int(f[0]) + 1 for f in firsts if f.size] + [N_AFTER])


def measure(scenario: str, seeds: int, floor: float = DEFAULT_THRESHOLD) -> dict[str, Any]:
    runs = [log_statistics(scenario, seed) for seed in range(seeds)]

    def median_delay(threshold: float) -> float:
        return float(np.median([delay(r, threshold) for r in runs]))

    table = {
        name: {f"{rate:g}": median_delay(max(floor, BUDGET_SHARE * seconds * rate))
               for rate in RATES}
        for name, seconds in BUDGETS.items()
    }
    return {"scenario": scenario, "seeds": seeds, "min_threshold": floor,
            "today": median_delay(PREVIOUS_DEFAULT), "table": table}


def false_alarms(seed: int, alarm: dict[str, Any], rate: float = 1_000.0) -> int:
    """Alarms on one exchangeable stream of N_AFTER events at ``rate`` (all false)."""
    data = make_stream(load_shuttle_regression(), (("stable", N_AFTER),), N_CALIBRATION, seed)
    config = StreamConfig(name="s", task="regression", calibration="c", alarm=alarm, seed=seed)
    cal_scores = np.abs(data.y_calibration - data.pred_calibration)
    detectors = StreamDetectors.from_config(config, data.X_calibration, cal_scores)
    n = len(data.y)
    index, ts = list(range(n)), np.arange(n) / rate
    result = detectors.update_batch(data.X, index, data.X, np.abs(data.y - data.pred), index,
                                    np.arange(1, n + 1, dtype=np.int64), ts, ts)
    return len(result.alarms)


def _time(seconds: float) -> str:
    for unit, size in (("d", 86_400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1000:.3g} ms"


def markdown(result: dict[str, Any]) -> str:
    rates = [f"{r:g}" for r in RATES]
    head = " | ".join(f"{r:,g} events/s" for r in RATES)
    lines = [f"| budget | {head} |", "| --- |" + " --- |" * len(RATES)]
    for name, row in result["table"].items():
        cells = []
        for rate in rates:
            events = round(row[rate])
            shown = f"> {N_AFTER}" if events >= N_AFTER else f"{events}"
            cells.append(f"{shown} ({_time(events / float(rate))})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--false-alarms", type=int, default=0, metavar="STREAMS")
    parser.add_argument("--slow-false-alarms", type=int, default=0, metavar="STREAMS")
    parser.add_argument("--min-threshold", type=float, default=DEFAULT_THRESHOLD)
    args = parser.parse_args(argv)
    Alarms = tuple[tuple[str, dict[str, Any]], ...]
    fast: Alarms = (("default (7d budget)", {}),
                    ("threshold 10 000", {"threshold": PREVIOUS_DEFAULT}))
    slow: Alarms = (("default (7d budget, floor 100 000)", {}),
                    ("7d budget, min_threshold 2", {"false_alarm_every": "7d", "min_threshold": 2}))
    runs = [(args.false_alarms, 1_000.0, fast), (args.slow_false_alarms, 0.01, slow)]
    for streams, rate, alarms in runs:
        for name, alarm in alarms if streams else ():
            counts = [false_alarms(seed, alarm, rate) for seed in range(streams)]
            print(f"{name}: {sum(c > 0 for c in counts)} of {len(counts)} exchangeable streams "
                  f"with a false alarm ({sum(counts)} alarms, 4 000 events at {rate:g}/s each)")
    results = [measure(s, args.seeds, args.min_threshold) for s in ("concept", "extreme_covariate")]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for result in results:
        print(f"\n{result['scenario']} ({result['seeds']} seeds; min_threshold "
              f"{result['min_threshold']:g}; threshold 10 000, the previous default: median "
              f"{result['today']:.0f} events)\n")
        print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
