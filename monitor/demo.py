"""``monitor demo``: the whole pipeline on the embedded default and real bundled data.

Phases (``monitor.datasets.DEMO_PHASES``, documented in docs/detectors.md): stable → benign
covariate shift → concept shift → extreme covariate shift, on river's bundled Shuttle data. Labels
arrive ``LABEL_DELAY`` predictions after their prediction, through the delayed-label join.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from monitor.pipeline import BatchOutput
from monitor.records import Alarm, TracePoint
from monitor.settings import Settings

LABEL_DELAY = 25


def run_demo(
    out_dir: str, settings: Settings, seed: int = 0, serve: bool = False, as_json: bool = False
) -> int:
    from rich.console import Console

    from monitor.datasets import build_example
    from monitor.runner import run_source

    console = Console(stderr=True, width=max(120, Console(stderr=True).width))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    settings = settings.model_copy(update={"database_url": f"sqlite:///{db_path}"})
    with console.status("building the example stream from river's bundled Shuttle data"):
        paths = build_example(out, seed=seed, label_delay=LABEL_DELAY)
    truth = json.loads(paths["truth"].read_text())
    total = sum(1 for _ in paths["events"].open("rb"))
    traces: list[TracePoint] = []
    summary = _run_with_progress(console, paths, settings, total, traces, run_source)
    png = out / "demo.png"
    plot_demo(traces, summary.alarms, truth, png)
    if as_json:
        print(json.dumps(summary.to_json() | {"plot": str(png), "truth": truth}))
    else:
        _print_table(console, summary.alarms, truth)
        summary.print_human(sys.stderr)
        console.print(f"plot: {png}   database: {settings.database_url}")
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
    for a in alarms:
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
    """Martingale traces per detector, thresholds, alarms and phase boundaries as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    for ax, detector in zip(axes, ("covariate", "conditional"), strict=True):
        points = sorted((t for t in traces if t.detector == detector), key=lambda t: t.event_index)
        xs = [t.event_index for t in points]
        ax.plot(xs, [t.log_statistic for t in points], lw=1.2, label="log statistic")
        ax.plot(xs, [t.log_martingale for t in points], lw=0.8, alpha=0.7, label="log martingale")
        if points:
            ax.axhline(points[-1].log_threshold, color="k", ls="--", lw=0.8, label="log threshold")
        for a in alarms:
            if a.detector == detector:
                ax.axvline(a.event_index, color="red", lw=1.0, alpha=0.8)
                ax.text(
                    a.event_index,
                    ax.get_ylim()[1],
                    a.kind.replace("_", " "),
                    rotation=90,
                    va="top",
                    ha="right",
                    fontsize=7,
                    color="red",
                )
        for i, phase in enumerate(truth["phases"]):
            ax.axvspan(phase["start"], phase["stop"], alpha=0.05 if i % 2 else 0.12, color="gray")
        ax.set_ylabel(f"{detector}\n(log scale)")
        ax.legend(loc="upper left", fontsize=7)
    for phase in truth["phases"]:
        axes[0].text(
            (phase["start"] + phase["stop"]) / 2,
            axes[0].get_ylim()[1],
            phase["kind"],
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axes[-1].set_xlabel("event index")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _serve(settings: Settings) -> None:
    import uvicorn

    from monitor.api import create_app

    uvicorn.run(create_app(settings), host="127.0.0.1", port=8000)
