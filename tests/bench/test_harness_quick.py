"""The reduced harness (``monitor bench --quick``) runs every benchmark end to end, so none of
them can rot; its results then feed the figures and the doc tables.

Budget (60 s): about 25 CPU-seconds, 35–40 s of wall time on 2 idle cores (statistical ~5 s,
OOD ~4 s, throughput ~18 s of which bench_ood's scorer throughput takes 8 s, memory ~8 s);
on a heavily loaded shared machine it takes longer.
"""

from __future__ import annotations

from pathlib import Path

import harness
import pytest

from monitor.ops.benchmarks import run_benchmarks
from monitor.settings import Settings


@pytest.mark.postgres
@pytest.mark.kafka
def test_quick_harness_runs_every_benchmark_and_feeds_the_report(tmp_path: Path) -> None:
    results = tmp_path / "results"
    status = run_benchmarks(Settings(), quick=True, out_dir=results)
    docs = harness.load_results(results)
    assert set(docs) == set(harness.QUICK_SECTIONS)
    errors = {name: doc["data"] for name, doc in docs.items() if harness.has_error(doc["data"])}
    assert status == 0 and not errors, errors

    stat = docs["statistical"]["data"]
    detectors = {f"{fam}/{b}" for fam in ("ctm", "wctm") for b in
                 ("simple_jumper", "composite_jumper", "power", "mixture", "agrapa",
                  "plug_in_power")}
    assert set(stat["summary"]) == {"stationary", "concept_abrupt", "concept_gradual",
                                    "benign_covariate", "extreme_covariate"}
    assert set(stat["summary"]["stationary"]) == detectors | {"adwin", "kswin", "page_hinkley"}
    assert {r["rule"] for r in docs["ood"]["data"]["fdr"]} >= {"eg_bh", "bh", "lond"}
    throughput = docs["throughput"]["data"]
    assert throughput["core"]["events_per_second"]["adwin_per_event"] > 0
    assert set(throughput["persistence"]) >= {"sqlite", "postgresql"}
    assert throughput["kafka"]["raw_per_s"] > 0
    assert all(r["alarms"] == 0 for r in docs["memory"]["data"]["runs"].values())
    assert all(doc["meta"]["machine"]["nproc"] >= 1 for doc in docs.values())

    # The doc tables from these results (the figures are drawn from the committed full results
    # in test_doc_tables.py, which keeps this test within its time budget).
    doc = tmp_path / "benchmarks.md"
    doc.write_text(harness.DOC.read_text())
    assert harness.regenerate(results, [doc], None) == 0
    blocks = harness.doc_blocks(doc.read_text())
    filled = {k for k, body in blocks.items() if body != "_No results yet._"}
    assert filled == set(harness.all_tables(docs)) == set(blocks) - {"api"}
