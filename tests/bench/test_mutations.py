"""The mutation table: every named mutation of the statistical core is killed by the fast tests,
and docs/algorithms.md ("Mutation table") shows the table of bench/results/mutations.json.

Regenerate with ``nice python bench/mutations.py`` and then ``python bench/mutations.py --doc``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mutations
import pytest

FIX = "re-run `nice python bench/mutations.py` and `python bench/mutations.py --doc`"


def recorded() -> list[dict[str, Any]]:
    assert mutations.RESULTS.is_file(), f"bench/results/mutations.json is missing: {FIX}"
    return list(json.loads(mutations.RESULTS.read_text())["data"]["mutations"])


def test_the_json_records_the_current_mutations() -> None:
    rows = recorded()
    assert [r["mutation"] for r in rows] == [m.name for m in mutations.MUTATIONS], FIX
    for row, mutation in zip(rows, mutations.MUTATIONS, strict=True):
        assert row["files"] == list(mutation.files), (mutation.name, FIX)
        assert row["selection"] == list(mutation.tests), (mutation.name, FIX)


def test_every_mutation_is_killed() -> None:
    survivors = [r["mutation"] for r in recorded() if not r["killed"]]
    assert not survivors, f"mutations no fast test notices: {survivors}"


def test_the_doc_table_is_the_table_of_the_json() -> None:
    found = mutations.DOC_BLOCK.search(mutations.DOC.read_text())
    assert found, "docs/algorithms.md has no <!-- mutations --> block"
    assert found.group(0) == mutations.doc_block(recorded()), f"the doc table is stale: {FIX}"


@pytest.mark.parametrize("mutation", mutations.MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_still_applies(mutation: mutations.Mutation, tmp_path: Path) -> None:
    """Every edit matches the code it was written for exactly (on a copy of those files)."""
    for rel in mutation.files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(mutations.ROOT / rel, tmp_path / rel)
    mutations.apply_mutation(tmp_path, mutation)
    changed = [rel for rel in mutation.files
               if (tmp_path / rel).read_text() != (mutations.ROOT / rel).read_text()]
    assert changed == list(mutation.files)


def test_an_edit_that_no_longer_matches_is_refused(tmp_path: Path) -> None:
    (tmp_path / "code.py").write_text("x = 1\n")
    stale = mutations.Mutation("stale", "", (mutations.Edit("code.py", "x = 2", "x = 3"),), ())
    with pytest.raises(mutations.MutationError, match="holds 0 copies"):
        mutations.apply_mutation(tmp_path, stale)
