"""The benchmark harness: every benchmark in one run, its results, figures and doc tables.

Results go to ``bench/results/*.json``, plots to ``docs/figures/``, tables into
``docs/benchmarks.md``, and the figures README.md and docs/algorithms.md quote in their text
(between inline ``<!-- bench:KEY -->…<!-- /bench:KEY -->`` markers; :func:`quoted_figures`).

    python bench/harness.py                    # everything, full size; then --report
    python bench/harness.py --quick            # CI sizes (seconds), into bench/results/quick/
    python bench/harness.py --sections statistical,memory   # some sections only
    python bench/harness.py --report           # figures + doc tables from the JSON results
    python bench/harness.py --write-doc        # doc tables only
    monitor bench [--quick] [--json]           # the same as the first two lines

Sections (one JSON file each, ``{"meta": ..., "data": ...}``):

``statistical``  :mod:`bench_compare`: CTM / WCTM (every betting function) beside river's ADWIN,
                 KSWIN and PageHinkley on real streams: false alarms, run length, delays.
``ood``          :mod:`bench_ood`: FDR and TPR of BH, eg-BH and LOND across calibration sizes.
``throughput``   :mod:`bench_core` (detector core beside ADWIN, WCTM), :mod:`bench_ood` (scorers,
                 decision rules), :mod:`bench_db` (SQLite, PostgreSQL), :mod:`bench_kafka` (raw
                 client rate) and ``bench_worker.py --json`` (end to end: the worker beside a raw
                 consumer and a river peer on one mock broker in a child process; per-stage µs
                 per record; checkpoint intervals) when it exists.
``api``          ``bench_api.py`` (HTTP latency under load), as a subprocess.
``memory``       resident memory over a long stream, bounded (``max_reference``) vs unbounded,
                 each in a fresh process.
``state``        ``bench_memory.py --pipeline``: one stream of the default configuration through
                 the pipeline (no database) over 10 M events, RSS and the encoded checkpoint
                 every 1 M, and whether both stay flat.

A benchmark that fails records ``{"error": ...}`` in its place, the others still run, and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
QUICK_RESULTS = RESULTS / "quick"
DOC = ROOT / "docs" / "benchmarks.md"
#: The docs whose tables and quoted figures (between ``bench:KEY`` markers) come from the results.
DOCS_WITH_RESULTS: tuple[Path, ...] = (DOC, ROOT / "README.md", ROOT / "docs" / "algorithms.md",
                                       ROOT / "docs" / "streaming.md")
FIGURES = ROOT / "docs" / "figures"
for _path in (str(ROOT), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

SECTIONS: tuple[str, ...] = ("statistical", "ood", "throughput", "api", "memory", "state")


@dataclass(frozen=True)
class Plan:
    """Sizes of every benchmark in one run."""

    quick: bool
    compare_seeds: int | None = None  # None: bench_compare's own default for the sizes
    workers: int = 2
    ood_reps: int = 500
    ood_sizes: dict[str, list[int]] = field(default_factory=lambda: {
        "digits": [50, 100, 200], "shuttle": [50, 100, 200, 1000],
        "shuttle-splits": [50, 100, 200, 1000]})
    core_events: int = 1_000_000
    db_rows: int = 100_000
    db_batch: int = 1_000
    kafka_events: int = 100_000
    #: None leaves bench_worker.py out (its --quick takes 30-60 s: too long for CI's budget).
    worker_args: tuple[str, ...] | None = ()
    api_args: tuple[str, ...] = ("--duration", "20", "--trace-duration", "5")
    memory_events: int = 500_000
    memory_max_reference: int = 500
    #: (monitor, bounded) pairs, each measured in its own process.
    memory_runs: tuple[tuple[str, bool], ...] = (
        ("ctm", False), ("ctm", True), ("covariate", False), ("covariate", True))
    kafka_repeat: int = 3
    #: bench_memory.py --pipeline: events, and a trace point every ``state_every`` of them.
    state_events: int = 10_000_000
    state_every: int = 1_000_000


FULL_PLAN = Plan(quick=False)
QUICK_PLAN = Plan(
    quick=True, workers=1, ood_reps=10,
    ood_sizes={"digits": [50], "shuttle": [100], "shuttle-splits": [100]},
    core_events=4_000, db_rows=2_000, db_batch=500, kafka_events=2_000,
    worker_args=None,
    api_args=("--alarms", "2000", "--trace-points", "20000", "--streams", "4", "--rate", "50",
              "--duration", "1", "--warmup", "0.5", "--trace-rate", "10",
              "--trace-duration", "1"),
    memory_events=4_000, memory_runs=(("ctm", False), ("covariate", True)), kafka_repeat=1,
    state_events=12_000, state_every=4_000,
)
#: The quick run leaves out the API latency benchmark (it loads a database and starts a server:
#: about 15 s); ``--sections api --quick`` runs it at a tiny size.
QUICK_SECTIONS: tuple[str, ...] = ("statistical", "ood", "throughput", "memory", "state")


# ----------------------------------------------------------------------------------- machine
def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, CPU, memory, interpreter and library versions."""
    import numba
    import numpy
    import river

    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu": cpu_model(),
        "memory_gb": round(mem_kb / 2**20, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "river": river.__version__,
    }


def load_average() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else float("nan")


# ----------------------------------------------------------------------------------- running
def guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, or ``{"error": ...}`` if it raises (the run goes on)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # a benchmark's failure is a result, not the end of the run
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_script(name: str, args: Sequence[str], timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``bench/<name> *args`` in a fresh interpreter; its JSON on stdout.

    The last line of stdout that parses as a JSON object is taken, or the whole stdout.
    """
    path = BENCH / name
    if not path.exists():  # another engineer's script that is not there yet: not a failure
        return {"skipped": f"bench/{name} does not exist"}
    proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)
    if proc.returncode not in (0, 1):
        tail = proc.stderr.strip().splitlines()[-5:]
        return {"error": f"bench/{name} exited with {proc.returncode}: {' | '.join(tail)}"}
    try:
        return dict(json.loads(proc.stdout))
    except json.JSONDecodeError:
        for line in reversed(proc.stdout.strip().splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        return {"error": f"bench/{name} printed no JSON: {proc.stdout[-200:]!r}"}


def has_error(value: Any) -> bool:
    """Whether any benchmark inside ``value`` recorded an error."""
    if isinstance(value, dict):
        return "error" in value or any(has_error(v) for v in value.values())
    if isinstance(value, list):
        return any(has_error(v) for v in value)
    return False


# ---------------------------------------------------------------------------------- sections
def section_statistical(plan: Plan) -> dict[str, Any]:
    import bench_compare

    sizes = bench_compare.QUICK if plan.quick else bench_compare.FULL
    return dict(bench_compare.run(sizes, workers=plan.workers, seeds=plan.compare_seeds))


def section_ood(plan: Plan) -> dict[str, Any]:
    import bench_ood

    rows = guarded(bench_ood.fdr_table, plan.ood_reps, plan.ood_sizes)
    return {"reps": plan.ood_reps, "n_null": 192, "n_ood": 64, "fdr": rows}


def section_throughput(plan: Plan) -> dict[str, Any]:
    import bench_core
    import bench_db
    import bench_kafka
    import bench_ood

    out: dict[str, Any] = {"core": guarded(bench_core.measure, plan.core_events)}
    out["scorers"] = guarded(bench_ood.scorer_throughput)
    out["ood_rules"] = guarded(bench_ood.rule_throughput)
    out["persistence"] = {
        "rows": plan.db_rows, "batch": plan.db_batch,
        **{db: guarded(bench_db.bench, db, plan.db_rows, plan.db_batch, 0)
           for db in ("sqlite", "postgresql")},
    }
    out["kafka"] = guarded(bench_kafka.run, plan.kafka_events, "confluent", plan.kafka_repeat)
    if plan.worker_args is None:
        out["end_to_end"] = {"skipped": "bench_worker.py is left out of the quick run "
                                        "(its --quick takes 30-60 s)"}
    else:
        out["end_to_end"] = run_script("bench_worker.py", ["--json", *plan.worker_args])
    return out


def section_api(plan: Plan) -> dict[str, Any]:
    return run_script("bench_api.py", plan.api_args)


def section_memory(plan: Plan) -> dict[str, Any]:
    """Fresh processes (two at a time): CTM and covariate monitor, unbounded / bounded."""
    jobs = {}
    for monitor, bounded in plan.memory_runs:
        name = f"{monitor}/{'bounded' if bounded else 'unbounded'}"
        args = ["--memory-child", monitor, "--events", str(plan.memory_events)]
        if bounded:
            args += ["--max-reference", str(plan.memory_max_reference)]
        jobs[name] = args
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(run_script, "harness.py", args)
                   for name, args in jobs.items()}
        runs = {name: future.result() for name, future in futures.items()}
    return {"events": plan.memory_events, "max_reference": plan.memory_max_reference,
            "runs": runs}


def section_state(plan: Plan) -> dict[str, Any]:
    """One stream's RSS and checkpoint over its life (a fresh process)."""
    return run_script("bench_memory.py", ["--pipeline", "--json", "--events",
                                          str(plan.state_events), "--every",
                                          str(plan.state_every)], timeout=3600.0)


SECTION_FUNCTIONS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "statistical": section_statistical,
    "ood": section_ood,
    "throughput": section_throughput,
    "api": section_api,
    "memory": section_memory,
    "state": section_state,
}


def run_section(name: str, plan: Plan, out_dir: Path) -> dict[str, Any]:
    """Run one section, write ``out_dir/<name>.json`` and return what was written."""
    load_before, started = load_average(), time.perf_counter()
    at = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    data = guarded(SECTION_FUNCTIONS[name], plan)
    meta = {
        "section": name,
        "quick": plan.quick,
        "started": at,
        "seconds": round(time.perf_counter() - started, 1),
        "load_before": load_before,
        "load_after": load_average(),
        "machine": machine_info(),
        "command": "python bench/harness.py" + (" --quick" if plan.quick else "")
        + f" --sections {name}",
    }
    doc = {"meta": meta, "data": data}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return doc


def run(sections: Sequence[str], plan: Plan, out_dir: Path, as_json: bool = False) -> int:
    """Run ``sections`` in order; print each one's tables (or all as JSON at the end)."""
    docs = {}
    for name in sections:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        docs[name] = run_section(name, plan, out_dir)
        if not as_json:
            for table in section_tables(name, docs[name]["data"]):
                print(table.text() + "\n", flush=True)
    if as_json:
        print(json.dumps(docs, allow_nan=False))
    return 1 if has_error(docs) else 0


# --------------------------------------------------------------------------------- memory
def rss_mb() -> float:
    """Resident set size of this process, MB (VmRSS; peak RSS where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def memory_child(monitor: str, events: int, max_reference: int | None,
                 samples: int = 50) -> dict[str, Any]:
    """RSS while a monitor consumes ``events`` stationary events (rows of the Shuttle pool
    drawn with replacement, so the stream is exchangeable with the calibration draw).

    Ville at alpha = 1e-6: no alarm (checked), so no re-baselining ever frees the reference
    and the unbounded reference grows by one score per event. The first chunk of events is a
    warm-up (first-call allocations of numpy, the scorer, numba); RSS is traced from there.
    """
    import numpy as np

    from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
    from monitor.ops.datasets import load_shuttle_regression

    task = load_shuttle_regression()
    rng = np.random.default_rng(0)
    residual = np.abs(task.y - task.pred)
    cal = rng.integers(0, residual.size, 1000)
    params: dict[str, Any] = {"rule": "ville", "alpha": 1e-6, "max_reference": max_reference,
                              "seed": 0}
    mon: ConditionalMonitor | CovariateMonitor
    if monitor == "ctm":
        mon = ConditionalMonitor(residual[cal], None, weighted=False, **params)
    else:
        mon = CovariateMonitor("knn", task.X[cal], **params)
    step = max(1, events // samples)

    def consume() -> None:
        rows = rng.integers(0, residual.size, step)
        if isinstance(mon, ConditionalMonitor):
            for s in residual[rows].tolist():
                mon.update(None, s)
        else:
            mon.update_many(task.X[rows])

    consume()
    trace_events, trace_rss = [step], [round(rss_mb(), 2)]
    started = time.perf_counter()
    while trace_events[-1] + step <= events + step // 2:
        consume()
        trace_events.append(trace_events[-1] + step)
        trace_rss.append(round(rss_mb(), 2))
    return {"monitor": monitor, "max_reference": max_reference, "events": trace_events[-1],
            "rss_mb": trace_rss, "at_events": trace_events, "alarms": mon.n_alarms,
            "events_per_s": round((trace_events[-1] - step) / (time.perf_counter() - started))}


# ------------------------------------------------------------------------------------ tables
@dataclass(frozen=True)
class Table:
    """A results table: the doc renders it as markdown between ``<!-- bench:KEY -->`` markers,
    the run prints it as text; both come from the JSON results only."""

    key: str
    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    note: str = ""

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.headers) + " |",
                 "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.headers)))
                 + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines + ([f"\n{self.note}"] if self.note else []))

    def text(self) -> str:
        cells = [self.headers, *self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.headers))]
        lines = [self.title]
        for row in cells:
            padded = (c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(row, widths, strict=True)))
            lines.append("  " + "  ".join(padded))
        return "\n".join(lines + ([f"  ({self.note})"] if self.note else []))


def num(value: Any, digits: int = 0, percent: bool = False) -> str:
    """A number for a table: thousands separators, fixed digits, "–" when missing."""
    if value is None or isinstance(value, str):
        return "–" if value is None else value
    x = float(value) * (100.0 if percent else 1.0)
    if x != x:
        return "–"
    return f"{x:,.{digits}f}" + ("%" if percent else "")


def _martingales(summary: dict[str, Any]) -> list[str]:
    dets = list(next(iter(summary.values())))
    return [d for fam in ("wctm", "ctm") for d in dets if d.startswith(fam + "/")]


def _river(summary: dict[str, Any]) -> list[str]:
    return [d for d in next(iter(summary.values())) if "/" not in d]


def ville_table(data: dict[str, Any]) -> Table:
    summary, cfg = data["summary"], data["config"]
    alphas, n = cfg["alphas"], cfg["sizes"]["seeds"]
    stationary = summary["stationary"]
    rows = [(det, *(num(stationary[det][f"ville@{a:g}"]["alarm_rate"], 3) for a in alphas))
            for det in _martingales(summary)]
    bounds = {(r["alpha"]): r["bound"] for r in data["ville_validity"]}
    rows.append(("bound α + 3 SE", *(num(bounds.get(a), 3) for a in alphas)))
    return Table("statistical.ville", "False alarms in Ville mode (share of stationary streams "
                 "with any alarm)", ("detector", *(f"α = {a:g}" for a in alphas)), rows,
                 f"{n} stationary streams of {cfg['sizes']['n_stationary']:,} events per cell.")


RUN_LENGTH_SETTINGS: tuple[str, ...] = (
    "cusum@20", "cusum@100", "cusum@500", "shiryaev_roberts@20", "shiryaev_roberts@100",
    "shiryaev_roberts@500",
)


def _run_length(stats: dict[str, Any]) -> str:
    return f"{num(stats['run_length_mean'])} ({num(stats['censored'] / stats['n'], 0, True)})"


def run_length_table(data: dict[str, Any]) -> Table:
    summary, horizon = data["summary"], data["config"]["sizes"]["n_stationary"]
    stationary = summary["stationary"]
    headers = tuple(s.replace("shiryaev_roberts", "SR").replace("cusum", "CUSUM").replace("@", " ")
                    for s in RUN_LENGTH_SETTINGS)
    rows = [(det, *(_run_length(stationary[det][s]) for s in RUN_LENGTH_SETTINGS))
            for det in _martingales(summary)]
    return Table("statistical.run_length", "Run length to the first alarm on stationary streams "
                 "(mean, censored share)", ("detector", *headers), rows,
                 f"Streams without an alarm count as {horizon:,} (censored): the means are lower "
                 "bounds; CUSUM and SR guarantee a mean run length of at least the threshold.")


def river_stationary_table(data: dict[str, Any]) -> Table:
    stationary = data["summary"]["stationary"]
    rows = [(det, setting.replace("@", " = "), num(stats["alarm_rate"], 3), _run_length(stats))
            for det in _river(data["summary"]) for setting, stats in stationary[det].items()]
    return Table("statistical.river_stationary", "river detectors on the same stationary "
                 "streams", ("detector", "setting", "alarm rate", "run length (censored)"), rows)


def delays_table(data: dict[str, Any]) -> Table:
    import bench_compare

    rows = []
    for row in bench_compare.default_rows(data):
        if row["scenario"] == "stationary":
            continue
        rows.append((row["scenario"], row["detector"], row["setting"], num(row["detected"], 2),
                     num(row["false_alarm_before"], 2),
                     *(num(row[f"delay_p{q}"]) for q in (10, 25, 50, 75, 90)),
                     num(row["delay_mean_censored"])))
    n_after = data["config"]["sizes"]["n_after"]
    return Table("statistical.delays", "Detection delay at the benchmark settings (events after "
                 "the change)", ("scenario", "detector", "setting", "detected",
                                 "false alarm before", "p10", "p25", "median", "p75", "p90",
                                 "mean*"), rows,
                 f"Delay quantiles over the detected streams; mean* counts a miss as {n_after:,} "
                 "(the horizon). In benign_covariate nothing harmful happens: a conditional "
                 "alarm there is a false alarm.")


def matched_table(data: dict[str, Any]) -> Table:
    import bench_compare

    matched = data["matched"]
    scen = bench_compare.SHIFT_SCENARIOS
    rows = []
    for det, pick in matched.items():
        if pick is None:
            rows.append((det, "none ≤ level", *("–" for _ in scen)))
            continue
        cells = []
        for sc in scen:
            stats = data["summary"][sc][det][pick["setting"]]
            value = stats["detected"] if sc == "benign_covariate" else stats["delay_mean_censored"]
            cells.append(num(value, 2 if sc == "benign_covariate" else 0))
        rows.append((det, f"{pick['setting']} ({num(pick['alarm_rate'], 3)})", *cells))
    level = bench_compare.MATCHED_LEVEL
    return Table("statistical.matched", f"At a matched false-alarm rate (≤ {level:g} on the "
                 "stationary streams): mean* delay, and the alarm rate under the benign shift",
                 ("detector", "setting (false-alarm rate)",
                  *(f"{s} {'alarms' if s == 'benign_covariate' else 'delay'}" for s in scen)),
                 rows, "Per detector, the setting with false-alarm rate at most the level that "
                 "minimises the mean* delay over the harmful shifts (concept abrupt / gradual, "
                 "extreme covariate).")


def adaptation_table(data: dict[str, Any]) -> Table:
    rows = [(sc, num(a["covariate_alarm"], 2), num(a["median_start_after_change"]),
             num(a["restarted"], 2)) for sc, a in data["adaptation"].items()]
    return Table("statistical.adaptation", "Covariate monitor (knn, SR 10 000) beside the WCTM",
                 ("scenario", "covariate alarm", "median alarm − change", "WCTM restarted"),
                 rows, "start_adaptation is called at the covariate alarm; it restarts the "
                 "WCTM's martingale only when the monitor waits for that signal.")


def ood_table(data: dict[str, Any], alpha: float = 0.1) -> Table:
    rows = []
    fdr = data["fdr"] if isinstance(data["fdr"], list) else []
    for dataset in dict.fromkeys(r["dataset"] for r in fdr):
        for m in dict.fromkeys(r["m"] for r in fdr if r["dataset"] == dataset):
            cell = {r["rule"]: r for r in fdr
                    if r["dataset"] == dataset and r["m"] == m and r["alpha"] == alpha}
            lond = next(k for k in cell if k.startswith("lond"))
            bh = lond.replace("lond", "bh")
            picked = [cell[bh], cell["eg_bh"], cell[lond]]
            rows.append((dataset, str(m), *(num(r[k], 3) for r in picked for k in ("fdr", "tpr"))))
    return Table("ood.fdr", f"OOD decisions at α = {alpha:g}: FDR and TPR by calibration size m",
                 ("dataset", "m", "BH FDR", "BH TPR", "eg-BH FDR", "eg-BH TPR", "LOND FDR",
                  "LOND TPR"), rows,
                 f"{data['reps']} repetitions of a window of {data['n_null']} in-distribution + "
                 f"{data['n_ood']} OOD points per cell; BH and LOND use the same scorer as "
                 "named in bench/results/ood.json.")


def _rate_rows(prefix: str, rates: Any, unit: str) -> list[tuple[str, str, str, str]]:
    if not isinstance(rates, dict) or "error" in rates:
        message = rates.get("error") if isinstance(rates, dict) else rates
        return [(prefix, "error", "", str(message))]
    return [(f"{prefix}: {k}", num(v), unit, "") for k, v in rates.items()]


def throughput_table(data: dict[str, Any]) -> Table:
    rows: list[tuple[str, str, str, str]] = []
    core = data["core"]
    if "error" in core:
        rows.append(("core", "error", "", core["error"]))
    else:
        adwin = core["events_per_second"]["adwin_per_event"]
        rows += [(f"core: {k}", num(v), "events/s", f"{v / adwin:.3g} × ADWIN")
                 for k, v in core["events_per_second"].items()]
    rows += _rate_rows("scorer", data["scorers"], "events/s")
    rows += _rate_rows("OOD rule", data["ood_rules"], "events/s")
    for db in ("sqlite", "postgresql"):
        cases = data["persistence"][db]
        rows += _rate_rows(f"persist_batch {db}", {k: v["rows_per_s"] for k, v in cases.items()}
                           if "error" not in cases else cases, "rows/s")
    kafka = data["kafka"]
    rows += _rate_rows("kafka", {k: v for k, v in kafka.items() if k.endswith("_per_s")}
                       if "error" not in kafka else kafka, "records/s")
    e2e = data["end_to_end"]
    if "error" in e2e or "skipped" in e2e:
        status = "error" if "error" in e2e else "skipped"
        rows.append(("end to end (bench_worker.py)", status, "", e2e[status]))
    else:
        rows += [(f"end to end: {k}", num(v), "events/s", "")
                 for k, v in e2e.items() if k.endswith("_per_s")]
        rows += [(f"end to end: {k}", num(v, 3), "ratio", "")
                 for k, v in e2e.items() if "_over_" in k]
    return Table("throughput", "Throughput (one process; other processes were running)",
                 ("what", "rate", "unit", "note"), rows)


def worker_rss_table(data: dict[str, Any]) -> Table:
    rss = data["end_to_end"].get("rss", {})
    rows = [(name, num(r["events"]), num(r["rss_mb"][0], 1), num(r["rss_mb"][-1], 1),
             num(r["rss_mb"][-1] - r["rss_mb"][0], 1), num(r["events_per_s"]))
            for name, r in rss.items() if "error" not in r]
    return Table("throughput.worker_rss", "Worker memory over a long replay (bench_worker.py: "
                 "file → PostgreSQL, one stream)", ("configuration", "events", "RSS first MB",
                                                     "RSS end MB", "growth MB", "events/s"),
                 rows or [("–", "no results", "", "", "", "")],
                 "default: weighted CTM (every reference point kept); bounded: weighted: false "
                 "with max_reference.")


def _end_to_end_part(data: dict[str, Any], key: str) -> Any:
    """``data["end_to_end"][key]``, or None (the bench left out, failed or older)."""
    e2e = data.get("end_to_end", {})
    return None if "error" in e2e or "skipped" in e2e else e2e.get(key)


def calibration_costs_table(data: dict[str, Any]) -> Table:
    costs = _end_to_end_part(data, "calibration_costs")
    title = "Cost per record by calibration size m and feature count d (bench_worker.py)"
    if costs is None:
        return Table("throughput.calibration_costs", title, ("m", "status"),
                     [("–", "no results")])
    ds = sorted({c["d"] for c in costs["cells"]})
    cells = {(c["m"], c["d"]): c for c in costs["cells"]}
    rows = [(num(m), *(f"{num(cells[m, d]['cpu_us_per_record'], 1)} ({num(cells[m, d]['per_s'])})"
                       for d in ds))
            for m in sorted({c["m"] for c in costs["cells"]})]
    ratio = costs["ratio"]
    return Table("throughput.calibration_costs", title,
                 ("m", *(f"d = {d}: CPU µs (events/s)" for d in ds)), rows,
                 f"{costs['what']}; {costs['data']}; {num(costs['events'])} events per cell in "
                 f"batches of {num(costs['batch'])}, median of {costs['rounds']}. CPU per record, "
                 f"{ratio['of']}: {num(ratio['cpu'], 2)} (goal ≤ {ratio['goal']:g}: "
                 f"{'met' if ratio['met'] else 'not met'}); wall clock {num(ratio['wall'], 2)}.")


def checkpoint_sizes_table(data: dict[str, Any]) -> Table:
    sizes = _end_to_end_part(data, "checkpoint_sizes")
    title = "A stream's checkpoint over its life (bytes; bench_worker.py)"
    headers = ("events", "encoded state", "chunked: row", "chunked: pieces",
               "next batch's write sends")
    if sizes is None:
        return Table("throughput.checkpoint_sizes", title, headers,
                     [("–", "no results", "", "", "")])
    rows = [(num(p["events"]), num(p["encoded_bytes"]), num(p["row_bytes"]),
             f"{num(p['pieces_bytes'])} ({p['pieces']})", num(p["sent_next_bytes"]))
            for p in sizes["points"]]
    stream = sizes["stream"]
    return Table("throughput.checkpoint_sizes", title, headers, rows,
                 f"Default configuration, {stream['features']} features, "
                 f"{num(stream['calibration'])} calibration rows, labels as events "
                 f"{stream['label_delay']} predictions late and every {stream['unlabeled_every']}"
                 "th never; encode_state whole (text + blob), and as the checkpoint store "
                 "writes it (the row naming its pieces, the pieces), and what the checkpoint "
                 "of the next batch sends over it (the row and its new pieces).")


def clients_table(data: dict[str, Any]) -> Table:
    table = _end_to_end_part(data, "acceptance")
    title = "Kafka acceptance at `monitor run`'s defaults: worker / raw consumer of its topic"
    headers = ("client", "case", "goal ≥", "wall", "CPU", "river peer wall", "river peer CPU",
               "met")
    if table is None:
        return Table("throughput.clients", title, headers,
                     [("–", "no results", "", "", "", "", "", "")])
    rows = [(client, name, f"{c['goal']:g}", num(c["wall"], 3), num(c["cpu"], 3),
             num(c["peer_wall"], 3), num(c["peer_cpu"], 3),
             {None: "–", True: "met", False: "not met"}[c["met"]])
            for client, cases in table.items() for name, c in cases.items()]
    return Table("throughput.clients", title, headers, rows,
                 "kafka-python is KafkaSource, confluent is RdKafkaSource (librdkafka); met: "
                 "both the wall-clock and the CPU ratio at least the goal. The river ADWIN + "
                 "PageHinkley peer reads the same topic.")


def state_table(data: dict[str, Any]) -> Table:
    headers = ("events", "RSS MB", "encoded checkpoint bytes", "next batch's write sends",
               "alarms")
    if "error" in data or "skipped" in data:
        status = "error" if "error" in data else "skipped"
        return Table("state", "A stream's state over its life", headers,
                     [(status, data[status], "", "", "")])
    rows = [(num(p["events"]), num(p["rss_mb"], 1), num(p["encoded_bytes"]),
             num(p["sent_next_bytes"]), num(p["alarms"])) for p in data["points"]]
    flat, stream = data["flat"], data["stream"]
    growing = ", ".join(f"{k} {v:g} bytes/event" for k, v in flat["growing_keys"].items())
    return Table("state", f"One stream's state over {num(data['events'])} events "
                 "(bench_memory.py --pipeline)", headers, rows,
                 f"Default configuration, {stream['features']} features, "
                 f"{num(stream['calibration'])} calibration rows, labels as events "
                 f"{stream['label_delay']} predictions late and every {stream['unlabeled_every']}"
                 f"th never, one prediction every {stream['ts_step_s']} s; Pipeline.process in "
                 f"batches of {num(data['batch'])} records, no source, no database "
                 f"({data['pipeline_cpu_us_per_event']} µs of CPU per event). Flat — the median of "
                 f"the last {flat['tail']} points at most {flat['bound']:.0%} above the median "
                 f"before them, RSS and checkpoint: {'yes' if flat['flat'] else 'no'} (RSS "
                 f"{flat['rss_mb']['growth']:+.1%}, checkpoint "
                 f"{flat['encoded_bytes']['growth']:+.1%}; largest checkpoint "
                 f"{num(flat['encoded_bytes']['max_tail'])} bytes: a monitor restarted by "
                 "an alarm refills its reference); growing state keys: "
                 f"{growing or 'none'}.")


def api_table(data: dict[str, Any]) -> Table:
    if "error" in data or "skipped" in data:
        status = "error" if "error" in data else "skipped"
        return Table("api", "HTTP API latency", ("endpoint", status), [("–", data[status])])
    rows = []
    for name in ("get_alarms", "get_trace"):
        s = data[name]
        rows.append((name.replace("get_", "GET /").replace("trace", "streams/{name}/trace"),
                     num(s["requests"]), num(s["errors"]), num(s["achieved_rate"], 1),
                     *(num(s["service"].get(k), 1) for k in ("p50_ms", "p90_ms", "p99_ms",
                                                              "max_ms"))))
    return Table("api", "HTTP API latency under open-loop load (service time, ms)",
                 ("endpoint", "requests", "errors", "rate/s", "p50", "p90", "p99", "max"), rows,
                 f"{num(data['alarms'])} alarms and {num(data['trace_points'])} trace points in "
                 "PostgreSQL; bench/bench_api.py.")


def memory_table(data: dict[str, Any]) -> Table:
    warmup = next((r["at_events"][0] for r in data["runs"].values() if "error" not in r), None)
    rows = []
    for name, r in data["runs"].items():
        if "error" in r:
            rows.append((name, "error", "", "", "", r["error"]))
            continue
        rss = r["rss_mb"]
        rows.append((name, num(r["events"]), num(rss[0], 1), num(rss[-1], 1),
                     num(rss[-1] - rss[0], 1), num(r["alarms"])))
    return Table("memory", "Resident memory over a long stationary stream",
                 ("monitor", "events", "RSS after warm-up MB", "RSS end MB", "growth MB",
                  "alarms"), rows,
                 f"Bounded: max_reference = {data['max_reference']}; each run in a fresh process "
                 f"(two at a time); RSS traced after a warm-up of {num(warmup)} events.")


def machine_table(docs: dict[str, dict[str, Any]]) -> Table:
    machine = next(iter(docs.values()))["meta"]["machine"]
    rows = [(k, str(v)) for k, v in machine.items()]
    return Table("machine", "Machine", ("what", "value"), rows)


def runs_table(docs: dict[str, dict[str, Any]]) -> Table:
    rows = [(name, d["meta"]["started"], num(d["meta"]["seconds"], 1),
             num(d["meta"]["load_before"], 2), num(d["meta"]["load_after"], 2),
             f"`{d['meta']['command']}`")
            for name, d in docs.items()]
    return Table("runs", "Runs (load = 1-minute load average; the machine was shared)",
                 ("section", "started (UTC)", "seconds", "load before", "load after", "command"),
                 rows)


def section_tables(name: str, data: dict[str, Any]) -> list[Table]:
    """The tables of one section's results (an error table when the section failed)."""
    if "error" in data and name != "api":
        return [Table(name, name, ("error",), [(data["error"],)])]
    builders: dict[str, list[Callable[[dict[str, Any]], Table]]] = {
        "statistical": [ville_table, run_length_table, river_stationary_table, delays_table,
                        matched_table, adaptation_table],
        "ood": [ood_table],
        "throughput": [throughput_table, worker_rss_table, calibration_costs_table,
                       checkpoint_sizes_table, clients_table],
        "api": [api_table],
        "memory": [memory_table],
        "state": [state_table],
    }
    return [build(data) for build in builders[name]]


def load_results(results: Path) -> dict[str, dict[str, Any]]:
    """Every section's JSON document present in ``results``, in section order."""
    return {name: json.loads((results / f"{name}.json").read_text())
            for name in SECTIONS if (results / f"{name}.json").exists()}


def all_tables(docs: dict[str, dict[str, Any]]) -> dict[str, Table]:
    """Every table of the doc, by marker key."""
    tables = [machine_table(docs), runs_table(docs)] if docs else []
    for name, doc in docs.items():
        tables += section_tables(name, doc["data"])
    return {t.key: t for t in tables}


# ------------------------------------------------------------------- figures quoted in prose
def spaced(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures, thousands apart: 13 006 → "13 000"."""
    rounded = float(f"{value:.{digits}g}")
    return f"{rounded:,.0f}".replace(",", " ") if rounded >= 100 else f"{rounded:g}"


def millions(value: float) -> str:
    return f"{value / 1e6:.2f} M"


def thousands(value: float) -> str:
    return f"{value / 1e3:.0f} k"


def _core_figures(core: dict[str, Any]) -> dict[str, str]:
    rate, goal = core["events_per_second"], core["goals"]
    adwin = rate["adwin_per_event"]
    out = {"core.numba_speedup": f"{rate['ctm_batch'] / rate['ctm_batch_no_numba']:.0f}"}
    for name, value in rate.items():
        out[f"core.{name}"] = f"{value:,}".replace(",", " ")
        out[f"core.{name}.short"] = millions(value) if value >= 1e6 else thousands(value)
        out[f"core.{name}.adwin"] = f"{value / adwin:.2g}"
        if name in goal:
            out[f"core.{name}.goal"] = f"{goal[name]:,}".replace(",", " ")
    return out


def _stage_us(profile: dict[str, Any], name: str) -> float:
    """µs per record of the profiled stage whose label starts with ``name``."""
    stages = profile["stages_us_per_record"]
    return float(next(v for k, v in stages.items() if k.strip().startswith(name)))


def _end_to_end_figures(e2e: dict[str, Any]) -> dict[str, str]:
    kafka, profile = e2e["kafka"], e2e["profile"]
    out = {f"e2e.{k.removesuffix('_per_s')}": spaced(v) for k, v in e2e.items()
           if k.endswith("_per_s")}
    out |= {f"e2e.{k}": f"{v:.2f}" for k, v in e2e.items() if "_over_" in k}
    out |= {"e2e.batch": spaced(e2e["batch"]), "e2e.streams": str(e2e["streams"]),
            "e2e.defaults.batch": spaced(e2e["cli_defaults"]["batch"]),
            "e2e.defaults.checkpoint_every": str(e2e["cli_defaults"]["checkpoint_every"]),
            "e2e.goal.kafka_over_raw": f"{e2e['goals']['kafka_over_raw']['goal']:g}",
            "e2e.raw_consume.cpu_us": f"{kafka['raw']['cpu_us_per_record']:.0f}",
            "e2e.worker.cpu_us": f"{kafka['worker']['cpu_us_per_record']:.0f}",
            "e2e.worker_defaults.cpu_us": f"{kafka['worker_defaults']['cpu_us_per_record']:.0f}",
            "e2e.profile.total_us": f"{profile['total_us_per_record']:.0f}"}
    if "calibration_costs" in e2e:
        ratio = e2e["calibration_costs"]["ratio"]
        out["e2e.calibration.ratio"] = f"{ratio['cpu']:.2f}"
        out["e2e.calibration.met"] = "met" if ratio["met"] else "not met"
    for key, stage in (("poll", "poll:"), ("pipeline", "pipeline:"),
                       ("detectors", "StreamDetectors.update_batch"),
                       ("ood", "OODDecider.add_many"), ("state_dict", "state_dict"),
                       ("other", "other")):
        out[f"e2e.profile.{key}_us"] = f"{_stage_us(profile, stage):.0f}"
    return out


def _api_figures(api: dict[str, Any]) -> dict[str, str]:
    one, two = api["by_workers"]["1"]["get_alarms"], api["by_workers"]["2"]["get_alarms"]
    cpu = sorted((one["server_cpu_ms_per_request"], two["server_cpu_ms_per_request"]))
    return {"api.alarms": spaced(api["alarms"]), "api.trace_points": spaced(api["trace_points"]),
            "api.rate": f"{api['rate']:g}",
            "api.p99_ms.workers_2": f"{two['service']['p99_ms']:.0f}",
            "api.p99_ms.workers_1": f"{one['service']['p99_ms']:.0f}",
            "api.cpu_ms": f"{cpu[0]:.1f}–{cpu[1]:.1f}",
            "api.trace_points_per_stream": spaced(api["trace_points"] / api["streams"]),
            "api.trace_p50_ms": f"{api['get_trace']['service']['p50_ms']:.0f}"}


def _memory_figures(memory: dict[str, Any]) -> dict[str, str]:
    out = {"memory.events": spaced(memory["events"]),
           "memory.max_reference": spaced(memory["max_reference"])}
    for name, run in memory["runs"].items():
        if "error" not in run:
            growth = run["rss_mb"][-1] - run["rss_mb"][0]
            out[f"memory.{name.replace('/', '.')}.growth_mb"] = f"{growth:.1f}"
    return out


def _state_figures(state: dict[str, Any]) -> dict[str, str]:
    last, flat = state["points"][-1], state["flat"]
    return {"state.events": spaced(state["events"]),
            "state.checkpoint_kb": spaced(last["encoded_bytes"] / 1e3),
            "state.rss_mb": f"{last['rss_mb']:.0f}",
            "state.flat": "yes" if flat["flat"] else "no",
            "state.growth": f"{flat['encoded_bytes']['growth']:+.1%}"}


def _load(doc: dict[str, Any]) -> str:
    """The 1-minute load average recorded before and after the run, lower first."""
    low, high = sorted((doc["meta"]["load_before"], doc["meta"]["load_after"]))
    return f"{low:.2f}–{high:.2f}"


def quoted_figures(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The figures README.md and docs/algorithms.md quote in their text, by marker key, as
    they print them; a section whose results are missing or failed quotes nothing."""
    out: dict[str, str] = {}
    makers: dict[str, list[tuple[str, Callable[[dict[str, Any]], dict[str, str]]]]] = {
        "throughput": [("core", _core_figures), ("end_to_end", _end_to_end_figures)],
        "api": [("", _api_figures)], "memory": [("", _memory_figures)],
        "state": [("", _state_figures)]}
    for section, parts in makers.items():
        doc = docs.get(section)
        if doc is None or "error" in doc["data"]:
            continue
        out[f"{section}.load"] = _load(doc)
        out[f"{section}.cores"] = str(doc["meta"]["machine"]["nproc"])
        for key, make in parts:
            data = doc["data"][key] if key else doc["data"]
            if not ("error" in data or "skipped" in data):
                out |= make(data)
    return out


BLOCK = re.compile(r"^<!-- bench:([\w.]+) -->\n.*?^<!-- /bench:\1 -->$", re.M | re.S)
#: A figure quoted in a sentence: ``<!-- bench:KEY -->2.63 M<!-- /bench:KEY -->`` on one line.
INLINE = re.compile(r"<!-- bench:([\w.]+) -->([^\n]*?)<!-- /bench:\1 -->")


def fill_doc(text: str, tables: dict[str, Table], quoted: dict[str, str] | None = None) -> str:
    """``text`` with every block between the lines ``<!-- bench:KEY -->`` and
    ``<!-- /bench:KEY -->`` rewritten from ``tables`` ("No results yet" for a missing key), and
    every figure between inline markers from ``quoted`` ("–" for a missing key)."""

    def block(match: re.Match[str]) -> str:
        key = match.group(1)
        body = tables[key].markdown() if key in tables else "_No results yet._"
        return f"<!-- bench:{key} -->\n{body}\n<!-- /bench:{key} -->"

    def figure(match: re.Match[str]) -> str:
        key = match.group(1)
        return f"<!-- bench:{key} -->{(quoted or {}).get(key, '–')}<!-- /bench:{key} -->"

    return INLINE.sub(figure, BLOCK.sub(block, text))


def doc_blocks(text: str) -> dict[str, str]:
    """The body of every marked block of ``text``, by key."""
    return {m.group(1): m.group(0).split("\n", 1)[1].rsplit("\n", 1)[0]
            for m in BLOCK.finditer(text)}


def doc_figures(text: str) -> dict[str, str]:
    """The text of every figure quoted between inline markers in ``text``, by key."""
    return {m.group(1): m.group(2) for m in INLINE.finditer(text)}


def figure_paths(text: str) -> list[str]:
    """The image paths a markdown text shows (``![...](path)``)."""
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)


def regenerate(results: Path, doc_paths: Sequence[Path], figures_dir: Path | None) -> int:
    """Rewrite the tables and quoted figures of ``doc_paths`` (and the plots unless
    ``figures_dir`` is None) from the JSON results in ``results``."""
    docs = load_results(results)
    tables, quoted = all_tables(docs), quoted_figures(docs)
    for doc in doc_paths:
        doc.write_text(fill_doc(doc.read_text(), tables, quoted))
        print(f"[bench] figures of {doc} rewritten from {len(docs)} result files",
              file=sys.stderr)
    if figures_dir is not None:
        import figures

        for path in figures.make_all(results, figures_dir):
            print(f"[bench] wrote {path}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI sizes, into bench/results/quick")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON")
    parser.add_argument("--sections", help=f"comma-separated subset of {', '.join(SECTIONS)} "
                        "(default: all; --quick: all but api)")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results[/quick])")
    parser.add_argument("--seeds", type=int, help="seeds per scenario of the comparison")
    parser.add_argument("--report", action="store_true",
                        help="only regenerate the figures, doc tables and quoted figures from "
                        "the results")
    parser.add_argument("--write-doc", action="store_true",
                        help="only regenerate the doc tables and quoted figures")
    parser.add_argument("--memory-child", choices=["ctm", "covariate"], help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=10_000, help=argparse.SUPPRESS)
    parser.add_argument("--max-reference", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.events, args.max_reference)))
        return 0
    results = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    if args.report or args.write_doc:
        return regenerate(results, DOCS_WITH_RESULTS, None if args.write_doc else FIGURES)
    default = QUICK_SECTIONS if args.quick else SECTIONS
    sections = [s for s in (args.sections or ",".join(default)).split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; valid: {', '.join(SECTIONS)}")
    plan = QUICK_PLAN if args.quick else FULL_PLAN
    if args.seeds:
        plan = dataclasses.replace(plan, compare_seeds=args.seeds)
    status = run(sections, plan, results, as_json=args.json)
    if not args.quick and args.out is None:
        status |= regenerate(results, DOCS_WITH_RESULTS, FIGURES)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
