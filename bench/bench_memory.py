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

``--pipeline`` measures a whole stream instead: one stream of the default configuration
(:class:`SyntheticStream`: synthetic Gaussian features, a fixed linear regression model, labels
as their own events 50 predictions late and every 10th never, one prediction a minute) through
``Pipeline.process`` in batches of ``monitor run``'s 2 000 records, in this process (no source,
no database). Every ``--every`` events it records RSS and the stream's checkpoint as the worker
encodes it (:func:`checkpoint_bytes`: ``encode_state`` whole, and chunked as the checkpoint
store writes it), the encoded size of each state key, and a ``flat`` verdict: the second
half's median not above the first half's (:func:`flat_verdict`)::

    python bench/bench_memory.py --pipeline --json            # 10 M events, JSON on stdout
    python bench/bench_memory.py --pipeline --events 200000 --every 20000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.core.detectors import ConditionalMonitor
from monitor.core.detectors.conditional import DEFAULT_REFERENCE_WINDOW
from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import Checkpoint, encode_state


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



# -- a whole stream over its life: the pipeline and its checkpoint -----------------------------

#: Monitor run's batch size (``Settings.batch_size``): records per ``Pipeline.process`` call.
PIPELINE_BATCH = 2000
#: The flat verdict: the second half's median at most FLAT_BOUND above the first half's.
FLAT_BOUND = 0.02
_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z


class SyntheticStream:
    """One stationary regression stream: features x ~ N(0, I_d), a fixed linear model
    ŷ = x·β (β drawn once from ``seed``), labels y = ŷ + N(0, 1).

    Labels come inline (``delay`` 0) or as label events ``delay`` predictions later, except
    every ``unlabeled_every``-th prediction's, which never comes (the label join must expire
    it). Predictions are ``ts_step_s`` seconds apart, so the join's 7-day expiry is reached
    after 10 080 predictions at one a minute.
    """

    def __init__(self, name: str, d: int, seed: int, delay: int = 0, unlabeled_every: int = 0,
                 ts_step_s: int = 60) -> None:
        self.name, self.d, self.delay = name, d, delay
        self.unlabeled_every, self.ts_step_s = unlabeled_every, ts_step_s
        self.beta = np.random.default_rng([seed, 1]).normal(size=d)
        self._rng = np.random.default_rng([seed, 2])
        self._encode = msgspec.json.Encoder().encode
        self._waiting: deque[tuple[int, float]] = deque()
        self.predictions = 0
        self.offset = 0

    def _rows(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = self._rng.normal(size=(n, self.d))
        pred = x @ self.beta
        return x, pred, pred + self._rng.normal(size=n)

    def write_config(self, folder: Path, m: int, extra: Mapping[str, Any] | None = None) -> str:
        """The stream's ``m`` calibration rows (drawn from the stream's law) and its default
        configuration (plus ``extra``); the configuration's path."""
        x, pred, y = self._rows(m)
        calibration = folder / f"{self.name}_calibration.jsonl"
        calibration.write_bytes(b"".join(
            self._encode({"kind": "prediction", "stream": self.name, "id": f"c-{i}",
                          "features": row, "prediction": p, "label": t}) + b"\n"
            for i, (row, p, t) in enumerate(zip(x.tolist(), pred.tolist(), y.tolist(),
                                                 strict=True))))
        config = {"name": self.name, "task": "regression", "calibration": calibration.name,
                  "seed": 0, **(extra or {})}
        path = folder / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return str(path)

    def values(self, n_predictions: int) -> list[bytes]:
        """The wire values of the next ``n_predictions`` predictions and the labels due."""
        x, pred, y = self._rows(n_predictions)
        out: list[bytes] = []
        for row, p, t in zip(x.tolist(), pred.tolist(), y.tolist(), strict=True):
            i = self.predictions
            self.predictions += 1
            ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_EPOCH + i * self.ts_step_s))
            event: dict[str, Any] = {"kind": "prediction", "stream": self.name,
                                     "id": f"e-{i:08d}", "ts": ts, "features": row,
                                     "prediction": p}
            if self.delay == 0:
                event["label"] = t
            elif not (self.unlabeled_every and i % self.unlabeled_every == 0):
                self._waiting.append((i, t))
            out.append(self._encode(event))
            while self._waiting and self._waiting[0][0] <= i - self.delay:
                j, label = self._waiting.popleft()
                out.append(self._encode({"kind": "label", "stream": self.name,
                                         "id": f"e-{j:08d}", "ts": ts, "label": label}))
        return out

    def records(self, n_predictions: int) -> list[RawRecord]:
        """:meth:`values` as the pipeline's records (topic = the stream's name, partition 0)."""
        out = []
        for value in self.values(n_predictions):
            out.append(RawRecord(self.name, 0, self.offset, value))
            self.offset += 1
        return out

    def records_per_prediction(self) -> float:
        if self.delay == 0:
            return 1.0
        return 2.0 - (1.0 / self.unlabeled_every if self.unlabeled_every else 0.0)


def life_stream(seed: int = 0) -> SyntheticStream:
    """The stream of the flat-state bench: 5 features, labels 50 predictions late, every
    10th prediction never labeled."""
    return SyntheticStream("life", 5, seed, delay=50, unlabeled_every=10)


def checkpoint_bytes(state: dict[str, Any], name: str,
                     stored: set[str]) -> tuple[dict[str, int], set[str]]:
    """Sizes of a stream's checkpoint as the worker encodes it (``Checkpoint.encode``):
    ``encoded_bytes`` whole (text + blob), and chunked as the checkpoint store writes it —
    ``row_bytes`` (text + blob naming the pieces), ``pieces_bytes`` (every piece named),
    ``sent_bytes`` (the row and the pieces not in ``stored``, the stored checkpoint's) — and
    the names of the pieces."""
    checkpoint = Checkpoint(name, state["version"], state["event_index"], state)
    text, blob = checkpoint.encode()
    pieces: dict[str, bytes] = {}
    row_text, row_blob = checkpoint.encode(pieces)
    row = len(row_text.encode()) + len(row_blob or b"")
    sizes = {"encoded_bytes": len(text.encode()) + len(blob or b""), "row_bytes": row,
             "pieces": len(pieces), "pieces_bytes": sum(len(v) for v in pieces.values()),
             "sent_bytes": row + sum(len(v) for k, v in pieces.items() if k not in stored)}
    return sizes, set(pieces)


def state_key_bytes(state: Mapping[str, Any], depth: int = 2, prefix: str = "") -> dict[str, int]:
    """Encoded bytes (``encode_state`` text + blob) of every state key, down to ``depth``
    levels (``detectors.covariate``): where a growing checkpoint grows."""
    out: dict[str, int] = {}
    for key, value in state.items():
        path = f"{prefix}{key}"
        if depth > 1 and isinstance(value, dict) and value:
            out |= state_key_bytes(value, depth - 1, path + ".")
        else:
            text, blob = encode_state({"v": value})
            out[path] = len(text.encode()) + len(blob or b"")
    return out


def state_trace(stream: SyntheticStream, config: str, marks: Sequence[int],
                batch: int = PIPELINE_BATCH) -> dict[str, Any]:
    """Feed ``marks[-1]`` records of ``stream`` through a pipeline of ``config`` in batches of
    ``batch`` records; at the first batch end at or past each of the ``marks`` (ascending),
    RSS, the checkpoint's sizes (:func:`checkpoint_bytes`), each state key's, and what the
    next batch's checkpoint sends over it (``sent_next_bytes``: one more batch is run after
    the last mark for it)."""
    pipeline = Pipeline(build_monitors(read_configs([config])), "bench")
    per_batch = max(1, round(batch / stream.records_per_prediction()))
    todo: deque[int] = deque(marks)
    done, alarms, stored = 0, 0, None
    points: list[dict[str, Any]] = []
    started, cpu = time.perf_counter(), 0.0
    while todo or stored is not None:
        records = stream.records(per_batch)
        cpu_start = time.process_time()
        out = pipeline.process(records)
        cpu += time.process_time() - cpu_start
        assert not out.dead_letters, out.dead_letters[0].reason
        done, alarms = done + len(records), alarms + len(out.alarms)
        state = pipeline.states([stream.name])[stream.name] if stored or todo[0] <= done else {}
        if stored is not None:  # the checkpoint of the batch after a mark's: what it sends
            points[-1]["sent_next_bytes"] = checkpoint_bytes(state, stream.name, stored)[0][
                "sent_bytes"]
            stored = None
        elif todo[0] <= done:
            sizes, stored = checkpoint_bytes(state, stream.name, set())
            del sizes["sent_bytes"]
            points.append({"events": done, "rss_mb": round(rss_mb(), 1), **sizes,
                           "alarms": alarms, "keys": state_key_bytes(state)})
            while todo and todo[0] <= done:
                todo.popleft()
    seconds = time.perf_counter() - started
    return {"events": done, "batch": batch, "points": points,
            "seconds": round(seconds, 1), "pipeline_cpu_us_per_event": round(cpu / done * 1e6, 1),
            "flat": flat_verdict(points)}


def flat_verdict(points: list[dict[str, Any]], tail: int | None = None,
                 bound: float = FLAT_BOUND) -> dict[str, Any]:
    """Whether RSS and the encoded checkpoint stop growing: the median of the last ``tail``
    points (default: the second half) is at most ``1 + bound`` times the median before them.

    Medians, not a spread around a constant nor maxima: an alarm restarts a monitor's
    reference, which refills (the covariate monitor's keeps exact scores until it holds
    ``covariate_reference_limit`` of them, 160 KB), so a point taken then is a transient below
    or above the steady size. The maxima are reported beside. Also the state keys whose median
    grew by more than ``bound`` of the whole checkpoint's earlier median (enough alone to break
    the verdict; a window that fills and empties does not), in bytes per event of the tail."""
    tail = max(1, len(points) // 2) if tail is None else tail
    head, last = points[:-tail], points[-tail:]
    out: dict[str, Any] = {"tail": len(last), "bound": bound, "from_events": last[0]["events"]}
    if not head:
        return {**out, "flat": False, "growing_keys": {}, "reason": "no point before the tail"}
    for key in ("rss_mb", "encoded_bytes"):
        before = float(np.median([p[key] for p in head]))
        after = float(np.median([p[key] for p in last]))
        out[key] = {"median_before": before, "median_tail": after,
                    "max_before": max(p[key] for p in head),
                    "max_tail": max(p[key] for p in last),
                    "growth": round(after / before - 1, 4), "flat": after <= before * (1 + bound)}
    span = last[-1]["events"] - head[-1]["events"]
    slack = bound * out["encoded_bytes"]["median_before"]
    out["growing_keys"] = {}
    for key in last[-1]["keys"]:
        before = float(np.median([p["keys"].get(key, 0) for p in head]))
        after = float(np.median([p["keys"].get(key, 0) for p in last]))
        if after > before + slack:
            out["growing_keys"][key] = round((after - before) / span, 4)
    out["flat"] = bool(out["rss_mb"]["flat"] and out["encoded_bytes"]["flat"])
    return out


def pipeline_life(marks: Sequence[int], seed: int = 0) -> dict[str, Any]:
    """:func:`state_trace` of :func:`life_stream` with 1 000 calibration rows at ``marks``."""
    stream = life_stream(seed)
    with tempfile.TemporaryDirectory() as tmp:
        config = stream.write_config(Path(tmp), 1000)
        trace = state_trace(stream, config, marks)
    return {"stream": {"features": stream.d, "calibration": 1000, "label_delay": stream.delay,
                       "unlabeled_every": stream.unlabeled_every,
                       "ts_step_s": stream.ts_step_s}, **trace}


def every_marks(events: int, every: int) -> list[int]:
    """Every multiple of ``every`` up to ``events``, and ``events``."""
    return sorted({*range(every, events + 1, every), events})


def print_life(result: dict[str, Any]) -> Iterator[str]:
    yield (f"one stream, default configuration, {result['events']:,} events in batches of "
           f"{result['batch']:,} ({result['pipeline_cpu_us_per_event']} µs of CPU per event in "
           f"the pipeline; {result['seconds']} s)")
    yield f"{'events':>12} {'RSS MB':>8} {'encoded B':>10} {'row B':>8} {'pieces B':>9} " \
          f"{'next sends B':>13} {'alarms':>7}"
    for p in result["points"]:
        yield (f"{p['events']:>12,} {p['rss_mb']:>8.1f} {p['encoded_bytes']:>10,} "
               f"{p['row_bytes']:>8,} {p['pieces_bytes']:>9,} {p['sent_next_bytes']:>13,} "
               f"{p['alarms']:>7}")
    flat = result["flat"]
    yield (f"flat (the median of the last {flat['tail']} points, from {flat['from_events']:,} "
           f"events, at most {flat['bound']:.0%} above the median before): {flat['flat']}; "
           f"growing keys (bytes/event): {flat['growing_keys'] or 'none'}")

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--window", default=str(DEFAULT_REFERENCE_WINDOW),
                        help="reference_window: an integer, or 'none' (unbounded)")
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pipeline", action="store_true",
                        help="a whole stream through the pipeline, with its checkpoint's size")
    parser.add_argument("--json", action="store_true", help="--pipeline: print one JSON object")
    args = parser.parse_args(argv)
    if args.pipeline:
        result = pipeline_life(every_marks(args.events, args.every), args.seed)
        print(json.dumps(result) if args.json else "\n".join(print_life(result)))
        return
    window = None if args.window.lower() == "none" else int(args.window)
    if args.every % args.chunk:
        parser.error("--every must be a multiple of --chunk")
    run(args.events, window, args.dim, args.chunk, args.every, args.seed)


if __name__ == "__main__":
    main()
