"""The migrations README lists every revision in its apply order, with its file (issue 25: the
file numbers are not the apply order)."""

from __future__ import annotations

import re
from pathlib import Path

from alembic.script import ScriptDirectory

from monitor.db.migrate import alembic_config

README = Path(__file__).resolve().parents[2] / "monitor/db/migrations/README.md"


def test_the_readme_lists_the_revisions_in_apply_order() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    chain = list(reversed(list(scripts.walk_revisions("base", "heads"))))  # oldest first
    rows = re.findall(r"^\| (\d+) \| (\w+) \| `([^`]+)` \|", README.read_text(), re.M)
    assert [int(order) for order, _, _ in rows] == list(range(1, len(chain) + 1))
    assert [(rev, file) for _, rev, file in rows] == [
        (s.revision, Path(s.path).name) for s in chain
    ]
