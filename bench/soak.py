"""Soak: resident memory and database size of ``monitor run`` over a long replay.

A stationary stream of real rows (the Shuttle pool of ``monitor.ops.datasets``, drawn with
replacement,
so the replay can be as long as wanted) with labels arriving ``--label-delay`` predictions late is
written to a JSONL file and processed by ``monitor --db URL run --source file:... --config ...`` in
its own process. Every ``--interval`` seconds the script samples the worker's resident set size
(``VmRSS`` in ``/proc/<pid>/status``), the events it has stored (its source offset), the database
size (PostgreSQL ``pg_database_size`` and per-table ``pg_total_relation_size``; SQLite: the file
plus its WAL) and the size of the stream's detector checkpoint (state text + arrays).

Bounded mode is the stream configuration ``max_reference: B`` with ``weighted: false``
(docs/algorithms.md): the covariate and conditional monitors keep O(B) reference state. The
weighted conditional monitor (WATCH, the default ``weighted: true``) has no bounded mode (the
configuration refuses ``max_reference`` with it): its reference grows with the labeled events, and
so do its checkpoint and the worker's memory; ``--mode weighted`` measures that.

Usage::

    .venv/bin/python bench/soak.py --events 1000000 --mode bounded --max-reference 1000
    .venv/bin/python bench/soak.py --events 200000 --mode weighted --json   # WATCH: grows
    .venv/bin/python bench/soak.py --events 200000 --mode unbounded         # no max_reference
    .venv/bin/python bench/soak.py --db private ...  # own PostgreSQL cluster, autovacuum on
    .venv/bin/python bench/soak.py --db sqlite:////tmp/soak.db ...  # default: fresh PostgreSQL
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.db.engine import make_engine  # noqa: E402
from monitor.ops.datasets import load_shuttle_regression  # noqa: E402

POSTGRES_ADMIN_URL = os.environ.get(
    "MONITOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
STREAM = "soak"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TABLES = ("trace_points", "alarms", "ood_windows", "ood_flags", "checkpoints", "source_offsets",
          "dead_letters")


@dataclass
class Sample:
    seconds: float
    events: int
    rss_mb: float
    db_mb: float
    checkpoint_kb: float
    tables_kb: dict[str, float] = field(default_factory=dict)


@dataclass
class SoakResult:
    events: int
    seconds: float
    exit_code: int
    config: dict[str, Any]
    samples: list[Sample]

    def summary(self) -> dict[str, Any]:
        """Growth over the second half of the run (after warm-up), per 100 000 events."""
        done = [s for s in self.samples if s.events > 0 and s.rss_mb > 0]  # the worker alive
        if len(done) < 4:
            return {"samples": len(done)}
        half = [s for s in done if s.events >= done[-1].events / 2]
        first, last = half[0], half[-1]
        per = 1e5 / max(1, last.events - first.events)
        return {
            "events": self.events,
            "seconds": round(self.seconds, 1),
            "events_per_s": round(self.events / self.seconds),
            "rss_mb_max": round(max(s.rss_mb for s in done), 1),
            "rss_mb_growth_per_100k_second_half": round((last.rss_mb - first.rss_mb) * per, 2),
            "checkpoint_kb_at_half": round(first.checkpoint_kb, 1),
            "checkpoint_kb_at_end": round(last.checkpoint_kb, 1),
            "db_mb_at_end": round(last.db_mb, 1),
            "db_kb_per_1k_events_second_half": round(
                (last.db_mb - first.db_mb) * 1024 * per / 100, 2),
            "table_kb_at_end": {k: round(v, 1) for k, v in last.tables_kb.items()},
        }


# -- the replay ------------------------------------------------------------------------------------


def write_replay(folder: Path, messages: int, label_delay: int, n_calibration: int, seed: int,
                 config: dict[str, Any]) -> tuple[Path, Path]:
    """A stationary stream of ``messages`` events (predictions and delayed labels) plus its
    calibration file and configuration; returns (events path, config path)."""
    task = load_shuttle_regression()
    rng = np.random.default_rng(seed)
    order = rng.permutation(task.y.shape[0])
    cal, pool = order[:n_calibration], order[n_calibration:]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "calibration.jsonl").open("w") as fh:
        for i, row in enumerate(cal):
            fh.write(json.dumps({"kind": "prediction", "stream": STREAM, "id": f"cal-{i}",
                                 "features": task.X[row].tolist(),
                                 "prediction": float(task.pred[row]),
                                 "label": float(task.y[row])}) + "\n")
    events = folder / "events.jsonl"
    with events.open("w") as fh:
        for line in _events(task, pool, messages, label_delay, rng):
            fh.write(line + "\n")
    config_path = folder / "soak.yaml"
    full = {"name": STREAM, "task": "regression", "calibration": "calibration.jsonl"} | config
    config_path.write_text(yaml.safe_dump(full, sort_keys=False))
    return events, config_path


def _events(task: Any, pool: np.ndarray, messages: int, delay: int,
            rng: np.random.Generator) -> Iterator[str]:
    pending: list[tuple[str, float]] = []
    written, i = 0, 0
    while written < messages:
        rows = rng.choice(pool, size=4096)
        for row in rows:
            if written >= messages:
                return
            event_id, ts = f"e-{i:09d}", _iso(T0 + timedelta(seconds=i))
            event = {"kind": "prediction", "stream": STREAM, "id": event_id, "ts": ts,
                     "features": task.X[row].tolist(), "prediction": float(task.pred[row])}
            if delay == 0:
                event["label"] = float(task.y[row])
            else:
                pending.append((event_id, float(task.y[row])))
            yield json.dumps(event, separators=(",", ":"))
            written += 1
            i += 1
            if delay and len(pending) > delay and written < messages:
                label_id, label = pending.pop(0)
                yield json.dumps({"kind": "label", "stream": STREAM, "id": label_id, "ts": ts,
                                  "label": label}, separators=(",", ":"))
                written += 1


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


# -- measuring -------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    """Resident set size of a live process, MiB (0 once it has exited)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Probe:
    """Reads progress and sizes from the worker's database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = make_engine(url)
        self.postgres = make_url(url).get_backend_name() == "postgresql"

    def sample(self) -> tuple[int, float, float, dict[str, float]]:
        """(events stored, database MiB, checkpoint KiB, per-table KiB)."""
        try:
            with self.engine.connect() as conn:
                events = conn.execute(text('SELECT coalesce(sum("offset"), 0) FROM source_offsets'
                                           )).scalar_one()
                checkpoint = conn.execute(text(
                    "SELECT coalesce(sum(length(state) + coalesce(length(arrays), 0)), 0) "
                    "FROM checkpoints")).scalar_one()
                db_mb, tables = self._sizes(conn)
        except Exception as exc:  # tables not created yet
            if "does not exist" in str(exc) or "no such table" in str(exc):
                return 0, 0.0, 0.0, {}
            raise
        return int(events), db_mb, checkpoint / 1024, tables

    def _sizes(self, conn: Any) -> tuple[float, dict[str, float]]:
        if self.postgres:
            db = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            tables = {t: conn.execute(text(f"SELECT pg_total_relation_size('{t}')")).scalar_one()
                      / 1024 for t in TABLES}
            return db / 2**20, tables
        path = Path(make_url(self.url).database or "")
        size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
        return size / 2**20, {}

    def close(self) -> None:
        self.engine.dispose()


def run_soak(db: str, events: Path, config: Path, interval_s: float = 5.0,
             batch_size: int = 500, log: Path | None = None) -> tuple[int, float, list[Sample]]:
    """Run ``monitor run`` over ``events`` into ``db``, sampling until it exits."""
    argv = [sys.executable, "-m", "monitor.cli", "--db", db, "run", "--source",
            f"file:{events}", "--config", str(config), "--batch-size", str(batch_size)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "MONITOR_LOG_LEVEL": "WARNING"}
    probe = Probe(db)
    samples: list[Sample] = []
    start = time.monotonic()
    with open(log or os.devnull, "wb") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            while proc.poll() is None:
                rss = rss_mb(proc.pid)
                stored, db_mb, ckpt, tables = probe.sample()
                samples.append(Sample(time.monotonic() - start, stored, rss, db_mb, ckpt, tables))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(interval_s)
        finally:
            if proc.poll() is None:
                proc.kill()
            code = proc.wait()
            stored, db_mb, ckpt, tables = probe.sample()
            samples.append(Sample(time.monotonic() - start, stored, 0.0, db_mb, ckpt, tables))
            probe.close()
    return code, time.monotonic() - start, samples


def soak(db: str, folder: Path, messages: int, config: dict[str, Any], label_delay: int = 10,
         n_calibration: int = 1000, seed: int = 0, interval_s: float = 5.0,
         batch_size: int = 500) -> SoakResult:
    """Write the replay, run it, return the samples."""
    events, config_path = write_replay(folder, messages, label_delay, n_calibration, seed, config)
    code, seconds, samples = run_soak(db, events, config_path, interval_s, batch_size,
                                      folder / "worker.log")
    return SoakResult(messages, seconds, code, config, samples)


@contextmanager
def fresh_postgres() -> Iterator[str]:
    """A uniquely named database on the local server, dropped afterwards."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"monitor_soak_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(
            hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="messages in the replay")
    parser.add_argument("--mode", choices=("bounded", "unbounded", "weighted"), default="bounded",
                        help="bounded: max_reference, weighted: false; unbounded: neither; "
                        "weighted: the default configuration (WATCH, which has no bounded mode)")
    parser.add_argument("--max-reference", type=int, default=1000)
    parser.add_argument("--label-delay", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--db", help="database URL, or 'private': a throw-away PostgreSQL "
                        "cluster with default settings (autovacuum on) started for this run; "
                        "default: a fresh database on MONITOR_TEST_POSTGRES_URL's server")
    parser.add_argument("--out", help="folder for the replay files (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print samples and summary as JSON")
    args = parser.parse_args()
    config: dict[str, Any] = {
        "bounded": {"max_reference": args.max_reference, "weighted": False},
        "unbounded": {"weighted": False},
        "weighted": {"weighted": True},
    }[args.mode]
    folder = Path(args.out or tempfile.mkdtemp(prefix="monitor-soak-"))
    with _database(args.db) as db:
        result = soak(db, folder, args.events, config, args.label_delay,
                      interval_s=args.interval, batch_size=args.batch_size)
    if args.json:
        print(json.dumps({"summary": result.summary(), "config": config,
                          "samples": [asdict(s) for s in result.samples]}))
    else:
        print(f"config {config}, exit code {result.exit_code}")
        print(f"{'s':>7} {'events':>9} {'RSS MiB':>8} {'DB MiB':>8} {'ckpt KiB':>9}")
        for s in result.samples:
            print(f"{s.seconds:7.0f} {s.events:9d} {s.rss_mb:8.1f} {s.db_mb:8.1f} "
                  f"{s.checkpoint_kb:9.1f}")
        print(json.dumps(result.summary(), indent=2))
    return result.exit_code


@contextmanager
def private_postgres() -> Iterator[str]:
    """A PostgreSQL cluster of its own (bench/pgcluster.py), default settings."""
    from bench.pgcluster import PrivatePostgres

    cluster = PrivatePostgres(Path(tempfile.mkdtemp(prefix="monitor-soak-pg-")))
    cluster.init()
    cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.destroy()


@contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url == "private":
        with private_postgres() as db:
            yield db
    elif url:
        yield url
    else:
        with fresh_postgres() as db:
            yield db


if __name__ == "__main__":
    sys.exit(main())
