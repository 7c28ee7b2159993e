"""An alarm named by a prefix of its id (queries.resolve_alarm_id), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from monitor.db import queries
from monitor.db.errors import AlarmNotFoundError
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.alarm_ids import AmbiguousAlarmIdError
from tests.support.alarm_ids import CROWD, SHARED, alarms_with_shared_prefixes


@pytest.fixture
def session(db_session: Session) -> Session:
    persist_batch(db_session, Batch(alarms=alarms_with_shared_prefixes()))
    return db_session


@pytest.mark.parametrize(
    ("text", "alarm_id"),
    [
        (SHARED[0], SHARED[0]),  # the whole id
        (SHARED[0].upper(), SHARED[0]),
        ("292bf", SHARED[2]),
        ("292bf01e", SHARED[2]),
        ("292B3DCB-0000-5000-8000-000000000002", SHARED[1]),
        ("aaaa000b", CROWD[11]),
    ],
)
def test_a_prefix_names_the_one_alarm_whose_id_starts_with_it(
    session: Session, text: str, alarm_id: str
) -> None:
    assert queries.resolve_alarm_id(session, text) == alarm_id


def test_an_ambiguous_prefix_lists_its_candidates(session: Session) -> None:
    with pytest.raises(AmbiguousAlarmIdError) as caught:
        queries.resolve_alarm_id(session, "292b")
    assert caught.value.candidates == sorted(SHARED) and not caught.value.more
    assert "3 alarm ids" in str(caught.value) and SHARED[2] in str(caught.value)
    with pytest.raises(AmbiguousAlarmIdError) as caught:
        queries.resolve_alarm_id(session, "292b3dcb")
    assert caught.value.candidates == list(SHARED[:2])
    with pytest.raises(AmbiguousAlarmIdError) as caught:  # at most ten are listed
        queries.resolve_alarm_id(session, "aaaa")
    assert caught.value.candidates == list(CROWD[:10]) and caught.value.more
    assert "more than 10 alarm ids" in str(caught.value)


@pytest.mark.parametrize(
    "text",
    ["292", "29", "", "3dcb", "292c", "29_b", "292%", "bikes",
     "292b3dcb-0000-5000-8000-0000000000019", "292b3dcb0000"],
)
def test_a_short_unknown_or_wildcard_text_names_no_alarm(session: Session, text: str) -> None:
    with pytest.raises(AlarmNotFoundError, match="no alarm with id"):
        queries.resolve_alarm_id(session, text)


def test_acknowledging_by_prefix(session: Session) -> None:
    row = queries.acknowledge_alarm(session, "292bf", by="alice")
    assert (row.id, row.acknowledged_by) == (SHARED[2], "alice")
    with pytest.raises(AmbiguousAlarmIdError):
        queries.acknowledge_alarm(session, "292b3", by="bob")
    assert not session.in_transaction()
    assert queries.get_alarm(session, SHARED[0]).acknowledged_at is None  # type: ignore[union-attr]
