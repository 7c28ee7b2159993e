"""Fleet simulation: cross-stream rules against per-stream alarms on 200 streams of real data.

Run ``python bench/bench_fleet.py`` (``--seeds N`` fleets, default 5; ``--streams K``, default
200; ``--json`` for machine-readable output). Everything is bundled, nothing is downloaded.

Set-up. The Shuttle regression task of ``monitor.ops.datasets`` (a gradient-boosting model and the
39 097 held-out rows it never saw). Each of the K streams draws its own 500 calibration rows and
``--events`` stream rows from that pool (``make_stream``, its own seed). 10 % of the streams
switch to the ``concept`` regime (labels permuted within a region of the inputs) at a uniform
random event of [200, events − 200) (``--together``: all at one such event); the others stay
``stable``, exchangeable with their
calibration rows. Every stream runs the default detector path: smoothed conformal p-values of
the absolute residual, the Composite Jumper betting martingale and the Shiryaev–Roberts
e-detector R_t. All streams advance one event per fleet step.

Rules, all at the same level α = 1/c (c = the per-stream SR threshold, default 10 000):

- ``per_stream``: each stream alarms at R_t ≥ c (today's behaviour);
- ``e_d_bonferroni``: alarm at R_t ≥ K/α;
- ``e_d_bh``: e-BH at level α on (R_t^1, …, R_t^K) at every step.

Every alarm re-baselines its stream (a fresh martingale and R = 0) and the decider is told
(``FleetDecider.reset``). Reported per rule, averaged over the fleets: false alarms (alarms on
stationary streams, or on a changing stream before its change), the false-alarm share of all
alarms (FDP of the alarm set), the count bound α·(K₀/K)·n of e-d-Bonferroni, the detection
rate of the changes (first alarm at or after the change) and the mean delay of those detected.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.fleet import FLEET_RULES, FleetDecider
from monitor.core.martingales import CompositeJumper, ShiryaevRoberts, conformal_p_values
from monitor.ops.datasets import load_shuttle_regression, make_stream

N_CALIBRATION = 500
SHARE_CHANGED = 0.10
MARGIN = 200


@dataclass(frozen=True)
class Fleet:
    """p-values (K × n) of one simulated fleet and each stream's change step (-1: none)."""

    p: np.ndarray
    change: np.ndarray


@dataclass(frozen=True)
class RuleResult:
    rule: str
    false_alarms: float
    fdp: float
    detection_rate: float
    mean_delay: float
    eop_bound: float


def build_fleet(seed: int, n_streams: int, n_events: int, together: bool = False) -> Fleet:
    """Draw the fleet's streams from the Shuttle pool; 10 % get a concept shift (``together``:
    all at one random event, as when a shared upstream feature breaks)."""
    task = load_shuttle_regression()
    rng = np.random.default_rng(seed)
    changed = rng.choice(n_streams, size=round(SHARE_CHANGED * n_streams), replace=False)
    change = np.full(n_streams, -1)
    size = 1 if together else changed.size
    change[changed] = rng.integers(MARGIN, n_events - MARGIN, size=size)
    rows = []
    for k in range(n_streams):
        phases = [("stable", n_events)]
        if change[k] >= 0:
            phases = [("stable", int(change[k])), ("concept", n_events - int(change[k]))]
        data = make_stream(task, phases, N_CALIBRATION, seed=seed * 100_003 + k)
        cal = np.abs(data.y_calibration - data.pred_calibration)
        rows.append(conformal_p_values(np.abs(data.y - data.pred), cal, seed=seed * 7 + k))
    return Fleet(np.vstack(rows), change)


def run_rule(fleet: Fleet, rule: str, alpha: float) -> tuple[list[tuple[int, int]], int]:
    """Alarms (stream, step) of ``rule`` on ``fleet``, each alarm re-baselining its stream."""
    n_streams, n_events = fleet.p.shape
    decider = FleetDecider([str(k) for k in range(n_streams)], rule=rule, alpha=alpha)  # type: ignore[arg-type]
    jumpers = [CompositeJumper() for _ in range(n_streams)]
    srs = [ShiryaevRoberts() for _ in range(n_streams)]
    log_r = np.empty(n_streams)
    alarms: list[tuple[int, int]] = []
    for t in range(n_events):
        for k in range(n_streams):
            jumpers[k].update(float(fleet.p[k, t]))
            srs[k].update(jumpers[k].log_martingale)
            log_r[k] = srs[k].log_statistic
        decider.update_all(log_r)
        for name in decider.decide().admitted:
            k = int(name)
            alarms.append((k, t))
            jumpers[k], srs[k] = CompositeJumper(), ShiryaevRoberts()
            decider.reset(name)
    return alarms, n_events


def score(fleet: Fleet, rule: str, alpha: float, alarms: list[tuple[int, int]]) -> RuleResult:
    """False alarms, their share, detection rate and delay of one rule on one fleet."""
    n_streams, n_events = fleet.p.shape
    false = sum(1 for k, t in alarms if fleet.change[k] < 0 or t < fleet.change[k])
    delays = []
    for k in np.flatnonzero(fleet.change >= 0):
        after = [t for j, t in alarms if j == k and t >= fleet.change[k]]
        if after:
            delays.append(min(after) - int(fleet.change[k]))
    n_changed = int((fleet.change >= 0).sum())
    return RuleResult(
        rule=rule,
        false_alarms=float(false),
        fdp=false / max(len(alarms), 1),
        detection_rate=len(delays) / max(n_changed, 1),
        mean_delay=float(np.mean(delays)) if delays else math.nan,
        eop_bound=alpha * (n_streams - n_changed) / n_streams * n_events,
    )


def average(results: list[RuleResult]) -> RuleResult:
    def mean(name: str) -> float:
        return float(np.nanmean([getattr(r, name) for r in results]))

    fields = ("false_alarms", "fdp", "detection_rate", "mean_delay", "eop_bound")
    return RuleResult(results[0].rule, *(mean(f) for f in fields))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--events", type=int, default=1500)
    parser.add_argument("--threshold", type=float, default=10_000.0, help="per-stream SR c")
    parser.add_argument("--together", action="store_true",
                        help="the changing streams all shift at one random event")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    alpha = 1.0 / args.threshold
    per_rule: dict[str, list[RuleResult]] = {rule: [] for rule in FLEET_RULES}
    started = time.perf_counter()
    for seed in range(args.seeds):
        fleet = build_fleet(seed, args.streams, args.events, args.together)
        for rule in FLEET_RULES:
            alarms, _ = run_rule(fleet, rule, alpha)
            per_rule[rule].append(score(fleet, rule, alpha, alarms))
    rows = [average(per_rule[rule]) for rule in FLEET_RULES]
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    print(f"{args.seeds} fleets × {args.streams} streams × {args.events} events, α = {alpha:g}, "
          f"{time.perf_counter() - started:.0f} s")
    print(f"{'rule':<16}{'false alarms':>14}{'FDP':>8}{'detected':>10}{'delay':>8}"
          f"{'α·(K0/K)·n':>12}")
    for r in rows:
        print(f"{r.rule:<16}{r.false_alarms:>14.2f}{r.fdp:>8.3f}{r.detection_rate:>10.2f}"
              f"{r.mean_delay:>8.0f}{r.eop_bound:>12.3f}")


if __name__ == "__main__":
    main()
