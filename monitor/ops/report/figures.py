"""The report's figures (matplotlib, drawn to SVG for the page) and the one-image PNG report."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from monitor.alerts.payloads import evidence_summary
from monitor.ops.report.context import ReportContext, adjusted_p, frequencies, ranked
from monitor.streams.records import Alarm

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def new_figure(width: float, height: float, rows: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    # Constrained layout keeps the labels and the legends outside the axes inside the figure.
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def svg(fig: Figure) -> str:
    import matplotlib

    buffer = io.StringIO()
    # A fixed salt: the same report renders to the same bytes.
    with matplotlib.rc_context({"svg.hashsalt": "monitor-report", "svg.fonttype": "path"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def trace_figure(context: ReportContext) -> Figure:
    detectors = context.traced
    fig, axes = new_figure(11, 3 * len(detectors), rows=len(detectors))
    for ax, detector in zip(axes, detectors, strict=True):
        _draw_trace(ax, context, detector, last=detector == detectors[-1])
    return fig


def _draw_trace(ax: Axes, context: ReportContext, detector: str, last: bool) -> None:
    to10 = 1.0 / math.log(10.0)  # the traces hold natural logs
    points = context.traces.get(detector, [])
    xs = [p.event_index for p in points]
    idle = [math.isnan(p.p_value) and i > 0 for i, p in enumerate(points)]
    stat = [math.nan if q else p.log_statistic * to10 for p, q in zip(points, idle, strict=True)]
    mart = [math.nan if q else p.log_martingale * to10 for p, q in zip(points, idle, strict=True)]
    ax.plot(xs, stat, lw=1.3, color="tab:blue", label="alarm statistic")
    ax.plot(xs, mart, lw=0.8, alpha=0.7, color="tab:orange", label="test martingale")
    thresholds = [p.log_threshold for p in points if not math.isnan(p.log_threshold)]
    if thresholds:
        ax.axhline(thresholds[-1] * to10, color="k", ls="--", lw=0.8, label="threshold")
    _mark_alarm(ax, context.alarm, detector)
    ax.set_xlim(*context.window)
    ax.set_ylabel(f"{detector}\nlog₁₀ value")
    if last:
        ax.set_xlabel("event index")
    if not points:
        ax.text(0.5, 0.5, "no trace points stored in this window", transform=ax.transAxes,
                ha="center", va="center", color="gray")
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _mark_alarm(ax: Axes, alarm: Alarm, detector: str | None = None) -> None:
    """The alarm (a red line) and its changepoint estimate (dotted) on the alarm's detector and
    on performance panels; a faint line where the other detector's panel is at the alarm."""
    if detector is not None and alarm.detector != detector:
        ax.axvline(alarm.event_index, color="red", lw=0.8, ls="--", alpha=0.4,
                   label=f"{alarm.detector} alarm")
        return
    ax.axvline(alarm.event_index, color="red", lw=1.2, label="alarm")
    if alarm.changepoint is not None:
        ax.axvline(alarm.changepoint, color="purple", ls=":", lw=1.2, label="changepoint")


def attribution_figure(features: Sequence[Mapping[str, Any]]) -> Figure:
    fig, (ax,) = new_figure(8, 0.9 + 0.3 * len(features))
    _draw_attribution(ax, features)
    return fig


def _draw_attribution(ax: Axes, features: Sequence[Mapping[str, Any]]) -> None:
    names = [str(f.get("feature")) for f in features][::-1]
    values = []
    for f in features[::-1]:
        p = adjusted_p(f)
        values.append(0.0 if math.isnan(p) else -math.log10(max(p, 1e-300)))
    ax.barh(names, values, color="tab:blue")
    ax.axvline(-math.log10(0.05), color="k", ls="--", lw=0.8)
    ax.set_xlabel("−log₁₀ adjusted p-value")


def paired_bars_figure(labels: Sequence[str], before: Sequence[float],
                       after: Sequence[float], xlabel: str, after_label: str) -> Figure:
    fig, (ax,) = new_figure(8, 1.0 + 0.42 * len(labels))
    _draw_paired_bars(ax, labels, before, after, xlabel, after_label)
    return fig


def _draw_paired_bars(ax: Axes, labels: Sequence[str], before: Sequence[float],
                      after: Sequence[float], xlabel: str, after_label: str) -> None:
    """Two horizontal bars per label, the calibration's and the one after the change, first
    label on top."""
    rows = list(range(len(labels)))[::-1]
    ax.barh([r + 0.2 for r in rows], before, height=0.4, color="tab:gray", label="calibration")
    ax.barh([r - 0.2 for r in rows], after, height=0.4, color="tab:red", label=after_label)
    ax.set_yticks(rows, list(labels))
    ax.set_xlabel(xlabel)
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def indicator_bars(indicators: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[float],
                                                                     list[float]]:
    """Labels ("missing: area") and the calibration and later rates (in %) of each indicator."""
    labels = [f"{i.get('rate', '?')}: {i.get('feature', '?')}" for i in indicators]
    return (labels, [100.0 * _share(i.get("calibration_rate")) for i in indicators],
            [100.0 * _share(i.get("rate_after")) for i in indicators])


def categorical(features: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The features whose evidence has category frequencies, in the order given."""
    return [f for f in features if frequencies(f) is not None]


def _share(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else math.nan


def performance_figure(context: ReportContext, names: Sequence[str]) -> Figure:
    shown = list(names)[:4]
    fig, axes = new_figure(11, 1.0 + 1.8 * len(shown), rows=len(shown))
    for ax, name in zip(axes, shown, strict=True):
        _draw_performance(ax, context, name)
    axes[-1].set_xlabel("event index (window end)")
    return fig


def _draw_performance(ax: Axes, context: ReportContext, metric: str) -> None:
    start, stop = context.performance_span
    windows = [w for w in context.performance or ()
               if metric in w["metrics"] and start <= w["end_index"] < stop]
    ax.plot([w["end_index"] for w in windows], [w["metrics"][metric] for w in windows],
            marker="o", ms=3, lw=1.0, color="tab:green")
    _mark_alarm(ax, context.alarm)
    ax.set_xlim(start, stop)
    ax.set_ylabel(metric)


def render_png(context: ReportContext) -> bytes:
    """The report as one PNG image: the traces, data-quality rates, attribution, the first
    categorical feature's frequencies and performance figures stacked, under a title that names
    the diagnosis and the evidence of the alarm."""
    detectors = context.traced
    features = ranked(context.attribution["features"]) if context.attribution else []
    counted = categorical(features)[:1]
    metrics = sorted({m for w in context.performance or () for m in w["metrics"]})[:2]
    rows = (len(detectors) + (context.indicators is not None) + bool(features) + len(counted)
            + len(metrics))
    fig, axes = new_figure(11, 2.6 * rows + 1.0, rows=rows)
    for ax, detector in zip(axes, detectors, strict=False):
        _draw_trace(ax, context, detector, last=detector == detectors[-1])
    rest = iter(axes[len(detectors):])
    if context.indicators is not None:
        _draw_paired_bars(next(rest), *indicator_bars(context.indicators), "rate (%)",
                          "since the changepoint")
    if features:
        _draw_attribution(next(rest), features)
    for feature in counted:
        before, after = frequencies(feature) or ({}, {})
        _draw_paired_bars(next(rest), list(before), list(before.values()), list(after.values()),
                          f"share of {feature.get('feature')}", "attribution window")
    for ax, name in zip(rest, metrics, strict=True):
        _draw_performance(ax, context, name)
    fig.suptitle(_png_title(context.alarm), fontsize=10)
    numbers = [f"{k} = {value_text(v)}" for k, v in sorted(context.alarm.evidence.items())
               if not isinstance(v, dict | list)]
    fig.supxlabel("evidence: " + "; ".join(numbers), fontsize=8, wrap=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _png_title(a: Alarm) -> str:
    what = evidence_summary(a)
    return (f"{a.kind.replace('_', ' ')} on {a.stream} ({a.detector} monitor) at event "
            f"{a.event_index}; changepoint {a.changepoint}; {a.rule} statistic "
            f"{number_text(a.statistic)} ≥ {number_text(a.threshold)}"
            + (f"\n{what}" if what else ""))


def number_text(value: Any) -> str:
    """A number as the report prints it (4 significant digits; ``–`` for none or nan)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "–" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    return "–" if math.isnan(value) else f"{value:.4g}"


def value_text(value: Any) -> str:
    return number_text(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else str(value)
