"""``monitor alarms list``: an unknown ``--kind`` is refused with the valid kinds, the tabular
kinds (``data_quality``, ``schema_change``) list their alarms, and the table is readable in an
80-column terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from bench.api_rows import alarm
from monitor.cli.alarms_commands import _alarm_table
from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import ALARM_KINDS
from tests.support.tabular_alarms import tabular_alarms


def test_unknown_kind_is_refused_with_the_valid_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alarms", "list", "--kind", "typo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "typo" in err
    for kind in ALARM_KINDS:
        assert kind in err


def test_every_valid_kind_is_accepted() -> None:
    from monitor.cli.main import _parser

    for kind in ALARM_KINDS:
        assert _parser().parse_args(["alarms", "list", "--kind", kind]).kind == kind


def test_the_data_quality_and_schema_kinds_list_their_alarms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'monitor.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_factory(engine)() as session:
        persist_batch(session, Batch(alarms=tabular_alarms()))
    engine.dispose()
    for kind, keys in (("schema_change", ["amount", "model_version"]), ("data_quality", [None])):
        assert main(["--db", url, "alarms", "list", "--kind", kind, "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [(a["kind"], a["evidence"].get("key")) for a in listed] == [(kind, k) for k in keys]


def _render(width: int) -> list[str]:
    rows = [
        alarm(stream, i, kind=kind).to_json()
        for i, (stream, kind) in enumerate(
            (stream, kind) for stream in ("bikes", "taxis-eu-west") for kind in ALARM_KINDS
        )
    ]
    console = Console(width=width, record=True, color_system=None)
    console.print(_alarm_table(rows, width))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100])
def test_table_fits_and_keeps_the_key_fields_whole(width: int) -> None:
    lines = _render(width)
    assert max(len(line) for line in lines) <= width
    text = "\n".join(lines)
    for kind in ALARM_KINDS:
        assert kind in text  # never wrapped inside the name
    for expected in ("2026-11-30 12:00:00", "2026-11-30 12:00:05", "bikes", "taxis-eu-west"):
        assert expected in text
    n = 2 * len(ALARM_KINDS)  # _render: one alarm of each kind in each of two streams
    for i in range(n):
        assert f"#{i}" in text
    # one line per alarm (plus the header and rules): nothing is wrapped
    assert sum("2026-11-30" in line for line in lines) == n


def test_wide_table_has_every_column() -> None:
    text = "\n".join(_render(160))
    for header in ("detector", "changepoint", "statistic", "threshold"):
        assert header in text


@pytest.mark.parametrize("width", [80, 100, 140])
def test_every_row_starts_with_the_short_id(width: int) -> None:
    """The first column is the id's first 8 characters, what ``monitor report --alarm`` takes."""
    lines = _render(width)
    assert lines[0].split()[0] == "id"
    rows = [line for line in lines if "2026-11-30" in line]
    ids = [alarm(stream, i, kind=kind).id for i, (stream, kind) in enumerate(
        (stream, kind) for stream in ("bikes", "taxis-eu-west") for kind in ALARM_KINDS)]
    assert [line.split()[0] for line in rows] == [i[:8] for i in ids]
    assert len(rows) == len(ids)  # one line each
    assert ("statistic" in lines[0]) == (width >= 90)
