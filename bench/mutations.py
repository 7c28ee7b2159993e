"""Mutation table: break a guarantee on purpose and check that the fast tests notice.

Run ``nice python bench/mutations.py`` (``--only NAME,...`` for a subset, ``--list`` to print the
mutations, ``--doc`` to rewrite the table in docs/algorithms.md from the JSON). Each mutation is a
named, exact text edit of the statistical core (alarm rules, betting, p-values, weights, decision
rules, fleet rules, attribution). For each one, one at a time, the script copies the git-tracked
files of this tree into a temporary directory (never touching the tree itself), applies the edit,
runs a small selection of fast tests there — those that should kill the mutation plus the
statistical checks of its area, with ``make test``'s marker selection — and records whether any
failed and which. A run of the union of the selections on the unmutated copy comes first: a
selection that fails without a mutation makes the table meaningless, so the script stops.

Results go to ``bench/results/mutations.json`` (mutation, files, killed, killing tests);
``tests/bench/test_mutations.py`` checks that every mutation is killed and that the table in
docs/algorithms.md ("Mutation table") is the table of that JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "mutations.json"
DOC = ROOT / "docs" / "algorithms.md"
DOC_BLOCK = re.compile(r"^<!-- mutations -->\n.*?^<!-- /mutations -->$", re.M | re.S)
LN10, LN2 = "2.302585092994046", "0.6931471805599453"


class MutationError(ValueError):
    """A mutation's edit no longer matches the code it was written for."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` by ``new`` in ``path`` (relative to the tree); ``old`` must occur exactly
    ``count`` times."""

    path: str
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Mutation:
    """A named way to break one guarantee, and the fast tests that should notice."""

    name: str
    summary: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.path for e in self.edits))


ALARMS = "monitor/core/martingales/alarms"
BATCH = "monitor/core/martingales/batch.py"
VALIDITY = "tests/statistical/test_validity.py"
QUALITY = "monitor/core/quality.py"
QUALITY_TESTS = ("tests/core/test_quality.py", "tests/statistical/test_quality.py")
CORE_ATTRIBUTION = "monitor/core/attribution.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "cusum-statistic-x10", "CUSUM statistic ×10 (alarms at an effective threshold c/10)",
        (Edit(f"{ALARMS}/cusum.py", "return log_s - self._min.minimum",
              f"return log_s - self._min.minimum + {LN10}"),
         Edit(f"{ALARMS}/cusum.py", "return log_s - self._min.push_many(self._n, log_s)",
              f"return log_s - self._min.push_many(self._n, log_s) + {LN10}"),
         Edit(BATCH, "stat = log_s - minimum", f"stat = log_s - minimum + {LN10}")),
        ("tests/martingales/test_alarms.py", f"{VALIDITY}::test_early_alarm_rate_fast"),
    ),
    Mutation(
        "ville-threshold-halved", "Ville alarms at S ≥ 1/(2α) instead of 1/α",
        (Edit(f"{ALARMS}/ville.py", "self._log_threshold = -math.log(self.segment_alpha)",
              "self._log_threshold = -math.log(2.0 * self.segment_alpha)", count=2),),
        ("tests/martingales/test_alarms.py", f"{VALIDITY}::test_ville_false_alarm_rate_fast"),
    ),
    Mutation(
        "sr-recursion-wrong",
        "Shiryaev–Roberts R_n = (2 + R_{n−1}) f_n instead of (1 + R_{n−1}) f_n",
        (Edit(f"{ALARMS}/shiryaev_roberts.py",
              "self._log_sum = logaddexp(self._log_sum, -self._min.prev)",
              f"self._log_sum = logaddexp(self._log_sum, -self._min.prev + {LN2})"),
         Edit(f"{ALARMS}/shiryaev_roberts.py", "np.concatenate([[self._log_sum], -prev])",
              f"np.concatenate([[self._log_sum], -prev + {LN2}])"),
         Edit(BATCH, "log_sum = _logaddexp(log_sum, -prev)",
              f"log_sum = _logaddexp(log_sum, -prev + {LN2})")),
        ("tests/martingales/test_alarms.py", f"{VALIDITY}::test_early_alarm_rate_fast"),
    ),
    Mutation(
        "betting-look-ahead", "plug-in power bet fitted with the current p-value (look-ahead)",
        (Edit("monitor/core/martingales/betting/plug_in_power.py",
              "    for k in range(n):\n        eps = _exponent(state[mean + k], floor)\n",
              "    for k in range(n):\n"
              "        state[mean + k] += state[forget + k] * (v - state[mean + k])\n"
              "        eps = _exponent(state[mean + k], floor)\n"),
         Edit("monitor/core/martingales/betting/plug_in_power.py",
              "        state[weight + k] = state[weight + k] * state[factor + k] / total\n"
              "        state[mean + k] += state[forget + k] * (v - state[mean + k])\n",
              "        state[weight + k] = state[weight + k] * state[factor + k] / total\n")),
        ("tests/martingales/test_betting.py",
         "tests/martingales/test_alarms.py::test_ville_false_alarm_rate_is_at_most_alpha"),
    ),
    Mutation(
        "p-value-smoothing-removed", "conformal p-values with U_t = 1 (no tie-breaking uniform)",
        (Edit("monitor/core/martingales/pvalues.py", "self._rng.random(_UNIFORM_BLOCK).tolist()",
              "(self._rng.random(_UNIFORM_BLOCK) * 0.0 + 1.0).tolist()"),
         Edit("monitor/core/martingales/pvalues.py",
              "u = np.random.default_rng(seed).random(s.size)",
              "u = np.random.default_rng(seed).random(s.size) * 0.0 + 1.0"),
         Edit(BATCH, "pv._uniforms = u = pv._rng.random(256).tolist()[::-1]",
              "pv._uniforms = u = (pv._rng.random(256) * 0.0 + 1.0).tolist()[::-1]")),
        ("tests/martingales/test_pvalues.py", f"{VALIDITY}::test_ville_false_alarm_rate_fast"),
    ),
    Mutation(
        "weighted-weights-uniform", "weighted p-value with every weight 1 (the unweighted CTM)",
        (Edit("monitor/core/martingales/_weighted_kernels.py", "    w = ratio_of_row(x, lin)\n",
              "    w = ratio_of_row(x, lin) * 0.0 + 1.0\n"),
         Edit("monitor/core/martingales/_weighted_kernels.py",
              "w = _clipped_exp(scratch[order[i]], lin)",
              "w = _clipped_exp(scratch[order[i]], lin) * 0.0 + 1.0")),
        ("tests/martingales/test_weighted.py", "tests/martingales/test_weighted_regression.py",
         f"{VALIDITY}::test_ville_false_alarm_rate_fast"),
    ),
    Mutation(
        "density-ratio-clipping-removed", "density ratio exp(logit) without its [1e-3, 1e3] clip",
        (Edit("monitor/core/martingales/_logistic.py", "    if logit >= lin[2]:\n",
              "    if False:\n"),
         Edit("monitor/core/martingales/_logistic.py", "    if logit <= lin[1]:\n",
              "    if False:\n")),
        ("tests/martingales/test_weighted.py",),
    ),
    Mutation(
        "bh-1.33-alpha", "BH rejects at 1.33 α",
        (Edit("monitor/core/decisions/bh.py", "adjusted <= alpha * (1.0 + _TIE_RTOL)",
              "adjusted <= 1.33 * alpha * (1.0 + _TIE_RTOL)"),),
        ("tests/decisions/test_fdr_monte_carlo.py", "tests/decisions/test_ood_power_tabular.py",
         "tests/decisions/test_bh.py"),
    ),
    Mutation(
        "bh-step-down", "BH step-down (stop at the first p_(k) above αk/n) instead of step-up",
        (Edit("monitor/core/decisions/bh.py",
              "np.minimum.accumulate(adjusted[::-1], out=adjusted[::-1])",
              "np.maximum.accumulate(adjusted, out=adjusted)"),),
        ("tests/decisions/test_bh.py", "tests/decisions/test_fdr_monte_carlo.py"),
    ),
    Mutation(
        "e-d-bh-3-alpha", "fleet e-d-BH at 3α",
        (Edit("monitor/core/fleet.py", "e_benjamini_hochberg(e, self.alpha)",
              "e_benjamini_hochberg(e, 3.0 * self.alpha)"),),
        ("tests/fleet/test_eop_monte_carlo.py",),
    ),
    Mutation(
        "holm-adjustment-wrong", "Holm's factor d − k instead of d − k + 1",
        (Edit(CORE_ATTRIBUTION,
              "scaled = np.minimum(1.0, (d - np.arange(d)) * arr[order])",
              "scaled = np.minimum(1.0, np.maximum(d - 1 - np.arange(d), 1) * arr[order])"),),
        ("tests/detectors/test_attribution.py",),
    ),
    Mutation(
        "quality-bonferroni-dropped", "data-quality alarm at D_j ≥ A instead of k·A",
        (Edit(QUALITY, "a * (k * N_BETS)", "a * N_BETS"),),
        QUALITY_TESTS,
    ),
    Mutation(
        "quality-p-value-anticonservative",
        "data-quality p-value o/(n + 1) instead of (o + 1)/(n + 1)",
        (Edit(QUALITY, "(o + 1.0) / (m + 1.0)", "o / (m + 1.0)"),),
        QUALITY_TESTS,
    ),
    Mutation(
        "quality-bet-payoff", "data-quality bet pays 1 + κ/c instead of 1 + κ(1/c − 1)",
        (Edit(QUALITY, "return c, 1.0 + kappa * (1.0 / c - 1.0), 1.0 - kappa",
              "return c, 1.0 + kappa / c, 1.0 - kappa"),),
        QUALITY_TESTS,
    ),
    Mutation(
        "quality-sr-recursion", "data-quality SR step f·R + 1 instead of f·(R + 1)",
        (Edit(QUALITY, "s = f * (stat[j, g] + 1.0)", "s = f * stat[j, g] + 1.0"),),
        QUALITY_TESTS,
    ),
    Mutation(
        "g-test-multinomial-null", "G-test's Monte Carlo null drawn with replacement "
        "(multinomial) instead of the permutation (hypergeometric)",
        (Edit(CORE_ATTRIBUTION,
              "window = rng.multivariate_hypergeometric(pooled, int(table[1].sum()), size=n)",
              "window = rng.multinomial(int(table[1].sum()), pooled / pooled.sum(), size=n)"),),
        ("tests/core/test_attribution_tests.py",),
    ),
    Mutation(
        "fisher-one-sided", "missing-rate Fisher test one-sided the wrong way (window lower)",
        (Edit(CORE_ATTRIBUTION, "p = float(stats.fisher_exact(table).pvalue)",
              "p = float(stats.fisher_exact(table, alternative=\"greater\").pvalue)"),),
        ("tests/core/test_attribution_tests.py",),
    ),
)


# ----------------------------------------------------------------------------- the tree copy
def tracked_files(root: Path) -> list[str]:
    """The git-tracked files of ``root`` (what a clone would hold), as relative paths."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def copy_tree(root: Path, dest: Path) -> None:
    """A fresh copy of the tracked files of ``root`` at ``dest`` (mtimes kept)."""
    if dest.exists():
        shutil.rmtree(dest)
    for rel in tracked_files(root):
        source = root / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


def apply_mutation(tree: Path, mutation: Mutation) -> None:
    """Apply every edit of ``mutation`` in ``tree``; raise if one no longer matches."""
    for edit in mutation.edits:
        path = tree / edit.path
        text = path.read_text()
        found = text.count(edit.old)
        if found != edit.count:
            raise MutationError(f"{mutation.name}: {edit.path} holds {found} copies of "
                                f"{edit.old!r}, expected {edit.count}; update bench/mutations.py")
        path.write_text(text.replace(edit.old, edit.new))


# ---------------------------------------------------------------------------------- running
FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def run_tests(tree: Path, tests: Sequence[str], numba_cache: Path) -> tuple[int, list[str]]:
    """pytest on ``tests`` in ``tree`` (``make test``'s markers): exit code, failing node ids."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(numba_cache), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tree, env=env, capture_output=True, text=True,
    )
    return proc.returncode, FAILED_LINE.findall(proc.stdout)


def run_mutation(mutation: Mutation, tree: Path, numba_cache: Path) -> dict[str, Any]:
    """Copy the tree, apply ``mutation``, run its selection; one row of the table."""
    copy_tree(ROOT, tree)
    apply_mutation(tree, mutation)
    started = time.perf_counter()
    code, failed = run_tests(tree, mutation.tests, numba_cache)
    if code not in (0, 1):  # 2: interrupted/collection error, 3: internal error, 4: usage
        failed = failed or [f"pytest exit code {code}"]
    return {
        "mutation": mutation.name,
        "summary": mutation.summary,
        "files": list(mutation.files),
        "selection": list(mutation.tests),
        "killed": bool(failed),
        "killing_tests": failed,
        "seconds": round(time.perf_counter() - started, 1),
    }


def check_baseline(tree: Path, mutations: Sequence[Mutation], numba_cache: Path) -> None:
    """Every selection passes on the unmutated copy, or the table would mean nothing."""
    copy_tree(ROOT, tree)
    selection = list(dict.fromkeys(t for m in mutations for t in m.tests))
    code, failed = run_tests(tree, selection, numba_cache)
    if code != 0:
        raise SystemExit(f"the unmutated selection fails (exit {code}): {failed}")


# ------------------------------------------------------------------------------------ table
def short_test(node: str) -> str:
    """``tests/a/test_b.py::test_c[x]`` → ``test_b.py::test_c[x]``."""
    return node.rsplit("/", 1)[-1]


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The doc's table: mutation, file(s), killed, the first killing tests."""
    lines = ["| mutation | file | killed | killing test (first of) |", "|---|---|---|---|"]
    for row in rows:
        tests = row["killing_tests"]
        shown = ", ".join(f"`{short_test(t)}`" for t in tests[:2])
        more = f" (+{len(tests) - 2})" if len(tests) > 2 else ""
        files = ", ".join(f"`{Path(f).name}`" for f in row["files"])
        lines.append(f"| {row['summary']} (`{row['mutation']}`) | {files} | "
                     f"{'yes' if row['killed'] else '**no**'} | {shown or '–'}{more} |")
    return "\n".join(lines)


def doc_block(rows: Sequence[dict[str, Any]]) -> str:
    return f"<!-- mutations -->\n{markdown_table(rows)}\n<!-- /mutations -->"


def write_doc(rows: Sequence[dict[str, Any]]) -> None:
    text = DOC.read_text()
    if not DOC_BLOCK.search(text):
        raise SystemExit(f"{DOC} has no <!-- mutations --> block")
    DOC.write_text(DOC_BLOCK.sub(lambda _: doc_block(rows), text))


# ------------------------------------------------------------------------------------- main
def _load_average() -> float:
    return round(os.getloadavg()[0], 2)


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated mutation names")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--doc", action="store_true",
                        help="rewrite the docs/algorithms.md table from the JSON and exit")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:32s} {', '.join(m.files)}")
        return 0
    if args.doc:
        write_doc(json.loads(RESULTS.read_text())["data"]["mutations"])
        return 0
    chosen = MUTATIONS
    if args.only:
        names = set(args.only.split(","))
        chosen = tuple(m for m in MUTATIONS if m.name in names)
        if unknown := names - {m.name for m in chosen}:
            raise SystemExit(f"unknown mutations: {sorted(unknown)}")
    meta: dict[str, Any] = {"command": "nice python bench/mutations.py",
                            "commit": _git("rev-parse", "HEAD"),
                            "uncommitted_changes": bool(_git("status", "--porcelain")),
                            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "load_before": _load_average()}
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="monitor-mutations-") as tmp:
        tree, numba_cache = Path(tmp) / "tree", Path(tmp) / "numba"
        check_baseline(tree, chosen, numba_cache)
        for mutation in chosen:
            row = run_mutation(mutation, tree, numba_cache)
            print(f"{row['mutation']:32s} killed={row['killed']!s:5s} {row['seconds']:6.1f}s "
                  f"{', '.join(map(short_test, row['killing_tests'][:2]))}", flush=True)
            rows.append(row)
    meta |= {"seconds": round(time.perf_counter() - started, 1), "load_after": _load_average()}
    if not args.only:
        RESULTS.write_text(json.dumps({"meta": meta, "data": {"mutations": rows}}, indent=2)
                           + "\n")
    return 0 if all(r["killed"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
