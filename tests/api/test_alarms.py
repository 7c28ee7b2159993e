"""GET /alarms (filters, keyset pages, count), GET /alarms/{id}, POST /alarms/{id}/ack."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from bench.api_rows import READ, T0, WRITE, alarm, store
from monitor.api import bodies
from monitor.db import queries
from monitor.db.models import AlarmRow
from monitor.streams.records import Alarm


@pytest.fixture
def alarms(session: Session) -> list[Alarm]:
    """90 alarms on two streams, all kinds and detectors, one per second from T0."""
    records = [alarm("bikes" if i % 2 else "taxis", i) for i in range(90)]
    store(session, alarms=records)
    return records


def _all_pages(client: TestClient, **params: Any) -> tuple[list[dict[str, Any]], int, int]:
    """Every alarm over all pages, the count reported, and the number of pages."""
    items: list[dict[str, Any]] = []
    pages, cursor, counts = 0, None, set()
    while True:
        query = params | ({"cursor": cursor} if cursor else {})
        body = client.get("/alarms", params=query, headers=READ).json()
        items += body["data"]
        counts.add(body["count"])
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(counts) == 1, "count must not depend on the page"
    return items, counts.pop(), pages


def _ids(records: list[Alarm]) -> list[str]:
    newest_first = sorted(records, key=lambda a: (a.ts, a.id), reverse=True)
    return [a.id for a in newest_first]


def test_alarm_record_matches_the_design(client: TestClient, alarms: list[Alarm]) -> None:
    body = client.get("/alarms", params={"limit": 1}, headers=READ).json()
    item = body["data"][0]
    newest = max(alarms, key=lambda a: a.ts)
    assert item == newest.to_json() | {
        "acknowledged_at": None, "acknowledged_by": None,
        "fleet": None, "fleet_rule": None, "fleet_level": None,
    }
    assert item["ts"].endswith("Z")


@pytest.mark.parametrize("limit", [1, 7, 90, 1000])
def test_pages_cover_every_alarm_once_in_order(
    client: TestClient, alarms: list[Alarm], limit: int
) -> None:
    items, count, pages = _all_pages(client, limit=limit)
    assert [a["id"] for a in items] == _ids(alarms)
    assert count == 90
    assert pages == -(-90 // limit)  # the last page is never an empty one


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"stream": "bikes"}, lambda a: a.stream == "bikes"),
        ({"kind": "concept_shift"}, lambda a: a.kind == "concept_shift"),
        ({"detector": "ood"}, lambda a: a.detector == "ood"),
        (
            {"since": (T0 + timedelta(seconds=30)).isoformat()},
            lambda a: a.ts >= T0 + timedelta(seconds=30),
        ),
        ({"until": "2026-11-30T12:00:45Z"}, lambda a: a.ts < T0 + timedelta(seconds=45)),
        (
            {"since": "2026-11-30T12:00:10", "until": "2026-11-30T12:00:20"},  # naive = UTC
            lambda a: T0 + timedelta(seconds=10) <= a.ts < T0 + timedelta(seconds=20),
        ),
        (
            {"stream": "taxis", "kind": "benign_covariate_shift", "since": "2026-11-30T12:00:05Z"},
            lambda a: (
                a.stream == "taxis"
                and a.kind == "benign_covariate_shift"
                and a.ts >= T0 + timedelta(seconds=5)
            ),
        ),
        ({"stream": "nope"}, lambda a: False),
    ],
    ids=["stream", "kind", "detector", "since", "until", "range-naive", "combined", "none"],
)
def test_filters_with_pagination(
    client: TestClient, alarms: list[Alarm], params: dict[str, Any], keep: Any
) -> None:
    items, count, _ = _all_pages(client, limit=4, **params)
    expected = _ids([a for a in alarms if keep(a)])
    assert [a["id"] for a in items] == expected
    assert count == len(expected)


def test_acknowledged_filter(client: TestClient, alarms: list[Alarm]) -> None:
    target = alarms[3].id
    client.post(f"/alarms/{target}/ack", headers=WRITE)
    acked, count, _ = _all_pages(client, acknowledged="true")
    assert [a["id"] for a in acked] == [target] and count == 1
    open_, count, _ = _all_pages(client, acknowledged="false", limit=50)
    assert target not in {a["id"] for a in open_} and count == 89


def test_alarms_stored_between_pages_do_not_shift_the_next_page(
    client: TestClient, session: Session, alarms: list[Alarm]
) -> None:
    first = client.get("/alarms", params={"limit": 10}, headers=READ).json()
    store(session, alarms=[alarm("bikes", 1000, ts=T0 + timedelta(hours=1))])
    second = client.get(
        "/alarms", params={"limit": 10, "cursor": first["next_cursor"]}, headers=READ
    ).json()
    assert [a["id"] for a in first["data"] + second["data"]] == _ids(alarms)[:20]


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"cursor": "garbage!"}, "cursor is not valid"),
        (
            {"cursor": queries.encode_cursor({"k": "traces", "o": "asc"})},
            "does not belong to a alarms query",
        ),
        ({"limit": 0}, "greater than or equal to 1"),
        ({"limit": 1001}, "less than or equal to 1000"),
        ({"kind": "fire"}, "concept_shift"),
        ({"detector": "x"}, "covariate"),
        ({"since": "yesterday"}, "expected an ISO 8601 date and time"),
        (
            {"since": "2026-11-30T13:00:00Z", "until": "2026-11-30T12:00:00Z"},
            "must be later than 'since'",
        ),
        ({"stream": "../etc"}, "pattern"),
        ({"acknowledged": "maybe"}, "boolean"),
    ],
    ids=[
        "cursor-garbage",
        "cursor-other-query",
        "limit-0",
        "limit-big",
        "kind",
        "detector",
        "since",
        "empty-range",
        "stream-pattern",
        "acknowledged",
    ],
)
def test_bad_query_is_422_with_a_clear_message(
    client: TestClient, params: dict[str, Any], fragment: str
) -> None:
    response = client.get("/alarms", params=params, headers=READ)
    assert response.status_code == 422
    assert fragment in response.text


def test_get_one_alarm(client: TestClient, alarms: list[Alarm]) -> None:
    response = client.get(f"/alarms/{alarms[5].id}", headers=READ)
    assert response.status_code == 200
    assert response.json()["id"] == alarms[5].id
    assert response.json()["evidence"] == alarms[5].evidence


def test_unknown_alarm_is_404(client: TestClient, alarms: list[Alarm]) -> None:
    for method, path in (("GET", "/alarms/nope"), ("POST", "/alarms/nope/ack")):
        response = client.request(method, path, headers=WRITE)
        assert response.status_code == 404
        assert response.json() == {"detail": "no alarm with id 'nope'"}


def test_ack_records_who_and_when_and_is_idempotent(
    client: TestClient, alarms: list[Alarm]
) -> None:
    target = alarms[0].id
    first = client.post(f"/alarms/{target}/ack", json={"by": "alice"}, headers=WRITE)
    assert first.status_code == 200
    assert first.json()["acknowledged_by"] == "alice"
    assert first.json()["acknowledged_at"] is not None
    again = client.post(f"/alarms/{target}/ack", json={"by": "bob"}, headers=WRITE)
    assert again.json()["acknowledged_by"] == "alice"
    assert again.json()["acknowledged_at"] == first.json()["acknowledged_at"]
    stored = client.get(f"/alarms/{target}", headers=READ).json()
    assert stored["acknowledged_by"] == "alice"


def test_ack_without_body_names_the_token(client: TestClient, alarms: list[Alarm]) -> None:
    body = client.post(f"/alarms/{alarms[1].id}/ack", headers=WRITE).json()
    assert body["acknowledged_by"].startswith("token:") and len(body["acknowledged_by"]) == 18


@pytest.mark.parametrize("body", [{"by": ""}, {"by": "x" * 256}, {"who": "alice"}, [1]])
def test_ack_with_bad_body_is_422(client: TestClient, alarms: list[Alarm], body: Any) -> None:
    response = client.post(f"/alarms/{alarms[2].id}/ack", json=body, headers=WRITE)
    assert response.status_code == 422
    assert client.get(f"/alarms/{alarms[2].id}", headers=READ).json()["acknowledged_at"] is None


def test_count_is_exact_up_to_the_limit_then_a_lower_bound(
    client: TestClient, alarms: list[Alarm], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.get("/alarms", headers=READ).json()["count_exact"] is True
    monkeypatch.setattr("monitor.db.queries._paging.COUNT_LIMIT", 40)
    body = client.get("/alarms", params={"limit": 5}, headers=READ).json()
    assert (body["count"], body["count_exact"]) == (40, False)
    body = client.get(
        "/alarms", params={"stream": "bikes", "kind": "concept_shift"}, headers=READ
    ).json()
    assert (body["count"], body["count_exact"]) == (15, True)


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"stream": "bikes"},
        {"stream": "taxis", "kind": "concept_shift"},
        {"detector": "ood", "acknowledged": False},
        {"since": T0 + timedelta(seconds=20), "until": T0 + timedelta(seconds=70)},
    ],
    ids=["none", "stream", "stream-kind", "detector-open", "range"],
)
def test_core_page_matches_the_repository_page(
    session: Session, alarms: list[Alarm], filters: dict[str, Any]
) -> None:
    """The API's Core-row page gives the repository's rows and cursors (interchangeable), page
    after page, from the statement built once per combination of filters."""
    full = cast(queries.AlarmFilters, dict.fromkeys(queries.AlarmFilters.__annotations__) | filters)
    cursor, pages = None, 0
    with session.connection() as connection:
        while True:
            ours = queries.alarm_page(connection, full, 7, cursor, bodies.ALARM_KEYS)
            theirs = queries.list_alarms(session, **filters, limit=7, cursor=cursor)
            assert [r["id"] for r in ours.items] == [r.id for r in theirs.items]
            assert ours.next_cursor == theirs.next_cursor
            assert queries.alarm_count(connection, full) == queries.bounded_count(
                session, queries.alarms_query(**filters)
            )
            pages, cursor = pages + 1, ours.next_cursor
            if cursor is None:
                break
    assert pages >= 2 or not alarms


@pytest.fixture
def varied_alarms(session: Session) -> list[Alarm]:
    """Alarms with every shape of value a JSON body can carry: whole and fractional seconds,
    missing changepoints, nested and non-ASCII evidence, tiny and huge numbers, NaN statistics,
    acknowledgements by non-ASCII names."""
    evidences: list[dict[str, Any]] = [
        {"covariate_statistic": 3.1, "penalised_fraction": 0.0, "weights_ess": 812.4},
        {"note": "état «extrême» ☃", "nested": {"a": [1, 2.5, None, True]}, "tiny": 1e-7},
        {"huge": 1.5e300, "int": 12345678901234, "neg": -0.25, "empty": {}},
    ]
    records = [
        replace(
            alarm("bikes" if i % 2 else "taxis", i),
            ts=T0 + timedelta(seconds=i, microseconds=(0 if i % 3 == 0 else 10 * i + 1)),
            changepoint=None if i % 4 == 0 else max(0, i - 5),
            statistic=[1e4 + i, 1e-9 * (i + 1), 123456789.125][i % 3],
            evidence=evidences[i % 3],
        )
        for i in range(40)
    ]
    store(session, alarms=records)
    for i, record in enumerate(records[:12]):
        at = T0 + timedelta(hours=1, microseconds=0 if i % 2 else 500_000)
        queries.acknowledge_alarm(session, record.id, by=["ops", "José ☃"][i % 2], at=at)
    session.execute(
        update(AlarmRow).where(AlarmRow.id == records[5].id).values(statistic=float("nan"))
    )
    session.execute(
        update(AlarmRow)
        .where(AlarmRow.id.in_([r.id for r in records[::3]]))
        .values(fleet="payments", fleet_rule="e_d_bh", fleet_level=1e-4)
    )
    session.commit()
    return records


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"stream": "bikes"},
        {"detector": "ood", "acknowledged": True},
        {"stream": "none"},
        {"fleet": "payments", "stream": "bikes"},
    ],
    ids=["none", "stream", "detector-acked", "no-match", "fleet"],
)
def test_body_written_by_postgresql_equals_pydantic_body(
    session: Session, varied_alarms: list[Alarm], filters: dict[str, Any]
) -> None:
    """PostgreSQL's JSON text of every page (rows, count, cursor) decodes to the same values as
    the pydantic-serialised body, page after page, and past the last page."""
    full = cast(queries.AlarmFilters, dict.fromkeys(queries.AlarmFilters.__annotations__) | filters)
    cursor, pages, seen = None, 0, 0
    with session.connection() as connection:
        while True:
            ours = json.loads(bodies.alarms_body_sql(connection, full, 6, cursor))
            theirs = json.loads(bodies.alarms_body_python(connection, full, 6, cursor))
            assert ours == theirs
            assert list(ours) == list(theirs)
            assert [list(row) for row in ours["data"]] == [list(row) for row in theirs["data"]]
            pages, seen, cursor = pages + 1, seen + len(ours["data"]), ours["next_cursor"]
            if cursor is None:
                break
    assert seen == ours["count"]
    assert pages == max(1, -(-seen // 6))


def test_body_written_by_postgresql_past_the_last_page_and_special_values(
    session: Session, varied_alarms: list[Alarm]
) -> None:
    full = dict.fromkeys(queries.AlarmFilters.__annotations__)
    filters = cast(queries.AlarmFilters, full)
    oldest = min(varied_alarms, key=lambda a: (a.ts, a.id))
    past = queries.alarm_cursor(oldest.ts, oldest.id, "desc")
    with session.connection() as connection:
        body = json.loads(bodies.alarms_body_sql(connection, filters, 10, past))
        assert body == {"data": [], "count": 40, "count_exact": True, "next_cursor": None}
        rows = json.loads(bodies.alarms_body_sql(connection, filters, 100, None))["data"]
    by_id = {row["id"]: row for row in rows}
    assert by_id[varied_alarms[5].id]["statistic"] is None  # NaN, as pydantic writes it
    assert by_id[varied_alarms[0].id]["ts"] == "2026-11-30T12:00:00Z"
    assert by_id[varied_alarms[1].id]["ts"] == "2026-11-30T12:00:01.000011Z"
    assert by_id[varied_alarms[1].id]["acknowledged_by"] == "José ☃"
    assert by_id[varied_alarms[0].id]["acknowledged_at"].endswith(":00.500000Z")


def test_a_revised_alarm_shows_its_versions_and_is_found_by_revised_since(
    client: TestClient, session: Session, alarms: list[Alarm]
) -> None:
    """A client polling with ``since`` does not see a revision (the alarm keeps its ``ts``); one
    polling with ``revised_since`` does, and the alarm's page shows every version."""
    raised = replace(alarm("bikes", 500), kind="insufficient_evidence", ts=T0,
                     evidence={"evidence_events": 1})
    revised = replace(raised, kind="concept_shift", revision=2,
                      revised_at=T0 + timedelta(hours=2), evidence={"evidence_events": 10})
    store(session, alarms=[raised])
    store(session, alarms=[revised])
    body = client.get(f"/alarms/{raised.id}", headers=READ).json()
    assert (body["kind"], body["revision"], body["revised_at"]) == (
        "concept_shift", 2, revised.to_json()["revised_at"]
    )
    assert [(v["revision"], v["kind"], v["evidence"]) for v in body["revisions"]] == [
        (1, "insufficient_evidence", {"evidence_events": 1}),
        (2, "concept_shift", {"evidence_events": 10}),
    ]
    assert body["revisions"][0]["revised_at"] is None
    later = (T0 + timedelta(hours=1)).isoformat()
    new = client.get("/alarms", params={"since": later}, headers=READ).json()
    assert raised.id not in {a["id"] for a in new["data"]}
    changed = client.get("/alarms", params={"revised_since": later}, headers=READ).json()
    assert [(a["id"], a["revision"]) for a in changed["data"]] == [(raised.id, 2)]
    after = (T0 + timedelta(hours=3)).isoformat()
    assert client.get("/alarms", params={"revised_since": after}, headers=READ).json()["data"] == []
    kind = client.get("/alarms", params={"kind": "insufficient_evidence"}, headers=READ)
    assert kind.status_code == 200 and kind.json()["data"] == []
    assert client.get("/alarms", params={"revised_since": "yesterday"}, headers=READ
                      ).status_code == 422


def test_fleet_filter_returns_the_fleet_alarms_with_rule_and_level(
    client: TestClient, session: Session, alarms: list[Alarm]
) -> None:
    fleet_ids = [a.id for a in alarms[::4]]
    session.execute(
        update(AlarmRow)
        .where(AlarmRow.id.in_(fleet_ids))
        .values(fleet="payments", fleet_rule="e_d_bonferroni", fleet_level=0.001)
    )
    session.commit()
    items, count, _ = _all_pages(client, fleet="payments", limit=7)
    assert count == len(fleet_ids)
    assert [i["id"] for i in items] == _ids([a for a in alarms if a.id in set(fleet_ids)])
    assert {(i["fleet_rule"], i["fleet_level"]) for i in items} == {("e_d_bonferroni", 0.001)}
    assert client.get("/alarms", params={"fleet": "bad name!"}, headers=READ).status_code == 422
