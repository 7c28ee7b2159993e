"""Malformed events mixed into good traffic: every one in the dead letters with its reason, the
worker alive, and the good events' results (alarms, checkpoints, trace points, OOD decisions)
identical to a run without them.

10 000 seeded malformed records of 18 kinds (badinput.py) plus 200 duplicate prediction ids are
mixed at random positions into four real-data streams (~3 000 good events), once in a JSONL file
read by an in-process worker (with real oversized payloads: 20 records of 0.25–1 MiB and one
17 MiB line) and once in a Kafka topic read by ``monitor run`` in its own process (with
tombstones; the event size limit is set to 8 KiB there so oversized records stay within the mock
broker's 5 MiB per partition; 3 000 malformed records in CI, 10 000 in the ``slow`` run).

The last tests pin inputs the pipeline used to mishandle (found by this suite, fixed since): an id
with a NUL character (PostgreSQL cannot store it: the worker now isolates such a record, and
validation now refuses it), huge finite features (the kNN score overflowed to NaN after
``event_index`` had moved: every later result of the stream shifted), numeric strings and
booleans coerced to numbers, and JSON nested beyond Python's recursion limit.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from connectors import MemorySource
from monitor.db.engine import make_engine
from monitor.db.models import DeadLetterRow
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import NullSink, RetryPolicy, Worker
from monitor.streams.records import DeadLetter
from monitor.streams.setup import build_monitors, read_configs
from tests.support.bad_input import BadEvent, Mixed, Templates, generate, mix
from tests.support.processes import MOCK_URL_OPTIONS, OffsetWatch, WorkerProcess, wait_until
from tests.support.streams import (
    Example,
    Snapshot,
    canonical,
    end_offsets,
    reference_run,
    snapshot,
)
from tests.support.workloads import differences, produce

pytestmark = pytest.mark.postgres

N_BAD = 10_000
N_DUPLICATES = 200
FILE_LIMIT = 256 * 1024  # Settings.max_event_bytes default
KAFKA_LIMIT = 8 * 1024


@pytest.fixture
def good(workload: Example) -> Example:
    return workload


@pytest.fixture
def clean(workload_reference: Snapshot) -> Snapshot:
    """The results of the good events alone."""
    return workload_reference


def mixed_traffic(good: Example, seed: int, limit: int, kafka: bool, n_bad: int = N_BAD
                  ) -> Mixed:
    rng = np.random.default_rng(seed)
    streams = sorted(set(good.keys))
    templates = Templates.from_values(good.values, streams)
    bad = generate(rng, templates, n_bad, max_event_bytes=limit, n_huge=20, tombstones=kafka)
    delayed = sorted({k for k, v in zip(good.keys, good.values, strict=True)
                      if b'"kind":"label"' in v})
    return mix(good.values, good.keys, bad, rng, N_DUPLICATES, delayed)


def dead_letters(url: str) -> dict[tuple[int, int], Any]:
    """Stored dead-letter rows by (partition, offset)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = list(conn.execute(select(DeadLetterRow.__table__)))
    finally:
        engine.dispose()
    return {(r.partition, r.offset): r for r in rows}


def assert_every_bad_record_dead_lettered(
    letters: dict[tuple[int, int], Any], expected: dict[tuple[int, int], BadEvent]
) -> None:
    wrong = [(where, bad.category, bad.reason, letters[where].reason)
             for where, bad in expected.items()
             if where in letters and not re.match(bad.reason, letters[where].reason)]
    missing = Counter(bad.category for where, bad in expected.items() if where not in letters)
    unexpected = sorted(set(letters) - set(expected))
    assert not missing, f"malformed records not dead-lettered: {missing}"
    assert not unexpected, f"good records dead-lettered: {unexpected[:5]}"
    assert not wrong, f"{len(wrong)} dead letters with an unexpected reason, e.g. {wrong[:3]}"
    for where, bad in expected.items():
        assert bytes(letters[where].payload) == (bad.value or b"")[: DeadLetter.MAX_PAYLOAD]


def test_malformed_lines_in_a_file(good: Example, clean: Snapshot, pg_url: str,
                                   tmp_path: Path) -> None:
    traffic = mixed_traffic(good, seed=1, limit=FILE_LIMIT, kafka=False)
    values = [v for v in traffic.values if v is not None]
    giant = len(values)  # one line longer than FileSource.max_line_bytes (16 MiB)
    values.append(b'{"kind":"label","pad":"' + b"y" * (17 * 2**20) + b'"}')
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(v + b"\n" for v in values))
    mixed = Example(tmp_path, good.configs, path, tuple(values), ())

    got = reference_run(mixed, pg_url, batch_size=200)  # raises if the worker fails

    assert differences(got, clean) == []
    expected = {(0, i): bad for i, bad in traffic.bad.items()}
    letters = dead_letters(pg_url)
    giant_letter = letters.pop((0, giant))
    assert giant_letter.reason == (f"event of {16 * 2**20 + 1} bytes exceeds the limit of "
                                   f"{FILE_LIMIT}")
    assert_every_bad_record_dead_lettered(letters, expected)
    assert len(expected) == N_BAD + N_DUPLICATES
    assert len(Counter(b.category for b in expected.values())) == 19


@pytest.mark.kafka
@pytest.mark.parametrize("n_bad", [
    3000, pytest.param(N_BAD, marks=pytest.mark.slow),
], ids=["3000", "10000"])
def test_malformed_messages_on_a_topic(good: Example, clean: Snapshot, pg_url: str,
                                       kafka_broker: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, n_bad: int) -> None:
    traffic = mixed_traffic(good, seed=2, limit=KAFKA_LIMIT, kafka=True, n_bad=n_bad)
    placed = produce(kafka_broker, "mixed", traffic.values, traffic.keys)
    end = end_offsets(placed)
    monkeypatch.setenv("MONITOR_MAX_EVENT_BYTES", str(KAFKA_LIMIT))
    source = f"kafka://{kafka_broker}/mixed?{MOCK_URL_OPTIONS}"
    worker = WorkerProcess.cli(tmp_path, "worker", pg_url, source, "bad-input",
                               good.config_args, batch_size=500)
    stored = OffsetWatch(pg_url, "kafka:mixed")
    try:
        wait_until(lambda: stored() == end, "every record stored", [worker], timeout_s=120)
        assert worker.terminate() == 0, worker.tail()
    finally:
        worker.ensure_dead()
        stored.close()

    assert differences(snapshot(pg_url), clean) == []
    expected = {placed[i]: bad for i, bad in traffic.bad.items()}
    assert_every_bad_record_dead_lettered(dead_letters(pg_url), expected)
    assert "Traceback" not in worker.logs()
    assert Counter(b.category for b in expected.values())["tombstone"] > n_bad // 20


# -- inputs the pipeline used to mishandle (found by this suite, fixed in 9352653) ------------


def _run_in_process(example_configs: tuple[Path, ...], values: list[bytes], url: str) -> None:
    source = MemorySource(values)
    sink = DatabaseSink(url)
    pipeline = Pipeline(build_monitors(read_configs(map(str, example_configs))), source.name)
    try:
        Worker(source, pipeline, sink, "memory", batch_size=100,
               retry=RetryPolicy(deadline_s=2)).run()
    finally:
        sink.close()


def _results(configs: tuple[Path, ...], values: list[bytes]) -> tuple[Any, ...]:
    """Alarms, trace points and final states of an in-memory run (no database)."""
    source = MemorySource(values)
    pipeline = Pipeline(build_monitors(read_configs(map(str, configs))), source.name)
    outputs: list[Any] = []
    Worker(source, pipeline, NullSink(), "memory", batch_size=500,
           on_batch=outputs.append).run()
    # Sorted: the order of streams within one batch's output is not part of the contract.
    alarms = sorted((a.to_json() for out in outputs for a in out.alarms), key=_where)
    traces = sorted((t.to_json() for out in outputs for t in out.trace_points), key=_where)
    states = {name: canonical(m.state_dict()) for name, m in pipeline.streams.items()}
    return alarms, traces, states


def _where(record: dict[str, Any]) -> tuple[str, str, int]:
    return record["stream"], record["detector"], record["event_index"]


def _with(values: tuple[bytes, ...], positions: dict[int, bytes]) -> list[bytes]:
    out = []
    for i, value in enumerate(values):
        out.append(value)
        if i in positions:
            out.append(positions[i])
    return out


def test_an_event_id_the_database_cannot_store_does_not_stop_the_worker(
    good: Example, clean: Snapshot, pg_url: str
) -> None:
    """A NUL character in an event id passes validation; when an alarm refers to that event,
    PostgreSQL refuses the batch (text cannot hold NUL). The worker must not crash-loop on it:
    it isolates the record, dead-letters it and goes on."""
    # The first covariate alarm of each stream: raised by the prediction record itself.
    first: dict[str, str] = {}
    for a in sorted(clean.alarms, key=lambda a: a["event_index"]):
        if a["detector"] == "covariate":
            first.setdefault(a["stream"], a["event_id"])
    alarmed = set(first.items())
    values = list(good.values)
    poisoned = []
    for i, value in enumerate(values):
        event = json.loads(value)
        if event["kind"] == "prediction" and (event["stream"], event["id"]) in alarmed:
            values[i] = json.dumps({**event, "id": event["id"] + "\u0000"}).encode()
            poisoned.append(i)
    assert len(poisoned) == len(alarmed) >= 2
    _run_in_process(good.configs, values, pg_url)  # completes: no exception
    letters = dead_letters(pg_url)
    assert sorted(offset for _, offset in letters) == poisoned
    assert all(r.reason.startswith(("field 'id'", "results cannot be stored"))
               for r in letters.values())


def test_an_event_id_with_a_nul_character_is_invalid() -> None:
    from monitor.streams.events import InvalidEvent, decode_event

    with pytest.raises(InvalidEvent, match="field 'id'"):
        decode_event(b'{"kind": "label", "stream": "s", "id": "e-1\\u0000", "label": 1.0}')


def test_huge_finite_features_leave_the_good_results_unchanged(good: Example) -> None:
    event = json.loads(next(v for v in good.values if b'"kind":"prediction"' in v))
    bad = {}
    for n, i in enumerate((500, 1500, 2500)):
        bad[i] = json.dumps({**event, "id": f"huge-{n}", "features": [1e308] * 5}).encode()
    with_bad = _results(good.configs, _with(good.values, bad))
    assert with_bad == _results(good.configs, list(good.values))


@pytest.mark.parametrize("change", [
    {"prediction": "2.5"}, {"prediction": True}, {"label": "57"}, {"ts": True},
], ids=["string-prediction", "bool-prediction", "string-label", "bool-ts"])
def test_wrong_types_are_not_coerced(change: dict[str, object]) -> None:
    from monitor.streams.events import InvalidEvent, decode_event

    event = {"kind": "prediction", "stream": "s", "id": "e-1", "ts": "2026-01-01T00:00:00Z",
             "features": [1.0, 2.0, 3.0, 4.0, 5.0], "prediction": 2.5} | change
    with pytest.raises(InvalidEvent):
        decode_event(json.dumps(event).encode())


@pytest.mark.parametrize(("features", "decoded"), [
    (["1.5", "2", "3", "4", "5"], ("1.5", "2", "3", "4", "5")),
    ([True, 2, 3, 4, 5], (True, 2.0, 3.0, 4.0, 5.0)),
], ids=["numeric-strings", "bool-feature"])
def test_feature_strings_and_booleans_are_not_coerced(features: list[object],
                                                      decoded: tuple[object, ...]) -> None:
    """A string or boolean feature value is a category (docs/tabular.md), kept as given; a
    numeric stream refuses it, naming the feature and the value."""
    from monitor.streams.events import InvalidEvent, PredictionEvent, decode_event

    event = decode_event(json.dumps({"kind": "prediction", "stream": "s", "id": "e-1",
                                     "features": features, "prediction": 2.5}).encode())
    assert isinstance(event, PredictionEvent)
    assert [(type(v), v) for v in event.features] == [(type(v), v) for v in decoded]
    with pytest.raises(InvalidEvent, match=r"field 'features\.0': .* is not a number"):
        event.feature_values(None)


def test_deeply_nested_json_is_dead_lettered_as_invalid_json() -> None:
    source = MemorySource([b"[" * 5000 + b"]" * 5000])
    out = Pipeline({}, source.name).process(source.poll(10))
    assert [d.reason[:14] for d in out.dead_letters] == ["not valid JSON"]
