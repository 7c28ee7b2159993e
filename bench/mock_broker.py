"""librdkafka's mock Kafka cluster in a child process, loaded with a workload, for the benchmarks.

The mock cluster runs on threads of the process whose confluent-kafka client created it; in the
consumer's process those threads would count as the consumer's CPU and compete with it for the
GIL-free cores. :func:`broker_process` starts it in a child process instead, produces the given
records there, and yields the bootstrap address; the consumers being measured (the worker, the
raw kafka-python consumer, the river peer) read from it over loopback like from a real broker.

The mock's consumer groups wait 3 s before their first join (``group.initial.rebalance.delay.ms``
of the mock, not a client setting); the child sets that delay to ``rebalance_delay_ms`` (0 by
default) through librdkafka's C API (ctypes on the library confluent-kafka ships), so that each
measured run does not begin with 3 idle seconds. ``None`` keeps librdkafka's default, as does a
library without that function.

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
import ctypes
import ctypes.util
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
                   producer: str = "confluent", rebalance_delay_ms: int | None = 0,
                   start_timeout_s: float = 120.0,
                   info: dict[str, float] | None = None) -> Iterator[str]:
    """A mock Kafka cluster in a child process holding ``topics``; yields ``"host:port"``.

    Each topic's records are produced (with confluent-kafka, ``partitioner`` on the keys: the
    Java client's ``murmur2_random`` by default; or with kafka-python, whose default partitioner
    is murmur2 too) before the address is yielded; ``info`` receives the seconds that took
    (``produce_s``) and the child's ``pid``. The child is stopped when the block exits, also on
    an exception.
    """
    with tempfile.TemporaryDirectory(prefix="mock-broker-") as tmp:
        argv = [sys.executable, str(Path(__file__).resolve()), "--partitioner", partitioner,
                "--producer", producer]
        if rebalance_delay_ms is not None:
            argv += ["--rebalance-delay-ms", str(rebalance_delay_ms)]
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
                if info is not None:
                    info["pid"] = proc.pid
                bootstrap, produce_s = _await_ready(proc, start_timeout_s, stderr)
                if info is not None:
                    info["produce_s"] = produce_s
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


@contextmanager
def mock_cluster(rebalance_delay_ms: int | None) -> Iterator[str]:
    """librdkafka's mock cluster (one broker) with the given initial rebalance delay of its
    consumer groups; ``None``, or a library without the setter: the tests' cluster (3 s)."""
    from connectors.mock_kafka import mock_kafka_cluster

    lib = None if rebalance_delay_ms is None else _librdkafka()
    if lib is None or not hasattr(lib, "rd_kafka_mock_group_initial_rebalance_delay_ms"):
        if rebalance_delay_ms is not None:
            print("mock_broker: cannot set the rebalance delay; librdkafka's default applies",
                  file=sys.stderr)
        with mock_kafka_cluster() as bootstrap:
            yield bootstrap
        return
    c_void_p, c_char_p, c_size_t = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    lib.rd_kafka_conf_new.restype = c_void_p
    lib.rd_kafka_conf_set.argtypes = [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]
    lib.rd_kafka_new.restype = c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, c_void_p, c_char_p, c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [c_void_p]
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [c_void_p, ctypes.c_int32]
    lib.rd_kafka_mock_cluster_bootstraps.restype = c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [c_void_p]
    lib.rd_kafka_destroy.argtypes = [c_void_p]
    error = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, value in ((b"test.mock.num.brokers", b"1"), (b"log_level", b"4")):
        if lib.rd_kafka_conf_set(conf, name, value, error, len(error)) != 0:
            raise RuntimeError(f"librdkafka: {error.value.decode()}")
    handle = lib.rd_kafka_new(0, conf, error, len(error))  # a producer; it owns conf now
    if not handle:
        raise RuntimeError(f"librdkafka: {error.value.decode()}")
    try:
        cluster = lib.rd_kafka_handle_mock_cluster(handle)
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, rebalance_delay_ms)
        yield lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
    finally:
        lib.rd_kafka_destroy(handle)  # the cluster stops with the client that started it


def _librdkafka() -> ctypes.CDLL | None:
    """The librdkafka that confluent-kafka loaded (its wheel's copy, else the system's)."""
    import confluent_kafka

    site = Path(confluent_kafka.__file__).resolve().parents[1]
    found = sorted(site.glob("confluent_kafka.libs/librdkafka*.so*"))
    name = str(found[0]) if found else ctypes.util.find_library("rdkafka")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


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
    parser.add_argument("--rebalance-delay-ms", type=int, help="default: librdkafka's (3 s)")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from connectors.mock_kafka import produce_confluent, produce_kafka_python

    with mock_cluster(args.rebalance_delay_ms) as bootstrap:
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
