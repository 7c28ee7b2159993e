"""FDR Monte Carlo on real bundled data (reduced here; full size in bench/bench_ood.py).

In-distribution: digits 0–4 with an MLP fitted on 300 of them; OOD: digits 5–9. And river's
Shuttle through the stream decider's own split path. Each repetition draws calibration and test
rows without replacement from held-out pools, so the FDR guarantees hold exactly and the check
FDR <= alpha + 3 SE can only fail for a real defect (about 0.1% of the time per rule by chance;
the seeds are fixed, so the test is deterministic).
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_ood.py"


@cache
def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_ood", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_ood"] = module
    spec.loader.exec_module(module)
    return module


@cache
def _digits() -> object:
    return _bench().digits_experiment(seed=0)


@pytest.mark.parametrize("m", [50, 200])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_digits_fdr_within_three_standard_errors(m: int, alpha: float) -> None:
    result = _bench().monte_carlo(_digits(), m, alpha, reps=200, seed=1)
    for rule in ("bh[energy]", "bh[knn]", "eg_bh", "eg_bh[twice_mean]", "lond[energy]"):
        stats = result[rule]
        assert stats["fdr"] <= alpha + 3 * stats["fdr_se"], (rule, stats)
    if (m, alpha) == (200, 0.1):  # the rules do find OOD digits: the check has teeth
        assert result["bh[energy]"]["tpr"] > 0.3


def test_decider_split_path_on_shuttle() -> None:
    bench = _bench()
    X, y = bench.shuttle_data()
    result = bench.splits_monte_carlo(X, y == 1, m=200, alpha=0.1, reps=100, seed=1)
    for rule, stats in result.items():
        assert stats["fdr"] <= 0.1 + 3 * stats["fdr_se"], (rule, stats)
    assert result["bh"]["tpr"] > 0.8 and result["eg_bh"]["tpr"] > 0.4


@pytest.mark.slow
def test_full_monte_carlo_table() -> None:
    rows = _bench().fdr_table(
        reps=500,
        sizes={
            "digits": [50, 100, 200],
            "shuttle": [50, 100, 200, 1000],
            "shuttle-splits": [50, 100, 200, 1000],
        },
    )
    bad = [r for r in rows if not r["fdr_ok"]]
    assert not bad, bad
    assert np.mean([r["tpr"] for r in rows if r["m"] == 1000]) > 0.5
