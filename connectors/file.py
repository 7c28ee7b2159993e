"""JSONL file source: one record per line, offsets are 0-based line numbers."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from connectors.base import FixedAssignmentSource, Record, TopicPartition
from connectors.errors import SourceConfigError, SourceUnavailableError

__all__ = ["FileSource"]

log = logging.getLogger(__name__)


class FileSource(FixedAssignmentSource):
    """Read a JSONL file lazily, line by line, as partition 0 of the topic ``str(path)``.

    Parameters
    ----------
    path
        The file. Records carry its absolute path as ``topic``; the source's ``name`` is
        ``file:<absolute path>``.
    max_line_bytes
        Longest line returned whole. A longer line is returned cut to ``max_line_bytes + 1``
        bytes (so that the pipeline sees it is oversized and dead-letters it) and the rest of it
        is skipped without being held in memory.
    chunk_bytes
        Read buffer size; also the step in which ``seek`` skips lines.

    Notes
    -----
    ``value`` is the raw line without its ``\\n`` (or ``\\r\\n``): no decoding happens here, so
    invalid UTF-8 or invalid JSON reaches the dead letters. Blank lines are not returned but
    still count as offsets, so offsets always equal line numbers. Memory stays bounded by
    ``chunk_bytes + max_line_bytes`` whatever the file size.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "events.jsonl"
    >>> _ = path.write_bytes(b'{"id": "a"}\\n\\n{"id": "b"}\\nnot json\\n')
    >>> with FileSource(path) as source:
    ...     [(r.offset, r.value) for r in source.poll(max_records=10, timeout_s=0)]
    [(0, b'{"id": "a"}'), (2, b'{"id": "b"}'), (3, b'not json')]
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_line_bytes: int = 16 * 2**20,
        chunk_bytes: int = 2**20,
    ) -> None:
        if max_line_bytes < 1:
            raise SourceConfigError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        if chunk_bytes < 1:
            raise SourceConfigError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.chunk_bytes = chunk_bytes
        self._topic = str(Path(path).resolve())
        self._file = _open(self._topic, chunk_bytes)
        self._line = 0  # line number of the next line to read
        self._eof = False
        super().__init__({(self._topic, 0)})

    @property
    def name(self) -> str:
        return f"file:{self._topic}"

    @property
    def topic(self) -> str:
        """The absolute path, used as every record's ``topic``."""
        return self._topic

    @property
    def exhausted(self) -> bool:
        return self._eof

    @property
    def position(self) -> int:
        """Line number of the next line to read."""
        return self._line

    def poll(self, max_records: int, timeout_s: float = 0.0) -> list[Record]:
        """Up to ``max_records`` non-blank lines; ``timeout_s`` is ignored (files never wait)."""
        self._start_poll()
        records: list[Record] = []
        while len(records) < max_records:
            line = self._read_line()
            if line is None:
                self._eof = True
                break
            offset = self._line
            self._line += 1
            if line.strip():
                records.append(Record(self._topic, 0, offset, None, line, None))
        return records

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Continue at a line number; forward seeks stream from the current position."""
        self._check_owned(offsets, "seek")
        for line in offsets.values():
            if line < 0:
                raise SourceConfigError(f"cannot seek {self.name} to line {line}: lines start at 0")
            if line < self._line:
                self._file.seek(0)
                self._line = 0
            self._skip_lines(line - self._line)
            self._eof = False
        self._ledger.rewind(offsets)

    def _read_line(self) -> bytes | None:
        data = self._file.readline(self.max_line_bytes + 1)
        if not data:
            return None
        if data.endswith(b"\n"):
            data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
        elif len(data) > self.max_line_bytes:
            self._discard_rest_of_line()
        return data

    def _discard_rest_of_line(self) -> None:
        while True:
            rest = self._file.readline(self.chunk_bytes)
            if not rest or rest.endswith(b"\n"):
                return

    def _skip_lines(self, count: int) -> None:
        # Count newlines chunk by chunk (bytes.count runs at memory speed) instead of building
        # one bytes object per line: resuming deep into a large file costs one streaming pass.
        while count > 0:
            chunk = self._file.read(self.chunk_bytes)
            if not chunk:
                log.warning("%s has no line %d: it has %d lines", self.name, self._line + count,
                            self._line)
                return
            newlines = chunk.count(b"\n")
            if newlines < count:
                self._line += newlines
                count -= newlines
                if not chunk.endswith(b"\n") and not self._file.peek(1):
                    self._line += 1  # a last line without its newline is a line too
                    count -= 1
                continue
            end = _nth_index(chunk, b"\n", count)
            self._file.seek(end + 1 - len(chunk), io.SEEK_CUR)
            self._line += count
            return

    def _close(self) -> None:
        self._file.close()


def _open(path: str, buffering: int) -> io.BufferedReader:
    try:
        return io.BufferedReader(io.FileIO(path, "rb"), buffer_size=buffering)
    except FileNotFoundError as exc:
        raise SourceUnavailableError(f"no such events file: {path}") from exc
    except IsADirectoryError as exc:
        raise SourceUnavailableError(f"{path} is a directory, not a JSONL file") from exc
    except PermissionError as exc:
        raise SourceUnavailableError(f"no permission to read {path}") from exc


def _nth_index(data: bytes, sub: bytes, n: int) -> int:
    """Index of the ``n``-th (1-based) occurrence of ``sub`` in ``data``; it must exist."""
    index = -1
    for _ in range(n):
        index = data.index(sub, index + 1)
    return index
