"""docs/benchmarks.md shows the numbers of bench/results/*.json, and its figures are drawn
from them; README.md and docs/algorithms.md quote them in their text: regenerate with
``python bench/harness.py --report`` after a run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import figures
import harness
import pytest
from bench_compare import BETTINGS, RIVER_GRID

from tests.support.sizing import Z_FALSE_FAILURE

DOCS = harness.load_results(harness.RESULTS)
TEXT = harness.DOC.read_text()
BLOCKS = harness.doc_blocks(TEXT)
FIX = "regenerate them with `python bench/harness.py --report`"


def rows(key: str) -> list[list[str]]:
    """The body rows of the doc's markdown table ``key`` (header, separator and note dropped)."""
    lines = [ln for ln in BLOCKS[key].splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[1:]]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%").split()[0])


def data(section: str) -> dict[str, Any]:
    assert section in DOCS, f"bench/results/{section}.json is missing: run `monitor bench`"
    return dict(DOCS[section]["data"])


#: (doc, the heading of its section whose every rate is a quoted figure of the results)
PROSE = ((harness.ROOT / "README.md", "## Performance and known limits"),
         (harness.ROOT / "docs" / "algorithms.md", "## 8. Throughput"))
#: A rate or latency as prose writes it: "2.63 M events/s", "13 000 records/s", "91 µs", "23 ms".
RATE = re.compile(r"\d[\d ,.]*(?: ?[Mk])?(?: events| records| requests)?(?:/s| µs| ms)\b")
#: The figures of the loaded run before the quiet one, quoted on purpose with their load.
EARLIER = ("1.09 M", "245 k", "64 k", "2.17 M")


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_every_doc_table_is_the_table_of_the_json_results() -> None:
    tables = harness.all_tables(DOCS)
    assert set(tables) <= set(BLOCKS), "a results table has no place in docs/benchmarks.md"
    for key, body in BLOCKS.items():
        expected = tables[key].markdown() if key in tables else "_No results yet._"
        assert body == expected, f"table {key} differs from bench/results: {FIX}"


@pytest.mark.parametrize("doc", harness.DOCS_WITH_RESULTS[1:], ids=lambda p: p.name)
def test_every_table_of_the_other_docs_is_the_table_of_the_json_results(doc: Path) -> None:
    tables = harness.all_tables(DOCS)
    for key, body in harness.doc_blocks(doc.read_text()).items():
        assert key in tables, f"{doc.name} shows table {key}, which no results make"
        assert body == tables[key].markdown(), f"table {key} of {doc.name} is stale: {FIX}"


def test_streaming_doc_shows_the_worker_tables_and_the_state_over_a_stream_s_life() -> None:
    blocks = harness.doc_blocks((harness.ROOT / "docs" / "streaming.md").read_text())
    assert {"throughput.calibration_costs", "throughput.checkpoint_sizes", "throughput.clients",
            "state"} <= set(blocks)


def test_state_and_checkpoint_cells_are_the_measurements() -> None:
    state = data("state")
    body = rows("state")
    assert [number(r[0]) for r in body] == [p["events"] for p in state["points"]]
    assert [number(r[2]) for r in body] == [p["encoded_bytes"] for p in state["points"]]
    sizes = data("throughput")["end_to_end"].get("checkpoint_sizes")
    if sizes is not None:
        assert [number(r[1]) for r in rows("throughput.checkpoint_sizes")] == [
            p["encoded_bytes"] for p in sizes["points"]]


def test_ville_table_cells_are_the_alarm_rates() -> None:
    stationary = data("statistical")["summary"]["stationary"]
    alphas = data("statistical")["config"]["alphas"]
    body = [r for r in rows("statistical.ville") if not r[0].startswith("bound")]
    assert len(body) == 2 * len(BETTINGS)  # every betting function, CTM and WCTM
    for det, *cells in body:
        for alpha, cell in zip(alphas, cells, strict=True):
            rate = stationary[det][f"ville@{alpha:g}"]["alarm_rate"]
            assert number(cell) == pytest.approx(rate, abs=5.01e-4)


def test_delay_table_cells_are_the_delay_quantiles() -> None:
    summary = data("statistical")["summary"]
    body = rows("statistical.delays")
    # four shifts × (every betting function, CTM and WCTM, and river's detectors)
    assert len(body) == 4 * (2 * len(BETTINGS) + len(RIVER_GRID))
    for scenario, det, setting, detected, _, p10, _, median, *_ in body:
        stats = summary[scenario][det][setting]
        assert number(detected) == pytest.approx(stats["detected"], abs=5.01e-3)
        for cell, key in ((p10, "delay_p10"), (median, "delay_p50")):
            if stats[key] is None:
                assert cell == "–"
            else:
                assert number(cell) == pytest.approx(stats[key], abs=0.501)


def test_ood_table_cells_are_the_monte_carlo_means() -> None:
    fdr = data("ood")["fdr"]
    for dataset, m, *cells in rows("ood.fdr"):
        cell = {r["rule"]: r for r in fdr
                if r["dataset"] == dataset and r["m"] == int(m) and r["alpha"] == 0.1}
        lond = next(k for k in cell if k.startswith("lond"))
        picked = [cell[lond.replace("lond", "bh")], cell["eg_bh"], cell[lond]]
        expected = [r[k] for r in picked for k in ("fdr", "tpr")]
        assert [number(c) for c in cells] == pytest.approx(expected, abs=5.01e-4)


def test_ood_doc_counts_the_fdr_rows_with_power() -> None:
    """docs/ood.md says how many FDR rows have power — a rejection in some repetition (TPR or
    FDR above 0) — instead of counting a row that rejected nothing as a pass."""
    fdr = data("ood")["fdr"]
    with_power = sum(r["fdr"] > 0 or r["tpr"] > 0 for r in fdr)
    text = " ".join((harness.ROOT / "docs" / "ood.md").read_text().split())
    claim = re.search(r"in all (\d+) rule × m × α rows — but only (\d+) of the (\d+) rows have "
                      r"power: in the other (\d+) the rule rejected nothing", text)
    assert claim, "docs/ood.md no longer states how many FDR rows have power"
    assert [int(g) for g in claim.groups()] == [len(fdr), with_power, len(fdr),
                                                len(fdr) - with_power]
    ood = data("ood")
    n0_over_n = ood["n_null"] / (ood["n_null"] + ood["n_ood"])
    above = [r for r in fdr if r["fdr"] > r["alpha"] * n0_over_n + Z_FALSE_FAILURE * r["fdr_se"]]
    assert not above, f"rows above the proved α·n₀/n + z SE, which docs/ood.md denies: {above}"


def test_throughput_and_memory_cells_are_the_measurements() -> None:
    core = data("throughput")["core"]["events_per_second"]
    table = {r[0]: r for r in rows("throughput")}
    for name, value in core.items():
        assert number(table[f"core: {name}"][1]) == value
    for name, run in data("memory")["runs"].items():
        row = next(r for r in rows("memory") if r[0] == name)
        assert number(row[4]) == pytest.approx(run["rss_mb"][-1] - run["rss_mb"][0], abs=0.05)


def test_figures_of_the_doc_exist_and_regenerate_from_the_results(tmp_path: Path) -> None:
    referenced = sorted(Path(p).name for p in harness.figure_paths(TEXT))
    assert referenced, "docs/benchmarks.md shows no figure"
    for name in referenced:
        assert (harness.FIGURES / name).is_file(), f"docs/figures/{name} is missing: {FIX}"
    drawn = sorted(p.name for p in figures.make_all(harness.RESULTS, tmp_path))
    assert drawn == referenced


@pytest.mark.parametrize(("doc", "heading"), PROSE, ids=lambda v: getattr(v, "name", ""))
def test_prose_figures_are_the_figures_of_the_json_results(doc: Path, heading: str) -> None:
    """Every figure between ``bench:KEY`` markers is the one the harness writes from the JSON
    results, and the section quotes no rate, latency or CPU time outside a marker."""
    text = doc.read_text()
    quoted, figures = harness.quoted_figures(DOCS), harness.doc_figures(text)
    unknown = sorted(set(figures) - set(quoted))
    assert not unknown, f"{doc.name} quotes figures the results do not hold: {unknown}"
    assert harness.fill_doc(text, {}, quoted) == text, f"{doc.name}'s figures are stale: {FIX}"
    body = harness.INLINE.sub("§", section(text, heading))
    for earlier in EARLIER:
        body = body.replace(earlier, "")
    assert not RATE.findall(body), f"figures typed by hand in {doc.name}, {heading!r}"


def test_prose_quotes_the_kernel_rates_and_the_load_of_the_json() -> None:
    """The README's and docs/algorithms.md's kernel rates, read back as numbers, are the JSON's
    (to the digits printed), and both state the load the JSON recorded."""
    doc = DOCS["throughput"]
    rates = doc["data"]["core"]["events_per_second"]
    readme = harness.doc_figures((harness.ROOT / "README.md").read_text())
    algorithms = harness.doc_figures((harness.ROOT / "docs" / "algorithms.md").read_text())
    scale = {"M": 1e6, "k": 1e3}
    for name in ("ctm_batch", "ctm_per_event", "wctm_per_event"):
        value, unit = readme[f"core.{name}.short"].split()
        assert float(value) * scale[unit] == pytest.approx(rates[name], abs=scale[unit] / 2)
        assert number(algorithms[f"core.{name}"].replace(" ", "")) == rates[name]
    low, high = sorted((doc["meta"]["load_before"], doc["meta"]["load_after"]))
    for figures_ in (readme, algorithms):
        assert figures_["throughput.load"] == f"{low:.2f}–{high:.2f}"


def test_the_readme_says_the_end_to_end_goal_is_not_met_while_it_is_not() -> None:
    goal = data("throughput")["end_to_end"]["goals"]["kafka_over_raw"]
    text = " ".join((harness.ROOT / "README.md").read_text().split())
    assert ("× the raw consumer is not met" in text) == (not goal["met"])
