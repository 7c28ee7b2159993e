"""bench_reference_bank in its quick form: one row per calibration size and bank smaller than
it, each with its cost, detection delay and OOD power, JSON-ready."""

from __future__ import annotations

import json

import bench_reference_bank as brb


def test_quick_form() -> None:
    result = brb.run([300, 600], [None, 300], events=200, repeats=1, seeds=1)
    rows = [(r["m"], r["bank"]) for r in result["data"]]
    assert rows == [(300, None), (600, None), (600, 300)]  # a bank of all rows is "none"
    for row in result["data"]:
        assert row["cost_us"] > 0 and 0 <= row["tpr"] <= 1 and 0 <= row["fdp"] <= 1
        assert row["delay"] >= 0 and row["miss"] in (0, 1)
    json.dumps(result)
