"""``monitor demo``: the whole pipeline on the embedded default and real bundled data.

Phases (``monitor.ops.datasets.DEMO_PHASES``, documented in docs/detectors.md): stable → benign
covariate shift → concept shift → extreme covariate shift, on river's bundled Shuttle data. Labels
arrive ``LABEL_DELAY`` predictions after their prediction, through the delayed-label join.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from monitor.engine.pipeline import BatchOutput
from monitor.settings import Settings
from monitor.streams.records import Alarm, TracePoint

LABEL_DELAY = 25
#: Labels per performance window: 29 windows over the 2 900 predictions, so each alarm's report
#: compares the 2 windows on each side of its changepoint within one phase (the default 500
#: gives 5, each across a phase boundary or a phase away).
PERFORMANCE_WINDOW = 100


def run_demo(
    out_dir: str, settings: Settings, seed: int = 0, serve: bool = False, as_json: bool = False
) -> int:
    from rich.console import Console

    from monitor.cli.runs import run_source
    from monitor.ops.datasets import build_example

    console = Console(stderr=True, width=max(120, Console(stderr=True).width))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    settings = settings.model_copy(update={"database_url": f"sqlite:///{db_path}"})
    with console.status("building the example stream from river's bundled Shuttle data"):
        paths = build_example(out, seed=seed, label_delay=LABEL_DELAY, named=True,
                              performance_window=PERFORMANCE_WINDOW)
    truth = json.loads(paths["truth"].read_text())
    total = sum(1 for _ in paths["events"].open("rb"))
    traces: list[TracePoint] = []
    summary = _run_with_progress(console, paths, settings, total, traces, run_source)
    png = out / "demo.png"
    plot_demo(traces, summary.alarms, truth, png)
    reports = write_reports(settings.database_url, summary.alarms, out / "reports")
    if as_json:
        print(json.dumps(summary.to_json() | {"plot": str(png), "truth": truth,
                                              "reports": [str(r) for r in reports]}))
    else:
        _print_table(console, summary.alarms, truth)
        summary.print_human(sys.stderr)
        console.print(f"plot: {png}   database: {settings.database_url}")
        console.print(f"reports: {out / 'reports'}/ (one HTML page per alarm: alarm-INDEX-"
                      "DETECTOR.html; open it in a browser)")
    if serve:
        _serve(settings)
    return 0


def _run_with_progress(
    console: Any,
    paths: dict[str, Path],
    settings: Settings,
    total: int,
    traces: list[TracePoint],
    run_source: Any,
) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("monitoring", total=total)

        def on_batch(out: BatchOutput) -> None:
            traces.extend(out.trace_points)
            done = max(out.offsets.values(), default=0)
            progress.update(task, completed=done)

        return run_source(
            source_url=f"file:{paths['events']}",
            configs=[str(paths["config"])],
            group="demo",
            settings=settings,
            store=True,
            batch_size=200,
            on_batch=on_batch,
        )


def write_reports(database_url: str, alarms: list[Alarm], folder: Path) -> list[Path]:
    """One HTML report per alarm (``monitor report``) in ``folder``, named by event index and
    detector; reports of an earlier run there are removed first."""
    from monitor.db.engine import make_engine, session_factory
    from monitor.ops.report import report_context, write_report

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("alarm-*.html"):
        old.unlink()
    engine = make_engine(database_url)
    try:
        with session_factory(engine)() as session:
            return [
                write_report(report_context(session, a.id),
                             folder / f"alarm-{a.event_index:06d}-{a.detector}.html")
                for a in sorted(alarms, key=lambda a: (a.event_index, a.detector))
            ]
    finally:
        engine.dispose()


def phase_of(index: int, truth: dict[str, Any]) -> str:
    for phase in truth["phases"]:
        if phase["start"] <= index < phase["stop"]:
            return str(phase["kind"])
    return "?"


def _print_table(console: Any, alarms: list[Alarm], truth: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="alarms (diagnosis, changepoint, phase at the alarm)")
    for column in ("event", "detector", "kind", "changepoint", "statistic", "phase"):
        table.add_column(column)
    for a in sorted(alarms, key=lambda a: (a.event_index, a.detector)):
        table.add_row(
            f"{a.event_id} (#{a.event_index})",
            a.detector,
            a.kind,
            str(a.changepoint),
            f"{a.statistic:.3g} ≥ {a.threshold:.3g}",
            phase_of(a.event_index, truth),
        )
    console.print(table)


def plot_demo(
    traces: list[TracePoint], alarms: list[Alarm], truth: dict[str, Any], path: Path
) -> None:
    """Each detector's alarm statistic and test martingale (log₁₀), its threshold, the alarms
    and the re-baselining after each, and the scripted phases, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    to10 = 1.0 / math.log(10.0)  # the traces hold natural logs
    fig, axes = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    for ax, detector in zip(axes, ("covariate", "conditional"), strict=True):
        points = sorted((t for t in traces if t.detector == detector), key=lambda t: t.event_index)
        xs = [t.event_index for t in points]
        # After an alarm the detector collects a fresh reference (no p-values, the statistic is
        # frozen at the alarm): not a statistic to read, so the lines break there.
        idle = [math.isnan(t.p_value) and i > 0 for i, t in enumerate(points)]
        pairs = list(zip(points, idle, strict=True))
        stat = [math.nan if q else t.log_statistic * to10 for t, q in pairs]
        mart = [math.nan if q else t.log_martingale * to10 for t, q in pairs]
        ax.plot(xs, stat, lw=1.3, color="tab:blue", label="alarm statistic")
        ax.plot(xs, mart, lw=0.8, alpha=0.7, color="tab:orange", label="test martingale")
        if points:
            ax.axhline(points[-1].log_threshold * to10, color="k", ls="--", lw=0.8,
                       label="alarm threshold")
        for start, stop in _runs(xs, idle):
            ax.axvspan(start, stop, color="red", alpha=0.08, lw=0)
            ax.text((start + stop) / 2, 0.03, "re-baselining", transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=7, color="firebrick")
        for i, phase in enumerate(truth["phases"]):
            ax.axvspan(phase["start"], phase["stop"], alpha=0.04 if i % 2 else 0.10, color="gray")
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.35 * (high - low))  # room for the alarm labels
        for a in (a for a in alarms if a.detector == detector):
            ax.axvline(a.event_index, color="red", lw=1.0, alpha=0.8)
            ax.text(a.event_index, 0.97, f" {a.kind.replace('_', ' ')} @{a.event_index}",
                    transform=ax.get_xaxis_transform(), rotation=90, va="top", ha="right",
                    fontsize=7, color="red",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ax.set_ylabel(f"{detector} monitor\nlog₁₀ value")
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    for phase in truth["phases"]:
        axes[0].text((phase["start"] + phase["stop"]) / 2, 1.01, phase["kind"].replace("_", " "),
                     transform=axes[0].get_xaxis_transform(), ha="center", va="bottom",
                     fontsize=8)
    axes[-1].set_xlabel("event index")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _runs(xs: list[int], flags: list[bool]) -> list[tuple[int, int]]:
    """The spans of consecutive flagged points, as (first x, last x).

    >>> _runs([0, 10, 20, 30, 40], [False, True, True, False, True])
    [(10, 20), (40, 40)]
    """
    spans: list[tuple[int, int]] = []
    for i, (x, flag) in enumerate(zip(xs, flags, strict=True)):
        if flag and i > 0 and flags[i - 1] and spans:
            spans[-1] = (spans[-1][0], x)
        elif flag:
            spans.append((x, x))
    return spans


def _serve(settings: Settings) -> None:
    import uvicorn

    from monitor.api import create_app

    uvicorn.run(create_app(settings), host="127.0.0.1", port=8000)
