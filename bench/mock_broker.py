"""librdkafka's mock Kafka cluster in a child process, loaded with a workload, for the benchmarks.

The mock cluster runs on threads of the process whose confluent-kafka client created it; in the
consumer's process those threads would count as the consumer's CPU and compete with it for the
GIL-free cores. :func:`broker_process` starts it in a child process instead, produces the given
records there, and yields the bootstrap address; the consumers being measured (the worker, the
raw kafka-python consumer, the river peer) read from it over loopback like from a real broker.

The child lives until the ``with`` block ends (normally or by an exception): the parent closes
the child's stdin, which the child waits on, and kills it if it does not exit within a few
seconds. If the parent itself dies, the closed pipe stops the child too.

    with broker_process({"events": (values, keys)}) as bootstrap:
        ...  # KafkaConsumer(bootstrap_servers=bootstrap, ...)

Command line (what the parent runs; one ``--topic`` per topic, records as ``key<TAB>value``
lines, an empty key meaning none)::

    python bench/mock_broker.py --topic events=/tmp/events.tsv [--partitioner murmur2_random]
"""

from __future__ import annotations

import argparse
import contextlib
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = "READY"

#: ``key`` of each record: ``None`` (no key) or a string; values are bytes without newlines.
Records = tuple[Sequence[bytes], Sequence[str | None]]


@contextmanager
def broker_process(topics: Mapping[str, Records], partitioner: str = "murmur2_random",
                   producer: str = "confluent", start_timeout_s: float = 120.0,
                   timings: dict[str, float] | None = None) -> Iterator[str]:
    """A mock Kafka cluster in a child process holding ``topics``; yields ``"host:port"``.

    Each topic's records are produced (with confluent-kafka, ``partitioner`` on the keys: the
    Java client's ``murmur2_random`` by default; or with kafka-python, whose default partitioner
    is murmur2 too) before the address is yielded; ``timings`` receives the seconds that took
    (``produce_s``). The child is stopped when the block exits, also on an exception.
    """
    with tempfile.TemporaryDirectory(prefix="mock-broker-") as tmp:
        argv = [sys.executable, str(Path(__file__).resolve()), "--partitioner", partitioner,
                "--producer", producer]
        for topic, (values, keys) in topics.items():
            if len(values) != len(keys):
                raise ValueError(f"topic {topic}: {len(values)} values but {len(keys)} keys")
            path = Path(tmp) / f"{topic}.tsv"
            with path.open("wb") as fh:
                for value, key in zip(values, keys, strict=True):
                    if b"\n" in value or (key and ("\t" in key or "\n" in key)):
                        raise ValueError("values must not contain newlines, keys neither tabs")
                    fh.write((key or "").encode() + b"\t" + value + b"\n")
            argv += ["--topic", f"{topic}={path}"]
        with (Path(tmp) / "stderr.log").open("w+b") as stderr:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr, cwd=ROOT)
            try:
                bootstrap, produce_s = _await_ready(proc, start_timeout_s, stderr)
                if timings is not None:
                    timings["produce_s"] = produce_s
                yield bootstrap
            finally:
                _stop(proc)


def _await_ready(proc: subprocess.Popen[bytes], timeout_s: float,
                 stderr: object) -> tuple[str, float]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
        line = proc.stdout.readline().decode().strip() if ready else ""
        if line.startswith(READY + " "):
            _, bootstrap, produce_s = line.split(" ")
            return bootstrap, float(produce_s)
        if not ready or not line:  # timed out, or the child exited (EOF)
            _stop(proc)
            stderr.seek(0)  # type: ignore[attr-defined]
            tail = stderr.read()[-2000:].decode(errors="replace")  # type: ignore[attr-defined]
            raise RuntimeError(f"the mock broker process did not start (exit {proc.returncode}"
                               f"{', timed out' if not ready else ''}): {tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()  # the child waits for EOF on its stdin
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _read_records(path: str) -> tuple[list[bytes], list[bytes | None]]:
    values: list[bytes] = []
    keys: list[bytes | None] = []
    with open(path, "rb") as fh:
        for line in fh:
            key, _, value = line.rstrip(b"\n").partition(b"\t")
            keys.append(key or None)
            values.append(value)
    return values, keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topic", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--partitioner", default="murmur2_random")
    parser.add_argument("--producer", choices=["confluent", "kafka-python"], default="confluent")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.kafka_harness import mock_kafka_cluster, produce_confluent, produce_kafka_python

    with mock_kafka_cluster() as bootstrap:
        records = [(topic, *_read_records(path))
                   for topic, _, path in (spec.partition("=") for spec in args.topic)]
        start = time.perf_counter()
        for topic, values, keys in records:
            if args.producer == "confluent":
                produce_confluent(bootstrap, topic, values, keys,
                                  config={"partitioner": args.partitioner})
            else:
                produce_kafka_python(bootstrap, topic, values, keys)
        print(READY, bootstrap, f"{time.perf_counter() - start:.6f}", flush=True)
        sys.stdin.buffer.read()  # until the parent closes the pipe (or dies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
