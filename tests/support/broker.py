"""A librdkafka mock Kafka cluster in a process of its own, so that a test can treat it like a
broker host: freeze it (SIGSTOP: connections hang, as with a stalled or partitioned broker), thaw
it (SIGCONT) or kill it (SIGKILL: connections are refused from then on).

    python -m tests.support.broker

prints ``BOOTSTRAP host:port`` on stdout, then serves until SIGTERM or until stdin closes (so it
never outlives the test process that started it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from connectors.mock_kafka import mock_kafka_cluster

ROOT = Path(__file__).resolve().parents[2]


class BrokerProcess:
    """Handle on a ``python -m tests.support.broker`` process."""

    def __init__(self, proc: subprocess.Popen[str], bootstrap: str) -> None:
        self.proc = proc
        self.bootstrap = bootstrap

    @classmethod
    def start(cls, log: Path) -> BrokerProcess:
        with log.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.broker"], cwd=ROOT, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the cluster is up (or the process died)
        if not line.startswith("BOOTSTRAP "):
            proc.kill()
            raise RuntimeError(f"mock broker did not start: {line!r}\n{log.read_text()}")
        return cls(proc, line.split()[1])

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


def _wait_for_stdin(done: threading.Event) -> None:
    sys.stdin.read()  # returns when the parent closes the pipe (or dies)
    done.set()


def main() -> int:
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=_wait_for_stdin, args=(done,), daemon=True).start()
    with mock_kafka_cluster() as bootstrap:
        print(f"BOOTSTRAP {bootstrap}", flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
