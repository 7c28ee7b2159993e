"""The figures of ``docs/benchmarks.md``, drawn from ``bench/results/*.json`` only.

    python bench/figures.py [--results bench/results] [--out docs/figures]

(``python bench/harness.py --report`` draws them and rewrites the doc's tables in one go.)
A figure whose results file is missing is skipped.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

ROOT = Path(__file__).resolve().parents[1]
BETTING_COLORS = {"simple_jumper": "tab:blue", "composite_jumper": "tab:orange",
                  "power": "tab:green", "mixture": "tab:red", "agrapa": "tab:olive",
                  "plug_in_power": "tab:cyan"}
RIVER_COLORS = {"adwin": "tab:purple", "kswin": "tab:brown", "page_hinkley": "tab:gray"}
SHIFTS = ("concept_abrupt", "concept_gradual", "extreme_covariate", "benign_covariate")


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())["data"]
    return None if "error" in data and name != "api" else dict(data)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def _style(det: str) -> dict[str, Any]:
    if "/" in det:
        family, betting = det.split("/")
        return {"color": BETTING_COLORS[betting], "linestyle": "-" if family == "wctm" else "--",
                "marker": "o" if family == "wctm" else "s", "markersize": 3.5}
    return {"color": RIVER_COLORS[det], "linestyle": ":", "marker": "^", "markersize": 4}


# ----------------------------------------------------------------------------- trade-offs
def tradeoff_detectors(summary: dict[str, Any]) -> list[str]:
    """Every WCTM, the CTM with the composite jumper, and the river detectors."""
    dets = list(summary["stationary"])
    return ([d for d in dets if d.startswith("wctm/")] + ["ctm/composite_jumper"]
            + [d for d in dets if "/" not in d])


def tradeoff_points(summary: dict[str, Any], det: str, scenario: str,
                    rule: str) -> list[tuple[float, float]]:
    """(stationary false-alarm rate, y) per setting of ``det``: martingales at the settings of
    ``rule``, river detectors at their whole grid; y is the mean* delay, or the alarm rate
    after a benign shift."""
    points = []
    for setting, stats in summary["stationary"][det].items():
        if "/" in det and not setting.startswith(rule + "@"):
            continue
        shifted = summary[scenario][det][setting]
        y = shifted["detected"] if scenario == "benign_covariate" else shifted[
            "delay_mean_censored"]
        if y is not None:
            points.append((float(stats["alarm_rate"]), float(y)))
    return sorted(points)


def tradeoff_figure(stat: dict[str, Any], rule: str) -> Figure:
    summary = stat["summary"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for ax, scenario in zip(axes.ravel(), SHIFTS, strict=True):
        for det in tradeoff_detectors(summary):
            pts = tradeoff_points(summary, det, scenario, rule)
            if pts:
                ax.plot(*zip(*pts, strict=True), label=det, **_style(det))
        benign = scenario == "benign_covariate"
        ax.set_title(scenario + (" (nothing harmful: lower is better)" if benign else ""))
        ax.set_ylabel("share with an alarm after the shift" if benign
                      else f"mean delay (miss = {stat['config']['sizes']['n_after']})")
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(f"false-alarm rate on stationary streams "
                      f"({stat['config']['sizes']['n_stationary']} events)")
    axes[0, 0].legend(fontsize=7, ncol=2)
    name = {"shiryaev_roberts": "Shiryaev–Roberts thresholds", "ville": "Ville levels α",
            "cusum": "CUSUM thresholds"}[rule]
    fig.suptitle(f"Delay vs false alarms; martingales across {name}, river across its grid "
                 f"({stat['config']['sizes']['seeds']} seeds per point)")
    return fig


# ----------------------------------------------------------------------------------- paths
def paths_figure(stat: dict[str, Any]) -> Figure:
    paths = stat["paths"]
    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for ax, family in zip(axes, ("ctm", "wctm"), strict=True):
        for det, values in paths["log10_martingale"].items():
            if det.startswith(family + "/"):
                ax.plot(values, label=det.split("/")[1], color=_style(det)["color"], lw=1.2)
        for phase in paths["phases"][1:]:
            ax.axvline(phase["start"], color="k", lw=0.8, ls="--")
        for phase in paths["phases"]:
            ax.text(phase["start"] + 5, 0.97, phase["kind"], transform=ax.get_xaxis_transform(),
                    fontsize=7, va="top")
        ax.axhline(2.0, color="tab:red", lw=0.8, ls=":", label="Ville α = 0.01")
        ax.set_ylim(-8, max(12.0, min(60.0, _max(paths["log10_martingale"], family) + 1)))
        ax.set_ylabel("log10 S")
        ax.grid(alpha=0.3)
    adaptation = paths["adaptation"]
    if adaptation is not None:
        restarted = paths.get("restart") is not None
        axes[1].axvline(adaptation, color="tab:olive", lw=1.2,
                        label="covariate alarm" + (" (restart)" if restarted else ""))
    axes[0].set_title("Unweighted CTM")
    axes[1].set_title("Weighted CTM (service defaults)")
    axes[1].set_xlabel("event")
    axes[0].legend(fontsize=7, loc="upper left")
    axes[1].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Martingale paths on one Shuttle stream (seed {paths['seed']}), no alarms; "
                 "paths below −8 are cut")
    return fig


def _max(paths: dict[str, list[float]], family: str) -> float:
    return max((max(v) for k, v in paths.items() if k.startswith(family + "/") and v),
               default=0.0)


# ---------------------------------------------------------------------------------- delays
def delays_figure(stat: dict[str, Any]) -> Figure:
    summary, defaults = stat["summary"], stat["config"]["defaults"]
    harmful = SHIFTS[:3]
    fig, axes = plt.subplots(1, len(harmful), figsize=(13, 5), sharey=True)
    dets = list(summary["stationary"])
    for ax, scenario in zip(axes, harmful, strict=True):
        boxes = []
        for i, det in enumerate(dets):
            s = summary[scenario][det][defaults[det.split("/")[0]]]
            keys = ("delay_p50", "delay_p25", "delay_p75", "delay_p10", "delay_p90")
            values = [math.nan if s[k] is None else float(s[k]) for k in keys]
            boxes.append(dict(zip(("med", "q1", "q3", "whislo", "whishi"), values,
                                  strict=True), label=det))
            ax.text(1.01, i + 1, f"{s['detected']:.2f}", transform=ax.get_yaxis_transform(),
                    va="center", fontsize=7)
        ax.bxp(boxes, orientation="horizontal", showfliers=False)
        ax.set_title(scenario, pad=14)
        ax.text(1.01, 1.01, "detected", transform=ax.transAxes, fontsize=7)
        ax.set_xlabel("delay (events), p10–p25–median–p75–p90")
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_ylabel("detector at its default setting")
    fig.suptitle("Detection delay distribution of the detected streams, benchmark settings")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ throughput
def throughput_bars(data: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(label, rate, group) for the bar chart; failed benchmarks are left out."""
    bars: list[tuple[str, float, str]] = []
    core = data.get("core", {})
    if "events_per_second" in core:
        bars += [(k, float(v), "detector core (events/s)")
                 for k, v in core["events_per_second"].items()]
    if "error" not in data.get("scorers", {"error": 1}):
        bars += [(f"scorer {k}", float(v), "OOD scorers (events/s)")
                 for k, v in data["scorers"].items()]
    for db in ("sqlite", "postgresql"):
        cases = data.get("persistence", {}).get(db, {"error": 1})
        if "error" not in cases:
            bars += [(f"{db} {k}", float(v["rows_per_s"]), "persistence (rows/s)")
                     for k, v in cases.items()]
    kafka = data.get("kafka", {"error": 1})
    if "error" not in kafka:
        bars += [(f"kafka {k.removesuffix('_per_s')}", float(v), "Kafka (records/s)")
                 for k, v in kafka.items() if k.endswith("_per_s")]
    e2e = data.get("end_to_end", {"error": 1})
    if "error" not in e2e:
        bars += [(k, float(v), "end to end (events/s)") for k, v in e2e.items()
                 if k.endswith("_per_s")]
    return bars


def throughput_figure(data: dict[str, Any]) -> Figure:
    bars = throughput_bars(data)
    groups = list(dict.fromkeys(g for _, _, g in bars))
    cmap = plt.get_cmap("tab10")
    colors = {g: cmap(i % 10) for i, g in enumerate(groups)}
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(bars) + 1.5))
    y = range(len(bars))
    ax.barh(list(y), [r for _, r, _ in bars], color=[colors[g] for _, _, g in bars])
    ax.set_yticks(list(y), [name for name, _, _ in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("per second (log scale)")
    ax.legend(handles=[Patch(color=colors[g], label=g) for g in groups], fontsize=7,
              loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title("Throughput, one process (shared machine)")
    return fig


# ---------------------------------------------------------------------------------- memory
def memory_figure(data: dict[str, Any]) -> Figure:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in data["runs"].items():
        if "error" in run:
            continue
        style = "-" if name.endswith("/bounded") else "--"
        ax.plot(run["at_events"], run["rss_mb"], style, label=name)
    ax.set_xlabel("events")
    ax.set_ylabel("resident memory (MB)")
    ax.set_title(f"Resident memory, bounded (max_reference = {data['max_reference']}) "
                 "vs unbounded")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# ------------------------------------------------------------------------------------- OOD
def ood_figure(data: dict[str, Any], alpha: float = 0.1) -> Figure:
    rows = [r for r in data["fdr"] if r["alpha"] == alpha]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 4), sharey=True,
                             squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        mine = [r for r in rows if r["dataset"] == dataset]
        lond = next(r["rule"] for r in mine if r["rule"].startswith("lond"))
        for rule, color in ((lond.replace("lond", "bh"), "tab:blue"), ("eg_bh", "tab:orange"),
                            (lond, "tab:green")):
            pts = sorted((r["m"], r["fdr"], r["tpr"]) for r in mine if r["rule"] == rule)
            ms = [p[0] for p in pts]
            ax.plot(ms, [p[1] for p in pts], "-o", color=color, label=f"{rule} FDR", ms=3)
            ax.plot(ms, [p[2] for p in pts], "--s", color=color, label=f"{rule} TPR", ms=3)
        ax.axhline(alpha, color="k", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_title(dataset)
        ax.set_xlabel("calibration size m")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel(f"FDR (solid) and TPR (dashed), α = {alpha:g}")
    return fig


# ------------------------------------------------------------------------------------- all
def make_all(results: Path, out: Path) -> list[Path]:
    """Draw every figure whose results exist; the paths written."""
    plans: list[tuple[str, str, Callable[[dict[str, Any]], Figure]]] = [
        ("statistical", "tradeoff_shiryaev_roberts.png",
         lambda d: tradeoff_figure(d, "shiryaev_roberts")),
        ("statistical", "tradeoff_ville.png", lambda d: tradeoff_figure(d, "ville")),
        ("statistical", "martingale_paths.png", paths_figure),
        ("statistical", "delays.png", delays_figure),
        ("throughput", "throughput.png", throughput_figure),
        ("memory", "memory.png", memory_figure),
        ("ood", "ood_fdr.png", ood_figure),
    ]
    written = []
    for section, filename, draw in plans:
        data = _load(results, section)
        if data is not None:
            written.append(_save(draw(data), out / filename))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    args = parser.parse_args(argv)
    for path in make_all(args.results, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
