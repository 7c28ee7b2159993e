from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from tests.support.real_alarms import ReportDatabase, attribution, directions, shuttle_records


@pytest.fixture(scope="module")
def report_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportDatabase]:
    """A SQLite database holding the real alarms and traces of the Shuttle stream."""
    alarms, traces = shuttle_records()
    concept = next(a for a in alarms if a.kind == "concept_shift")
    assert concept.changepoint is not None
    explained = replace(concept, evidence={
        **concept.evidence,
        "attribution": attribution(concept.changepoint, concept.event_index + 1),
        "density_ratio_directions": directions(concept.changepoint, concept.event_index + 1),
    })
    stored = tuple(explained if a.id == concept.id else a for a in alarms)
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('report')) / 'monitor.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_factory(engine)() as session:
        persist_batch(session, Batch(alarms=stored, trace_points=traces))
    yield ReportDatabase(url, engine, stored, explained)
    engine.dispose()
