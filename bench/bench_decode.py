"""Event decoding: µs per event of the reference (``json`` + pydantic, what ``decode_event`` did
before the fast path) vs ``decode_event`` per event vs ``decode_batch`` on a whole batch.

    PYTHONPATH=. python bench/bench_decode.py     # 20 000 events, best of 5 runs
    PYTHONPATH=. python bench/bench_decode.py --n 5000 --repeat 3

Two realistic numeric workloads: regression (9 float features, a float prediction, an ISO
``ts`` with ``Z``, string ids) and classification (a probability vector as prediction and an
int label); two tabular ones (#27): 6 numbers, two strings, a boolean and a sometimes-null value,
by name (``tabular``) and by position (``tabular_list``, the second fast decoder).
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


def tabular(rng: np.random.Generator, n: int) -> list[bytes]:
    """Object features with strings, a boolean and a missing value (docs/tabular.md)."""
    out = []
    countries = ["DE", "FR", "IT", "ES", "NL"]
    for i in range(n):
        features: dict[str, Any] = {f"x{j}": float(x) for j, x in enumerate(rng.normal(size=6))}
        features.update(country=countries[i % 5], device="ios" if i % 3 else "android",
                        vip=bool(i % 7 == 0), age=None if i % 10 == 0 else float(20 + i % 50))
        event = {"kind": "prediction", "stream": "fraud", "id": f"t-{i:08d}",
                 "features": features, "prediction": float(rng.uniform()),
                 "meta": {"model_version": "v2"}}
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def tabular_list(rng: np.random.Generator, n: int) -> list[bytes]:
    """The same by position: the second fast decoder's case."""
    out = []
    for event in map(json.loads, tabular(rng, n)):
        event["features"] = list(event["features"].values())
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
    parser.add_argument("--numeric-only", action="store_true",
                        help="only the two numeric workloads (as before #27)")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    workloads = [("regression", regression), ("classification", classification),
                 ("tabular", tabular), ("tabular_list", tabular_list)]
    if args.numeric_only:
        workloads = workloads[:2]
    for name, values in [(name, make(rng, args.n)) for name, make in workloads]:
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
