"""FileSource: offsets are line numbers, values are raw bytes, reading and seeking are lazy."""

from __future__ import annotations

import logging
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from connectors import (
    FileSource,
    OffsetRegressionError,
    PartitionNotAssignedError,
    Source,
    SourceConfigError,
    SourceError,
    SourceUnavailableError,
)


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_bytes(data)
    return path


def read_all(source: FileSource, batch: int = 1000) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while records := source.poll(batch, 0):
        out += [(r.offset, r.value) for r in records]
    return out


def test_offsets_are_line_numbers_and_blank_lines_count(tmp_path: Path) -> None:
    path = write(tmp_path, b'{"a": 1}\n\n   \n{"a": 2}\r\n\n{"a": 3}')
    with FileSource(path) as source:
        assert read_all(source) == [(0, b'{"a": 1}'), (3, b'{"a": 2}'), (5, b'{"a": 3}')]
        assert source.exhausted
        assert source.position == 6


def test_record_fields(tmp_path: Path) -> None:
    path = write(tmp_path, b'{"a": 1}\n')
    with FileSource(path) as source:
        (record,) = source.poll(10, 0)
    assert record.topic == str(path.resolve())
    assert (record.partition, record.offset, record.key, record.timestamp_ms) == (0, 0, None, None)
    assert source.name == f"file:{path.resolve()}"


def test_invalid_utf8_and_invalid_json_pass_through_as_bytes(tmp_path: Path) -> None:
    bad = b'{"id": "\xff\xfe"}'
    path = write(tmp_path, b'{"ok": 1}\n' + bad + b"\nnot json at all\n")
    with FileSource(path) as source:
        assert [v for _, v in read_all(source)] == [b'{"ok": 1}', bad, b"not json at all"]


def test_poll_respects_max_records_and_stays_exhausted(tmp_path: Path) -> None:
    path = write(tmp_path, b"".join(b'{"i": %d}\n' % i for i in range(10)))
    with FileSource(path) as source:
        assert [r.offset for r in source.poll(4, 0)] == [0, 1, 2, 3]
        assert not source.exhausted
        assert [r.offset for r in source.poll(100, 0)] == list(range(4, 10))
        assert source.poll(100, 0) == []
        assert source.exhausted


def test_overlong_line_is_cut_and_the_next_line_is_intact(tmp_path: Path) -> None:
    long_line = b"x" * 5000
    path = write(tmp_path, b"a\n" + long_line + b"\nb\n")
    with FileSource(path, max_line_bytes=100, chunk_bytes=64) as source:
        records = read_all(source)
    assert [o for o, _ in records] == [0, 1, 2]
    assert records[1][1] == long_line[:101]  # longer than the limit: the pipeline rejects it
    assert records[2][1] == b"b"


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 64, 2**20])
def test_seek_matches_reading_from_the_start(tmp_path: Path, chunk_bytes: int) -> None:
    rng = np.random.default_rng(7)
    # Lines of random length, some blank, the last one sometimes without its newline.
    lines = [b"y" * int(n) for n in rng.integers(0, 12, size=60)]
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
    path = write(tmp_path, data)
    with FileSource(path) as reference:
        expected = read_all(reference)
    with FileSource(path, chunk_bytes=chunk_bytes) as source:
        for target in rng.integers(0, len(lines) + 1, size=40):
            source.seek({(source.topic, 0): int(target)})
            assert read_all(source, batch=7) == [(o, v) for o, v in expected if o >= target]


def test_seek_backwards_replays_and_resets_the_commit_floor(tmp_path: Path) -> None:
    path = write(tmp_path, b"".join(b'{"i": %d}\n' % i for i in range(10)))
    with FileSource(path) as source:
        tp = (source.topic, 0)
        read_all(source)
        source.commit({tp: 10})
        source.seek({tp: 3})
        assert [r.offset for r in source.poll(2, 0)] == [3, 4]
        source.commit({tp: 5})  # an explicit rewind allows committing from there again
        assert source.committed == {tp: 5}


def test_seek_past_the_end_warns_and_is_exhausted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, b"a\nb\n")
    with FileSource(path) as source, caplog.at_level(logging.WARNING, "connectors.file"):
        source.seek({(source.topic, 0): 50})
        assert source.poll(10, 0) == []
        assert source.exhausted
    assert "has no line 50" in caplog.text


def test_seek_rejects_other_partitions_and_negative_lines(tmp_path: Path) -> None:
    path = write(tmp_path, b"a\n")
    with FileSource(path) as source:
        with pytest.raises(PartitionNotAssignedError):
            source.seek({(source.topic, 1): 0})
        with pytest.raises(SourceConfigError):
            source.seek({(source.topic, 0): -1})


def test_commits_only_increase(tmp_path: Path) -> None:
    path = write(tmp_path, b"a\nb\nc\n")
    with FileSource(path) as source:
        tp = (source.topic, 0)
        read_all(source)
        source.commit({tp: 2})
        source.commit({tp: 2})  # the same offset again is a no-op
        with pytest.raises(OffsetRegressionError, match="only ever increase"):
            source.commit({tp: 1})
        with pytest.raises(OffsetRegressionError):
            source.commit({tp: -1})
        with pytest.raises(PartitionNotAssignedError):
            source.commit({("other", 0): 1})
        source.commit({tp: 3})
        assert source.committed == {tp: 3}


def test_callbacks_assign_at_first_poll_and_revoke_at_close(tmp_path: Path) -> None:
    path = write(tmp_path, b"".join(b"%d\n" % i for i in range(5)))
    events: list[tuple[str, set[tuple[str, int]]]] = []
    source = FileSource(path)
    tp = (source.topic, 0)

    def assigned(partitions: set[tuple[str, int]]) -> None:
        events.append(("assign", partitions))
        source.seek({tp: 3})  # what the worker does with stored offsets

    source.on_assign(assigned)
    source.on_revoke(lambda partitions: events.append(("revoke", partitions)))
    assert source.assignment() == {tp}
    assert [r.offset for r in source.poll(10, 0)] == [3, 4]
    source.close()
    source.close()  # idempotent
    assert events == [("assign", {tp}), ("revoke", {tp})]
    with pytest.raises(SourceError, match="closed"):
        source.poll(1, 0)


def test_missing_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailableError, match="no such events file"):
        FileSource(tmp_path / "missing.jsonl")
    with pytest.raises(SourceUnavailableError, match="directory"):
        FileSource(tmp_path)


def test_is_a_source(tmp_path: Path) -> None:
    with FileSource(write(tmp_path, b"")) as source:
        assert isinstance(source, Source)
        assert source.poll(5, 0) == []
        assert source.exhausted


def _seek_large_file(tmp_path: Path) -> tuple[int, float]:
    """Peak traced memory (bytes) of reading and seeking a 34 MB file, and the first seek's
    seconds."""
    line = b'{"kind": "prediction", "stream": "s", "features": [0.1, 0.2, 0.3], "prediction": 1}'
    n = 400_000  # ~34 MB
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        for _ in range(n // 10_000):
            f.write((line + b"\n") * 10_000)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with FileSource(path, chunk_bytes=2**20) as source:
            source.seek({(source.topic, 0): n - 5})
            seek_s = time.perf_counter() - start
            assert [r.offset for r in source.poll(100, 0)] == list(range(n - 5, n))
            source.seek({(source.topic, 0): 1000})
            assert sum(len(source.poll(1000, 0)) for _ in range(50)) == 50_000
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, seek_s


def test_large_file_is_read_and_sought_in_bounded_memory(tmp_path: Path) -> None:
    """The 1 MiB read buffer, one chunk being counted and one batch of records, never the 34 MB
    file."""
    peak, _ = _seek_large_file(tmp_path)
    assert peak < 8 * 2**20, peak


@pytest.mark.slow
def test_large_file_is_sought_in_one_streaming_pass(tmp_path: Path) -> None:
    """One streaming pass takes about 0.05 s on an idle machine; the bound fails a
    line-by-line Python loop (timed: `make test-full` only, never on shared cores)."""
    _, seek_s = _seek_large_file(tmp_path)
    assert seek_s < 2.0, seek_s
