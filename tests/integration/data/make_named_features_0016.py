"""Make ``named_features_0016.json.gz``: a database written by the release before migration 0017.

That release (commit 5bb3d14, schema revision 0016) stored object features only as JSON
objects. This script runs it on the first half of the named example's events (three streams,
``FEATURE_NAMES``) through a file source, stopped before the end-of-file flush, on PostgreSQL
(where JSONB reorders the calibration rows' keys), and writes every table's rows as JSON.
``tests/integration/test_feature_order.py`` loads them at revision 0016, upgrades and restarts.

Run it with the *previous* release's code on the path, on the example the current tests build::

    python -c "from pathlib import Path; from tests.support.streams import build_examples; \\
        build_examples(Path('/tmp/named'), named=True)"
    git worktree add /tmp/prev 5bb3d14
    createdb -h 127.0.0.1 -U postgres fixture0016
    cd /tmp/prev && PYTHONPATH=/tmp/prev python \\
        $OLDPWD/tests/integration/data/make_named_features_0016.py /tmp/named \\
        postgresql+psycopg://postgres@127.0.0.1:5432/fixture0016 \\
        $OLDPWD/tests/integration/data/named_features_0016.json.gz
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from monitor.pipeline import Pipeline
from monitor.runner import DatabaseSink, _monitors_for_run  # the previous release's names
from monitor.worker import StopFlag, Worker
from sqlalchemy import MetaData, select

from connectors import FileSource
from monitor.db.engine import make_engine

STREAMS = ("bikes", "taxis", "loans")


def run_half(folder: Path, url: str) -> tuple[Path, int]:
    values = (folder / "all_events.jsonl").read_bytes().splitlines()
    half = len(values) // 2
    events = folder / "day.jsonl"
    events.write_bytes(b"".join(v + b"\n" for v in values[:half]))
    sink = DatabaseSink(url)
    source = FileSource(events)
    monitors = _monitors_for_run([str(folder / f"{s}.yaml") for s in STREAMS], sink)
    stop = StopFlag()
    worker = Worker(source, Pipeline(monitors, source.name), sink, "file", batch_size=50,
                    on_batch=lambda _: stop.set() if source.position >= half else None)
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()
    return events, half


def plain(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return {"__b64__": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime):
        return {"__datetime__": value.isoformat()}
    return value


def dump(url: str) -> dict[str, list[dict[str, Any]]]:
    engine = make_engine(url)
    metadata = MetaData()
    metadata.reflect(engine)
    try:
        with engine.connect() as conn:
            return {
                name: [{k: plain(v) for k, v in row._mapping.items()}
                       for row in conn.execute(select(table))]
                for name, table in sorted(metadata.tables.items())
            }
    finally:
        engine.dispose()


def main() -> None:
    folder, url, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    events, half = run_half(folder, url)
    document = {"events_path": str(events), "lines": half, "tables": dump(url)}
    out.write_bytes(gzip.compress(json.dumps(document, separators=(",", ":")).encode(), 9, mtime=0))


if __name__ == "__main__":
    main()
