"""Workers in their own processes, and waiting on what they store in PostgreSQL and Kafka."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from sqlalchemy import select

from monitor.db.engine import make_engine
from monitor.db.models import SourceOffsetRow
from tests.support.kafka import MOCK_URL_OPTIONS_BY_CLIENT

ROOT = Path(__file__).resolve().parents[2]

#: Mock-broker kafka-python options a URL can carry (connectors/mock_kafka.py explains them);
#: the patient assignor needs code, so workers sharing a group run ``worker_main`` instead.
MOCK_URL_OPTIONS = MOCK_URL_OPTIONS_BY_CLIENT["kafka-python"]


class WorkerProcess:
    """A worker process writing its stdout and stderr (logs) to files under ``folder``."""

    def __init__(self, argv: Sequence[str], folder: Path, name: str) -> None:
        self.name = name
        self.log = folder / f"{name}.log"
        self.out = folder / f"{name}.out"
        env = {**os.environ, "MONITOR_LOG_LEVEL": "INFO", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT)}
        with self.log.open("wb") as err, self.out.open("wb") as out:
            self.proc = subprocess.Popen(list(argv), cwd=ROOT, stdout=out, stderr=err, env=env)

    @classmethod
    def cli(cls, folder: Path, name: str, db: str, source: str, group: str,
            configs: Sequence[str], batch_size: int,
            checkpoint_every: int = 1) -> WorkerProcess:
        """``monitor --db DB run --source SOURCE --group GROUP --config ... --batch-size N
        [--checkpoint-every K]``."""
        argv = [sys.executable, "-m", "monitor.cli", "--db", db, "run", "--source", source,
                "--group", group, *configs, "--batch-size", str(batch_size),
                *_every(checkpoint_every)]
        return cls(argv, folder, name)

    @classmethod
    def patient(cls, folder: Path, name: str, db: str, source: str, group: str,
                configs: Sequence[str], batch_size: int,
                checkpoint_every: int = 1) -> WorkerProcess:
        """``monitor run`` with every mock-broker consumer option (``worker_main``)."""
        argv = [sys.executable, "-m", "tests.integration.worker_main", "--db", db, "--source",
                source, "--group", group, *configs, "--batch-size", str(batch_size),
                *_every(checkpoint_every)]
        return cls(argv, folder, name)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return f"--- {self.name} (exit {self.proc.poll()}) ---\n" + "\n".join(
            self.logs().splitlines()[-lines:]
        )

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, then the exit code (the worker finishes its batch, commits and exits)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def ensure_dead(self) -> None:
        if self.alive:
            self.kill()


def _every(checkpoint_every: int) -> list[str]:
    return [] if checkpoint_every == 1 else ["--checkpoint-every", str(checkpoint_every)]


#: Seconds a wait on a worker may take: a liveness bound (a hung worker fails the test; a dead
#: one fails it at once), never a speed bound — each wait takes seconds on an idle machine.
PATIENCE_S = 600.0


def wait_until(condition: Callable[[], bool], what: str, workers: Sequence[WorkerProcess] = (),
               timeout_s: float = PATIENCE_S, every_s: float = 0.02) -> None:
    """Poll ``condition``; fail with the workers' logs if one dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        dead = [w for w in workers if not w.alive]
        if dead:
            raise AssertionError(f"worker died while waiting for {what}\n"
                                 + "\n".join(w.tail() for w in dead))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n"
                                 + "\n".join(w.tail() for w in workers))
        time.sleep(every_s)


class OffsetWatch:
    """Reads the offsets a worker stored in the database for one source."""

    def __init__(self, url: str, source: str) -> None:
        self.engine = make_engine(url)
        self.source = source

    def __call__(self) -> dict[int, int]:
        query = select(SourceOffsetRow.partition, SourceOffsetRow.offset).where(
            SourceOffsetRow.source == self.source
        )
        try:
            with self.engine.connect() as conn:
                return {p: o for p, o in conn.execute(query)}
        except Exception as exc:  # the worker has not created the tables yet
            if "source_offsets" in str(exc):
                return {}
            raise

    def total(self) -> int:
        return sum(self().values())

    def close(self) -> None:
        self.engine.dispose()


def group_offsets(
    bootstrap: str, group: str, topic: str, partitions: Sequence[int]
) -> dict[int, int]:
    """Offsets the consumer group committed to Kafka (partitions without a commit are absent)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, api_version=(2, 3))
    try:
        found = {p: consumer.committed(KafkaTopicPartition(topic, p)) for p in partitions}
    finally:
        consumer.close(autocommit=False)
    return {p: o for p, o in found.items() if o is not None}


_ASSIGNED = re.compile(r"monitor\.engine\.worker: assigned (\[.*?\]); resuming at (.*)$")


def assignments(worker: WorkerProcess) -> list[tuple[set[int], str]]:
    """Every assignment the worker logged: its partitions and where it resumed."""
    found = []
    for line in worker.logs().splitlines():
        match = _ASSIGNED.search(line)
        if match:
            partitions = {p for _, p in ast.literal_eval(match.group(1))}
            found.append((partitions, match.group(2)))
    return found


def owned(worker: WorkerProcess) -> set[int]:
    latest = assignments(worker)
    return latest[-1][0] if latest else set()
