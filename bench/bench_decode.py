"""Event decoding: µs per event of the reference (``json`` + pydantic, what ``decode_event`` did
before the fast path) vs ``decode_event`` per event vs ``decode_batch`` on a whole batch.

    PYTHONPATH=. python bench/bench_decode.py     # 20 000 events, best of 5 runs
    PYTHONPATH=. python bench/bench_decode.py --n 5000 --repeat 3

Two realistic workloads: regression (9 float features, a float prediction, an ISO ``ts`` with
``Z``, string ids) and classification (a probability vector as prediction and an int label).
For comparison, ``orjson.loads`` alone (no validation) when orjson is installed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from monitor.streams.events import _decode_slow, _public, decode_batch, decode_event


def regression(rng: np.random.Generator, n: int) -> list[bytes]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        ts = (t0 + timedelta(milliseconds=137 * i)).isoformat(timespec="milliseconds")
        event = {
            "kind": "prediction",
            "stream": "bikes",
            "id": f"e-{i:08d}",
            "ts": ts.replace("+00:00", "Z"),
            "features": [float(x) for x in rng.normal(size=9)],
            "prediction": float(rng.normal() * 40 + 100),
        }
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def classification(rng: np.random.Generator, n: int) -> list[bytes]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        probs = rng.dirichlet(np.ones(3))
        event = {
            "kind": "prediction",
            "stream": "churn",
            "id": f"c-{i:08d}",
            "ts": (t0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            "features": [float(x) for x in rng.normal(size=9)],
            "prediction": [float(p) for p in probs],
            "label": int(rng.integers(3)),
        }
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def best_us(fn: Callable[[], Any], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    for name, values in [("regression", regression(rng, args.n)),
                         ("classification", classification(rng, args.n))]:
        fast = decode_batch(values)
        assert fast == [_public(_decode_slow(v)) for v in values], name
        rows = {
            "reference (json + pydantic)": lambda v=values: [_decode_slow(v) for v in v],
            "decode_event per event": lambda v=values: [decode_event(v) for v in v],
            "decode_batch": lambda v=values: decode_batch(v),
        }
        try:
            import orjson

            rows["orjson.loads only (no checks)"] = lambda v=values: [orjson.loads(v) for v in v]
        except ImportError:  # pragma: no cover
            pass
        print(f"{name}: {args.n} events of {np.mean([len(v) for v in values]):.0f} bytes")
        for label, fn in rows.items():
            print(f"  {label:32s} {best_us(fn, args.n, args.repeat):6.2f} µs/event")


if __name__ == "__main__":
    main()
