"""Object features keep their order across restarts on PostgreSQL (issue 24).

PostgreSQL's JSONB stores an object's keys in its own order (shorter keys first, then
bytewise), so a stream whose order was read back from its stored calibration rows restarted
with its features permuted against its checkpoint (and stopped with a traceback). The streams
here name their features in orders JSONB does not keep (``FEATURE_NAMES``: alphabetical,
reverse, mixed lengths); a restart from the registry, as ``monitor run`` without ``--config``
does, gives exactly an uninterrupted run's results, from a file and from Kafka with SIGKILLs.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Integer, MetaData, func, insert, select

from connectors.mock_kafka import produce_kafka_python
from monitor.cli.runs import register_stream_version
from monitor.db.engine import make_engine
from monitor.db.migrate import upgrade
from monitor.db.models import StreamRow
from monitor.settings import Settings
from tests.support.processes import (
    MOCK_URL_OPTIONS,
    OffsetWatch,
    WorkerProcess,
    wait_until,
)
from tests.support.streams import (
    FEATURE_NAMES,
    POISON,
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    run_file,
    snapshot,
)

#: A database written by the release before migration 0017 (data/make_named_features_0016.py).
FIXTURE = Path(__file__).parent / "data" / "named_features_0016.json.gz"


def stored_orders(url: str) -> dict[str, tuple[str, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(StreamRow.name, StreamRow.feature_names)).all()
    finally:
        engine.dispose()
    return {name: tuple(names) for name, names in rows}


@pytest.mark.postgres
def test_restart_from_the_registry_reads_features_in_their_order(
    named_example: Example, named_reference: Snapshot, pg_url: str, tmp_path: Path
) -> None:
    """Run half the events, append the rest, restart without ``--config``: the results are the
    uninterrupted run's (alarms, checkpoints, trace points, OOD windows and flags)."""
    values = named_example.values
    events = tmp_path / "day.jsonl"
    half = len(values) // 2
    events.write_bytes(b"".join(v + b"\n" for v in values[:half]))
    run_file(events, pg_url, named_example.configs, upto=half)
    with events.open("ab") as fh:
        fh.write(b"".join(v + b"\n" for v in values[half:]))
    run_file(events, pg_url, (), upto=len(values))
    assert stored_orders(pg_url) == FEATURE_NAMES
    assert_same_results(snapshot(pg_url), named_reference)


@pytest.mark.kafka
@pytest.mark.postgres
def test_sigkill_then_restart_from_the_registry_changes_nothing(
    named_example: Example, named_reference: Snapshot, kafka_broker_module: str, pg_url: str,
    tmp_path: Path,
) -> None:
    """Through Kafka: the first worker registers the streams, each later one (started without
    ``--config``, after a SIGKILL mid-replay) restores them from PostgreSQL."""
    topic, group = "named-features", "g-named-features"
    end = end_offsets(produce_kafka_python(kafka_broker_module, topic, named_example.values,
                                           named_example.keys))
    total = sum(end.values())
    source = f"kafka://{kafka_broker_module}/{topic}?{MOCK_URL_OPTIONS}"
    stored = OffsetWatch(pg_url, f"kafka:{topic}")
    try:
        for i, fraction in enumerate(np.sort(np.random.default_rng(24).uniform(0.2, 0.7, 2))):
            configs = named_example.config_args if i == 0 else []
            worker = WorkerProcess.cli(tmp_path, f"killed-{i}", pg_url, source, group, configs,
                                       batch_size=20)
            try:
                wait_until(lambda n=fraction * total: stored.total() >= n,
                           f"{fraction:.0%} of the records stored", [worker])
                worker.kill()
            finally:
                worker.ensure_dead()
        assert 0 < stored.total() < total  # killed mid-replay
        final = WorkerProcess.cli(tmp_path, "final", pg_url, source, group, [], batch_size=20)
        try:
            wait_until(lambda: stored() == end, "stored offsets at the end", [final])
            assert final.terminate() == 0, final.tail()
        finally:
            final.ensure_dead()
        assert "Traceback" not in final.logs(), final.tail()
    finally:
        stored.close()
    assert stored_orders(pg_url) == FEATURE_NAMES
    assert_same_results(snapshot(pg_url), named_reference)


def test_a_database_of_the_previous_release_upgrades_and_restarts(
    empty_database_url: str, named_example: Example, named_reference: Snapshot, tmp_path: Path
) -> None:
    """The previous release ran half the named events (on PostgreSQL, whose JSONB reordered the
    calibration rows' keys; its own restart then failed). Loaded at revision 0016, upgraded
    (0017 recovers each order from the checkpoint) and restarted from the registry, the
    database ends with an uninterrupted run's results."""
    url = empty_database_url
    events = tmp_path / "day.jsonl"
    lines = load_fixture(url, events)
    values = named_example.values
    events.write_bytes(b"".join(v + b"\n" for v in values[:lines]))
    upgrade(url)
    assert stored_orders(url) == FEATURE_NAMES
    with events.open("ab") as fh:
        fh.write(b"".join(v + b"\n" for v in values[lines:]))
    run_file(events, url, (), upto=len(values))
    assert_same_results(without_joined(snapshot(url)), without_joined(named_reference))


#: Checkpoint keys the previous release did not write.
_NOT_IN_OLD = ("'joined'", "'quality'")
#: Parameters the previous release did not write, whose value it reads as "none": the reference
#: bank (the whole calibration, kept until the next configuration version; the fixture's
#: calibration is smaller than the default bank, so the results are the same).
_BANK_PARAMS = ("'reference_bank'", "'bank'")


def without_joined(snap: Snapshot) -> Snapshot:
    """``snap`` without the label join's joined ids and the data-quality state in its
    checkpoints: the previous release's checkpoints have neither (this release remembers joined
    ids from then on, for replays, and starts the data-quality monitor and its time budget
    afresh at the restart: docs/tabular.md), nor the reference bank's size in the covariate and
    OOD parameters (an old checkpoint keeps its whole calibration as its bank). The
    full-conformal OOD rule's leave-one-out distances are compared to 9 decimals: the previous
    release computed them with BLAS, on another machine, whose last bits differ from this
    release's fixed-order sums (``monitor/core/decisions/full_conformal.py``)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict) and "mapping" in value:
            return {"mapping": [(k, _rounded(v) if k in _LOO else strip(v))
                                for k, v in value["mapping"] if k not in _NOT_IN_OLD
                                and not (k in _BANK_PARAMS and not isinstance(v, tuple))]}
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list):
            return (value[0], [strip(v) for v in value[1]])
        return value

    return dataclasses.replace(
        snap, checkpoints={s: strip(state) for s, state in snap.checkpoints.items()}
    )


_LOO = ("'loo_kth'", "'loo_prev'")


def _rounded(value: Any) -> Any:
    kind, dtype, shape, data = value
    return (kind, dtype, shape, np.round(np.frombuffer(data, dtype), 9).tobytes())


def load_fixture(url: str, events: Path, tamper: str | None = None) -> int:
    """Load ``FIXTURE``'s rows into an empty database at revision 0016, its file source renamed
    to ``events``; the number of event lines the previous release had read. ``tamper``: that
    stream's checkpoint names other features (q, r, s, t, u)."""
    document = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    text = json.dumps(document["tables"]).replace(document["events_path"], str(events))
    tables = json.loads(text, object_hook=_tagged)
    for row in tables["checkpoints"]:
        if row["stream"] == tamper:
            names = json.dumps(list(FEATURE_NAMES[tamper]), separators=(",", ":"))
            assert names in row["state"]
            row["state"] = row["state"].replace(names, '["q","r","s","t","u"]')
    upgrade(url, "0016")
    engine = make_engine(url)
    metadata = MetaData()
    metadata.reflect(engine)
    try:
        with engine.begin() as conn:
            for table in metadata.sorted_tables:
                if table.name != "alembic_version" and tables.get(table.name):
                    conn.execute(insert(table), tables[table.name])
                if engine.dialect.name == "postgresql" and _serial(table):
                    conn.execute(select(func.setval(
                        func.pg_get_serial_sequence(table.name, "id"),
                        select(func.coalesce(func.max(table.c.id), 0) + 1).scalar_subquery(),
                        False,
                    )))
    finally:
        engine.dispose()
    return int(document["lines"])


def _tagged(value: dict[str, Any]) -> Any:
    if "__b64__" in value:
        return base64.b64decode(value["__b64__"])
    if "__datetime__" in value:
        return datetime.fromisoformat(value["__datetime__"])
    return value


def _serial(table: Any) -> bool:
    key = list(table.primary_key.columns)
    return len(key) == 1 and key[0].name == "id" and isinstance(key[0].type, Integer)


def test_an_order_that_cannot_be_recovered_stops_that_stream_alone(
    empty_database_url: str, named_example: Example, named_reference: Snapshot, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A checkpoint naming other features than its calibration (here: tampered) leaves that
    stream's order unrecovered: the upgrade says so in one line; the restarted worker stops
    that stream with one line, its events become dead letters saying why, and the other
    streams' results are the uninterrupted run's. ``monitor streams update`` then stores the
    order as the next version."""
    url = empty_database_url
    events = tmp_path / "day.jsonl"
    lines = load_fixture(url, events, tamper="taxis")
    values = named_example.values
    events.write_bytes(b"".join(v + b"\n" for v in values))
    with caplog.at_level("WARNING"):
        upgrade(url)
    assert [r.getMessage() for r in caplog.records if "'taxis'" in r.getMessage()] == [
        "stream 'taxis': the order of its features (alpha, kappa, mu, theta, zeta) in "
        "configuration version 1 cannot be recovered (its checkpoint names other ones (q, r, s, "
        "t, u)); workers will not run it until `monitor streams update CONFIG.yaml` stores the "
        "order"
    ]
    caplog.clear()
    with caplog.at_level("ERROR"):
        run_file(events, url, (), upto=len(values))
    stopped = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(stopped) == 1 and stopped[0].startswith("stream 'taxis': the order of its "), stopped
    got, want = without_joined(snapshot(url)), without_joined(named_reference)
    for stream in ("bikes", "loans"):
        assert [a for a in got.alarms if a["stream"] == stream] == \
            [a for a in want.alarms if a["stream"] == stream]
        assert got.checkpoints[stream] == want.checkpoints[stream]
    poison = {value for _, value in POISON}
    taxis = [v for v in values[lines:] if b'"stream":"taxis"' in v and v not in poison]
    letters = [reason for stream, reason, _ in got.dead_letters if reason == stopped[0]]
    assert len(letters) == len(taxis) > 0
    config = next(p for p in named_example.configs if p.stem == "taxis")
    update = register_stream_version(str(config), Settings(database_url=url), update=True)
    assert (update.outcome, update.version) == ("updated", 2)
    assert stored_orders(url)["taxis"] == FEATURE_NAMES["taxis"]
