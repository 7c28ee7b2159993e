"""The reference bank's size B: power of the kNN covariate monitor and of the OOD flags against
the per-record cost of a stream, by calibration size m (docs/ood.md, "Reference bank").

For each m and each B (``none`` = every calibration row, the behaviour before the bank):

``cost_us``
    CPU µs per record of :meth:`StreamMonitor.step` (the default configuration: both monitors,
    the OOD flags, data quality, attribution), d = 10 Gaussian features, every prediction
    with its label, batches of 500, best of ``--repeats`` over ``--events`` events.
``delay``
    Mean events from the change to the covariate monitor's first alarm (Shiryaev–Roberts
    1 000) on ``--seeds`` streams whose inputs move by 0.25 σ in every coordinate after 500
    stable events (``miss``: streams with no alarm within 3 000 events, counted at 3 000).
``tpr``, ``fdp``
    The OOD flags (eg-BH, α = 0.1, windows of 256, the default full-conformal kNN) on
    2 560 events of which every 10th is shifted by 3 σ in three coordinates: the share of
    shifted events flagged and the false discovery proportion, averaged over the seeds.

    python bench/bench_reference_bank.py --json bench/results/reference_bank.json
    python bench/bench_reference_bank.py --quick     # seconds: the CI form (tests/bench)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from monitor.core.decisions import OODDecider
from monitor.core.detectors import CovariateMonitor
from monitor.core.ood import make_scorer
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import PredictionEvent
from monitor.streams.monitor import StreamMonitor

D = 10
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _config(bank: int | None) -> StreamConfig:
    return StreamConfig(name="bank", task="regression", calibration="in memory",
                        reference_bank=bank)


def cost_us(m: int, bank: int | None, events: int, repeats: int, seed: int = 0) -> float:
    """Best µs per record of the stream step over ``events`` events (see the module doc)."""
    rng = np.random.default_rng(seed)
    X_cal = rng.normal(size=(m, D))
    w = rng.normal(size=D)
    calibration = Calibration(X_cal, X_cal @ w, X_cal @ w + rng.normal(size=m))
    X = rng.normal(size=(events, D))
    y = X @ w + rng.normal(size=events)
    batch = [PredictionEvent(stream="bank", id=f"e{i}", ts=T0 + timedelta(seconds=i),
                             features=X[i].tolist(), prediction=float(X[i] @ w),
                             label=float(y[i])) for i in range(events)]
    best = float("inf")
    for _ in range(repeats):
        monitor = StreamMonitor(_config(bank), calibration)
        start = time.process_time()  # CPU time: the machine may be shared
        for lo in range(0, events, 500):
            monitor.step(batch[lo:lo + 500], lambda k: T0)
            monitor.drain()
        best = min(best, time.process_time() - start)
    return best / events * 1e6


def delay(m: int, bank: int | None, seeds: int, horizon: int = 3000) -> tuple[float, int]:
    """Mean detection delay of the covariate monitor and the streams it missed."""
    delays, missed = [], 0
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        X = rng.normal(size=(500 + horizon, D))
        X[500:] += 0.25
        monitor = CovariateMonitor("knn", rng.normal(size=(m, D)), threshold=1000.0,
                                   seed=seed, reference_bank=bank)
        found = None

        def on_alarm(i: int, _event: Any) -> None:
            nonlocal found
            found = i if found is None else found

        monitor.update_batch(X, on_alarm)
        if found is None or found < 500:
            missed += found is None
            delays.append(horizon if found is None else 0)
        else:
            delays.append(found - 500)
    return float(np.mean(delays)), missed


def ood_power(m: int, bank: int | None, seeds: int) -> tuple[float, float]:
    """Mean TPR and FDP of the default OOD flags with every 10th event shifted."""
    tprs, fdps = [], []
    for seed in range(seeds):
        rng = np.random.default_rng(2000 + seed)
        decider = OODDecider("eg_bh", alpha=0.1, window=256, seed=seed, bank=bank,
                             scorers=[make_scorer("knn", k=1, standardize=True,
                                                  normalize=False)])
        decider.fit({"features": rng.normal(size=(m, D))})
        X = rng.normal(size=(2560, D))
        outlier = np.arange(2560) % 10 == 0
        X[outlier, :3] += 3.0
        ids = [f"{'o' if o else 'n'}{i}" for i, o in enumerate(outlier)]
        decider.add_many(ids, {"features": X})
        flagged = [i for w in decider.windows() for i in w.flagged_ids]
        true = sum(i.startswith("o") for i in flagged)
        tprs.append(true / outlier.sum())
        fdps.append((len(flagged) - true) / max(len(flagged), 1))
    return float(np.mean(tprs)), float(np.mean(fdps))


def run(sizes: list[int], banks: list[int | None], events: int, repeats: int,
        seeds: int) -> dict[str, Any]:
    rows = []
    cost_us(sizes[0], None, 500, 1)  # compile the kernels first
    for m in sizes:
        for bank in banks:
            if bank is not None and bank >= m:
                continue  # the whole calibration: the "none" row
            mean_delay, missed = delay(m, bank, seeds)
            tpr, fdp = ood_power(m, bank, seeds)
            rows.append({"m": m, "bank": bank, "cost_us": round(cost_us(m, bank, events,
                                                                      repeats), 1),
                         "delay": round(mean_delay, 1), "miss": missed,
                         "tpr": round(tpr, 3), "fdp": round(fdp, 3)})
            print(json.dumps(rows[-1]), file=sys.stderr)
    return {"meta": {"when": datetime.now(UTC).isoformat(), "python": platform.python_version(),
                     "d": D, "events": events, "repeats": repeats, "seeds": seeds},
            "data": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--quick", action="store_true", help="CI sizes")
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args(argv)
    if args.quick:
        result = run([1000, 2000], [None, 1000], events=500, repeats=1, seeds=1)
    else:
        result = run([1000, 2000, 8000], [None, 1000, 1500, 2000, 4000], args.events,
                     args.repeats, args.seeds)
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as out:
            out.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
