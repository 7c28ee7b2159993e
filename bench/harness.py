"""The benchmark harness: every benchmark in one run, the figures in ``bench/results/*.json``,
the plots in ``docs/figures/`` and the tables of ``docs/benchmarks.md``.

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
                 client rate) and ``bench_worker.py --json`` (end to end) when it exists.
``api``          ``bench_api.py`` (HTTP latency under load), as a subprocess.
``memory``       resident memory over a long stream, bounded (``max_reference``) vs unbounded,
                 each in a fresh process.

A benchmark that fails records ``{"error": ...}`` in its place, the others still run, and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
QUICK_RESULTS = RESULTS / "quick"
DOC = ROOT / "docs" / "benchmarks.md"
FIGURES = ROOT / "docs" / "figures"
for _path in (str(ROOT), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

SECTIONS: tuple[str, ...] = ("statistical", "ood", "throughput", "api", "memory")


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
    worker_args: tuple[str, ...] = ()
    api_args: tuple[str, ...] = ("--duration", "20", "--trace-duration", "5")
    memory_events: int = 500_000
    memory_max_reference: int = 500


FULL_PLAN = Plan(quick=False)
QUICK_PLAN = Plan(
    quick=True, workers=1, ood_reps=20,
    ood_sizes={"digits": [50], "shuttle": [100], "shuttle-splits": [100]},
    core_events=4_000, db_rows=2_000, db_batch=500, kafka_events=2_000,
    worker_args=("--quick",),
    api_args=("--alarms", "2000", "--trace-points", "20000", "--streams", "4", "--rate", "50",
              "--duration", "1", "--warmup", "0.5", "--trace-rate", "10",
              "--trace-duration", "1"),
    memory_events=4_000,
)


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
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
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
    if not path.exists():
        return {"error": f"bench/{name} does not exist (yet)"}
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
    out["kafka"] = guarded(bench_kafka.run, plan.kafka_events, "confluent")
    out["end_to_end"] = run_script("bench_worker.py", ["--json", *plan.worker_args])
    return out


def section_api(plan: Plan) -> dict[str, Any]:
    return run_script("bench_api.py", plan.api_args)


def section_memory(plan: Plan) -> dict[str, Any]:
    runs = {}
    for monitor in ("ctm", "covariate"):
        for bounded in (False, True):
            name = f"{monitor}/{'bounded' if bounded else 'unbounded'}"
            args = ["--memory-child", monitor, "--events", str(plan.memory_events)]
            if bounded:
                args += ["--max-reference", str(plan.memory_max_reference)]
            runs[name] = run_script("harness.py", args)
    return {"events": plan.memory_events, "max_reference": plan.memory_max_reference,
            "runs": runs}


SECTION_FUNCTIONS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "statistical": section_statistical,
    "ood": section_ood,
    "throughput": section_throughput,
    "api": section_api,
    "memory": section_memory,
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
    and the unbounded reference grows by one score per event.
    """
    import numpy as np

    from monitor.datasets import load_shuttle_regression
    from monitor.detectors import ConditionalMonitor, CovariateMonitor

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
    trace_events, trace_rss = [0], [round(rss_mb(), 2)]
    started = time.perf_counter()
    for done in range(step, events + 1, step):
        rows = rng.integers(0, residual.size, step)
        if isinstance(mon, ConditionalMonitor):
            for s in residual[rows].tolist():
                mon.update(None, s)
        else:
            mon.update_many(task.X[rows])
        trace_events.append(done)
        trace_rss.append(round(rss_mb(), 2))
    return {"monitor": monitor, "max_reference": max_reference, "events": trace_events[-1],
            "rss_mb": trace_rss, "at_events": trace_events, "alarms": mon.n_alarms,
            "n_reference": getattr(mon, "n_reference", None),
            "events_per_s": round(trace_events[-1] / (time.perf_counter() - started))}


# ------------------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI sizes, into bench/results/quick")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results[/quick])")
    parser.add_argument("--seeds", type=int, help="seeds per scenario of the comparison")
    parser.add_argument("--report", action="store_true",
                        help="only regenerate the figures and the doc tables from the results")
    parser.add_argument("--write-doc", action="store_true", help="only regenerate doc tables")
    parser.add_argument("--memory-child", choices=["ctm", "covariate"], help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=10_000, help=argparse.SUPPRESS)
    parser.add_argument("--max-reference", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.events, args.max_reference)))
        return 0
    results = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    if args.report or args.write_doc:
        return regenerate(results, DOC, None if args.write_doc else FIGURES)
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; valid: {', '.join(SECTIONS)}")
    plan = QUICK_PLAN if args.quick else FULL_PLAN
    if args.seeds:
        plan = Plan(**{**plan.__dict__, "compare_seeds": args.seeds})
    status = run(sections, plan, results, as_json=args.json)
    if not args.quick and args.out is None:
        status |= regenerate(results, DOC, FIGURES)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
