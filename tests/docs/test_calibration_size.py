"""The calibration-size figures of docs/detectors.md ("How large a calibration set") and the
README are the ones the code computes: p-value resolution, the plug-in power's largest factor,
the fewest events to 100 000 and the OOD flags BH needs in a window of 256."""

from __future__ import annotations

import re
from pathlib import Path

from monitor.frontdoor import detection_floor, ood_floor

ROOT = Path(__file__).resolve().parents[2]


def _table() -> list[list[str]]:
    text = (ROOT / "docs" / "detectors.md").read_text(encoding="utf-8")
    section = text.split("## How large a calibration set", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| [\d ]+ \|", line)]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_table_is_computed() -> None:
    rows = _table()
    assert [int(r[0].replace(" ", "")) for r in rows] == [100, 200, 500, 1000, 2000]
    for size, resolution, factor, events, flags in rows:
        m = int(size.replace(" ", ""))
        assert resolution == f"{1 / (m + 1):.4f}"
        assert factor == f"{0.05 * (m + 1) ** 0.95:.1f}"
        assert int(events) == detection_floor(m)
        assert int(flags) == ood_floor(m)


def test_the_readme_quotes_the_same_floors() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### How large a calibration set", 1)[1].split("\n## ", 1)[0]
    a, b, c = detection_floor(100), detection_floor(500), detection_floor(2000)
    assert f"{a} events to 100 000 at m = 100, {b} at 500,\n{c} at 2 000" in section
    assert (f"({ood_floor(100)} at m = 100, {ood_floor(500)} at 500, {ood_floor(2000)} at "
            "2 000)") in section
