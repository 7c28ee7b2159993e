"""The alarm report: one self-contained page explaining one alarm (``monitor report``).

:func:`report_context` gathers from the database what explains an alarm — the alarm with its
diagnosis and evidence, both detectors' martingale traces around it, and (given by the caller)
the model's performance windows — into a :class:`ReportContext`; :func:`render_html` turns it
into one HTML page with inline SVG figures and inline CSS (no script, no external resource, so it
opens anywhere, offline, and can be mailed), :func:`render_png` into one PNG image.

Sections render only when their data exists: feature attribution
(``evidence["attribution"]``), density-ratio directions (``evidence["density_ratio_directions"]``)
and performance before/after (the ``performance`` windows).
"""

from __future__ import annotations

import hashlib
import html
import io
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.streams.records import Alarm, TracePoint, iso

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from sqlalchemy.orm import Session

__all__ = [
    "ReportContext",
    "check_performance",
    "render_html",
    "render_png",
    "report_context",
    "trace_window",
    "write_report",
]

DETECTORS: tuple[str, str] = ("covariate", "conditional")

#: Events shown before the changepoint and after the alarm, at least.
MIN_PAD = 300

#: What each diagnosis means, for the reader of the report (docs/detectors.md "Diagnosis").
KIND_MEANING: dict[str, str] = {
    "concept_shift": (
        "The model's errors grew while its inputs stayed within the calibration support: the "
        "relation between inputs and labels changed. The model needs attention (retraining)."
    ),
    "extreme_covariate_shift": (
        "The inputs moved outside the calibration support, where the model was never "
        "validated; its predictions there are not to be trusted."
    ),
    "benign_covariate_shift": (
        "The inputs shifted within the calibration support. Informational: the conditional "
        "monitor re-weights its reference to the new inputs (WATCH) and alarms only if the "
        "model gets worse."
    ),
}

_PERFORMANCE_KEYS = ("stream", "window_index", "start_index", "end_index", "ts", "n", "metrics")


@dataclass(frozen=True)
class ReportContext:
    """Everything a report shows about one alarm.

    Attributes
    ----------
    alarm
        The alarm, with its diagnosis (``kind``, ``changepoint``) and ``evidence``.
    traces
        Trace points of each detector in :attr:`window`, by detector, in event order.
    window
        The event indexes ``[start, stop)`` shown (:func:`trace_window`).
    performance
        The stream's performance windows ``{"stream", "window_index", "start_index",
        "end_index", "ts", "n", "metrics": {name: value}}``, or None when they are not known.
    """

    alarm: Alarm
    traces: dict[str, list[TracePoint]]
    window: tuple[int, int]
    performance: list[dict[str, Any]] | None = None
    acknowledged: str | None = field(default=None)

    @property
    def attribution(self) -> dict[str, Any] | None:
        value = self.alarm.evidence.get("attribution")
        return value if isinstance(value, dict) and value.get("features") else None

    @property
    def directions(self) -> list[dict[str, Any]] | None:
        value = self.alarm.evidence.get("density_ratio_directions")
        return value if isinstance(value, list) and value else None


def trace_window(alarm: Alarm) -> tuple[int, int]:
    """The event indexes ``[start, stop)`` a report shows: from before the changepoint estimate
    to after the alarm, padded by half the changepoint-to-alarm distance (at least
    :data:`MIN_PAD`).

    >>> from datetime import UTC, datetime
    >>> a = Alarm("s", "conditional", "concept_shift", "e-1", 1000, datetime.now(UTC), 700,
    ...           2e4, 1e4, "shiryaev_roberts")
    >>> trace_window(a)
    (400, 1301)
    """
    start = alarm.event_index
    if alarm.changepoint is not None and 0 <= alarm.changepoint <= alarm.event_index:
        start = alarm.changepoint
    pad = max(MIN_PAD, (alarm.event_index - start) // 2)
    return max(0, start - pad), alarm.event_index + pad + 1


def report_context(
    session: Session, alarm_id: str, performance: Sequence[Mapping[str, Any]] | None = None
) -> ReportContext:
    """Read an alarm and both detectors' traces around it from the database.

    ``performance`` is the stream's performance windows (the before/after comparison uses all
    of them, the figure those in the report's window); None reads the stream's stored ones
    (:func:`monitor.db.queries.performance_windows`, the latest 1000); malformed windows
    raise :class:`ValueError`.

    Raises
    ------
    AlarmNotFoundError
        No alarm has this id.
    """
    from monitor.db import queries
    from monitor.db.errors import AlarmNotFoundError

    row = queries.get_alarm(session, alarm_id)
    if row is None:
        raise AlarmNotFoundError(f"no alarm with id {alarm_id!r}")
    alarm = row.to_record()
    start, stop = trace_window(alarm)
    query = queries.traces_query(alarm.stream, since_index=start, until_index=stop)
    traces: dict[str, list[TracePoint]] = {d: [] for d in DETECTORS}
    for point in session.scalars(query):
        traces.setdefault(point.detector, []).append(point.to_record())
    if performance is None:  # the stored ones; None when the stream has none
        performance = queries.performance_windows(session, alarm.stream, limit=1000) or None
    windows = None if performance is None else check_performance(performance)
    ack = None
    if row.acknowledged_at is not None:
        ack = f"{iso(row.acknowledged_at)} by {row.acknowledged_by}"
    return ReportContext(alarm, traces, (start, stop), windows, ack)


def check_performance(windows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The performance windows as plain dicts, checked (a clear :class:`ValueError` if not)."""
    out = []
    for i, window in enumerate(windows):
        missing = [k for k in _PERFORMANCE_KEYS if k not in window]
        if missing:
            raise ValueError(f"performance window {i} lacks {missing}")
        metrics = window["metrics"]
        if not isinstance(metrics, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values()
        ):
            raise ValueError(f"performance window {i}: 'metrics' must map names to numbers")
        out.append({**window, "metrics": dict(metrics)})
    return out


def write_report(context: ReportContext, path: str | Path) -> Path:
    """Write the report as HTML (``.html``/``.htm``) or PNG (``.png``); returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        path.write_text(render_html(context), encoding="utf-8")
    elif suffix == ".png":
        path.write_bytes(render_png(context))
    else:
        raise ValueError(f"report file must end in .html or .png, got {path.name!r}")
    return path


# -- HTML -----------------------------------------------------------------------------------------


def render_html(context: ReportContext) -> str:
    """One self-contained HTML page (inline CSS and SVG; no script, no external resource).

    The page depends on ``context`` alone (a fixed SVG salt, no date), so the last pages are
    kept by a digest of the context: an alarm's report asked for again renders once.
    """
    key = hashlib.sha256(repr(context).encode()).digest()
    with _PAGES_LOCK:
        page = _PAGES.get(key)
        if page is not None:
            _PAGES.move_to_end(key)
            return page
    page = _render_html(context)
    with _PAGES_LOCK:
        _PAGES[key] = page
        while len(_PAGES) > _MAX_PAGES:
            _PAGES.popitem(last=False)
    return page


#: Rendered pages by context digest, least recently used first (a page is ~100 kB).
_PAGES: OrderedDict[bytes, str] = OrderedDict()
_PAGES_LOCK = threading.Lock()
_MAX_PAGES = 32


def _render_html(context: ReportContext) -> str:
    alarm = context.alarm
    sections = [
        _summary_section(context),
        _figure_section("Martingale traces around the alarm", _trace_figure(context),
                        _TRACE_CAPTION),
        _evidence_section(alarm.evidence),
    ]
    if context.attribution is not None:
        sections.append(_attribution_section(context.attribution))
    if context.directions is not None:
        sections.append(_directions_section(context.directions))
    if context.performance:
        sections.append(_performance_section(context))
    title = f"Alarm {alarm.id}: {alarm.kind.replace('_', ' ')} on {alarm.stream}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{_e(title)}</h1>\n" + "\n".join(sections) + "\n</body>\n</html>\n"
    )


_CSS = (
    "body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
    "color:#1b1b1b}h1{font-size:1.45em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px "
    "solid #ddd}table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;border-"
    "bottom:1px solid #eee;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-"
    "nums}.kind{display:inline-block;padding:.1em .6em;border-radius:.8em;color:#fff;"
    "background:#b3261e}.kind.benign_covariate_shift{background:#4f6b8a}.kind."
    "extreme_covariate_shift{background:#b36b00}figure{margin:1em 0}figure svg{max-width:100%;"
    "height:auto}figcaption{color:#555;font-size:.9em}"
)

_TRACE_CAPTION = (
    "log₁₀ of each detector's alarm statistic and test martingale; dashed: the alarm threshold; "
    "red line: the alarm; purple dotted line: the changepoint estimate. Gaps: the detector was "
    "re-baselining after an alarm."
)


def _summary_section(context: ReportContext) -> str:
    a = context.alarm
    changepoint = "unknown" if a.changepoint is None else (
        f"event index {a.changepoint} ({a.event_index - a.changepoint} events before the alarm)")
    rows = [
        ("stream", _e(a.stream)),
        ("detector", _e(a.detector)),
        ("diagnosis", f'<span class="kind {_e(a.kind)}">{_e(a.kind)}</span>'),
        ("raised at", f"event {_e(a.event_id)} (index {a.event_index}), {iso(a.ts)}"),
        ("changepoint estimate", changepoint),
        ("rule", _e(a.rule)),
        ("statistic ≥ threshold", f"{_num(a.statistic)} ≥ {_num(a.threshold)}"),
        ("acknowledged", _e(context.acknowledged or "no")),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    meaning = KIND_MEANING.get(a.kind, "")
    return (f"<section id=\"diagnosis\"><h2>Diagnosis</h2><table>{body}</table>"
            f"<p>{_e(meaning)}</p></section>")


def _evidence_section(evidence: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{_e(k)}</th><td class=\"n\">{_e(_value(v))}</td></tr>"
        for k, v in sorted(evidence.items()) if not isinstance(v, dict | list)
    )
    return f"<section id=\"evidence\"><h2>Evidence</h2><table>{rows}</table></section>"


def _attribution_section(attribution: Mapping[str, Any]) -> str:
    window = attribution.get("window") or {}
    features = _ranked(attribution["features"])
    rows = "".join(
        f"<tr><td>{_e(str(f.get('feature')))}</td><td class=\"n\">{_num(f.get('statistic'))}"
        f"</td><td class=\"n\">{_num(f.get('p_value'))}</td><td class=\"n\">"
        f"{_num(f.get('p_adjusted'))}</td></tr>" for f in features
    )
    head = (f"<p>Method: {_e(str(attribution.get('method', '?')))}; guarantee: "
            f"{_e(str(attribution.get('guarantee', '?')))}; window: events "
            f"{_e(str(window.get('start_index', '?')))}–{_e(str(window.get('end_index', '?')))} "
            f"(n = {_e(str(window.get('n', '?')))}).</p>")
    table = ("<table><tr><th>feature</th><th>statistic</th><th>p-value</th>"
             f"<th>adjusted p-value</th></tr>{rows}</table>")
    figure = _figure_section("", _attribution_figure(features),
                             "−log₁₀ adjusted p-value per feature; dashed: p = 0.05.")
    return (f"<section id=\"attribution\"><h2>Feature attribution</h2>{head}{figure}{table}"
            "</section>")


def _directions_section(directions: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{_e(str(d.get('feature')))}</td><td class=\"n\">"
                   f"{_num(d.get('weight'))}</td></tr>" for d in directions)
    return ("<section id=\"directions\"><h2>Density-ratio directions</h2><p>Coefficients of the "
            "online density-ratio estimate w(x): the directions in which the new inputs differ "
            "from the reference.</p><table><tr><th>feature</th><th>weight</th></tr>"
            f"{rows}</table></section>")


def _performance_section(context: ReportContext) -> str:
    before, after = _before_after(context)
    names = sorted({m for w in context.performance or () for m in w["metrics"]})
    rows = "".join(
        f"<tr><th>{_e(m)}</th><td class=\"n\">{_num(_mean(before, m))}</td>"
        f"<td class=\"n\">{_num(_mean(after, m))}</td></tr>" for m in names
    )
    n_before, n_after = sum(w["n"] for w in before), sum(w["n"] for w in after)
    table = (f"<table><tr><th>metric</th><th>before (n = {n_before})</th>"
             f"<th>after (n = {n_after})</th></tr>{rows}</table>")
    figure = _figure_section("", _performance_figure(context, names),
                             "Each metric per window; red line: the alarm; purple dotted: the "
                             "changepoint estimate.")
    return (f"<section id=\"performance\"><h2>Performance before and after</h2><p>The "
            "performance windows of the span shown that end before the changepoint estimate vs "
            f"those that start at or after it (n-weighted means).</p>{table}{figure}</section>")


def _figure_section(title: str, figure: Figure, caption: str) -> str:
    heading = f"<h2>{_e(title)}</h2>" if title else ""
    return f"{heading}<figure>{_svg(figure)}<figcaption>{_e(caption)}</figcaption></figure>"


def _before_after(context: ReportContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The performance windows inside the report's span that end before the changepoint
    estimate (the alarm when there is none), and those that start at or after it."""
    a = context.alarm
    cut = a.changepoint if a.changepoint is not None else a.event_index
    start, stop = context.window
    shown = [w for w in context.performance or ()
             if w["start_index"] >= start and w["end_index"] < stop]
    return ([w for w in shown if w["end_index"] < cut],
            [w for w in shown if w["start_index"] >= cut])


def _mean(windows: Sequence[Mapping[str, Any]], metric: str) -> float:
    pairs = [(w["metrics"][metric], w["n"]) for w in windows if metric in w["metrics"]]
    total = sum(n for _, n in pairs)
    return math.fsum(v * n for v, n in pairs) / total if total else math.nan


def _ranked(features: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    def key(f: Mapping[str, Any]) -> float:
        p = f.get("p_adjusted")
        return p if isinstance(p, int | float) and not math.isnan(p) else math.inf

    return sorted(features, key=key)


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "–" if value is None else _e(str(value))
    if isinstance(value, int):
        return str(value)
    return "–" if math.isnan(value) else f"{value:.4g}"


def _value(value: Any) -> str:
    return _num(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else str(value)


# -- figures --------------------------------------------------------------------------------------


def _new_figure(width: float, height: float, rows: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    # Constrained layout keeps the labels and the legends outside the axes inside the figure.
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def _svg(fig: Figure) -> str:
    import matplotlib

    buffer = io.StringIO()
    # A fixed salt: the same report renders to the same bytes.
    with matplotlib.rc_context({"svg.hashsalt": "monitor-report", "svg.fonttype": "path"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _trace_figure(context: ReportContext) -> Figure:
    fig, axes = _new_figure(11, 6, rows=2)
    for ax, detector in zip(axes, DETECTORS, strict=True):
        _draw_trace(ax, context, detector)
    return fig


def _draw_trace(ax: Axes, context: ReportContext, detector: str) -> None:
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
    if detector == DETECTORS[-1]:
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


def _attribution_figure(features: Sequence[Mapping[str, Any]]) -> Figure:
    fig, (ax,) = _new_figure(8, 0.9 + 0.3 * len(features))
    _draw_attribution(ax, features)
    return fig


def _draw_attribution(ax: Axes, features: Sequence[Mapping[str, Any]]) -> None:
    names = [str(f.get("feature")) for f in features][::-1]
    values = []
    for f in features[::-1]:
        p = f.get("p_adjusted")
        known = isinstance(p, int | float) and not math.isnan(p)
        values.append(-math.log10(max(p, 1e-300)) if isinstance(p, int | float) and known
                      else 0.0)
    ax.barh(names, values, color="tab:blue")
    ax.axvline(-math.log10(0.05), color="k", ls="--", lw=0.8)
    ax.set_xlabel("−log₁₀ adjusted p-value")


def _performance_figure(context: ReportContext, names: Sequence[str]) -> Figure:
    shown = list(names)[:4]
    fig, axes = _new_figure(11, 1.0 + 1.8 * len(shown), rows=len(shown))
    for ax, name in zip(axes, shown, strict=True):
        _draw_performance(ax, context, name)
    axes[-1].set_xlabel("event index (window end)")
    return fig


def _draw_performance(ax: Axes, context: ReportContext, metric: str) -> None:
    start, stop = context.window
    windows = [w for w in context.performance or ()
               if metric in w["metrics"] and start <= w["end_index"] < stop]
    ax.plot([w["end_index"] for w in windows], [w["metrics"][metric] for w in windows],
            marker="o", ms=3, lw=1.0, color="tab:green")
    _mark_alarm(ax, context.alarm)
    ax.set_xlim(*context.window)
    ax.set_ylabel(metric)


def render_png(context: ReportContext) -> bytes:
    """The report as one PNG image: the traces, attribution and performance figures stacked,
    under a title that names the diagnosis and the evidence of the alarm."""
    attribution = context.attribution
    metrics = sorted({m for w in context.performance or () for m in w["metrics"]})[:2]
    rows = 2 + (attribution is not None) + len(metrics)
    fig, axes = _new_figure(11, 2.6 * rows + 1.0, rows=rows)
    for ax, detector in zip(axes, DETECTORS, strict=False):
        _draw_trace(ax, context, detector)
    rest = axes[2:]
    if attribution is not None:
        _draw_attribution(rest[0], _ranked(attribution["features"]))
        rest = rest[1:]
    for ax, name in zip(rest, metrics, strict=True):
        _draw_performance(ax, context, name)
    a = context.alarm
    fig.suptitle(
        f"{a.kind.replace('_', ' ')} on {a.stream} ({a.detector} monitor) at event "
        f"{a.event_index}; changepoint {a.changepoint}; {a.rule} statistic "
        f"{_num(a.statistic)} ≥ {_num(a.threshold)}", fontsize=10)
    numbers = [f"{k} = {_value(v)}" for k, v in sorted(a.evidence.items())
               if not isinstance(v, dict | list)]
    fig.supxlabel("evidence: " + "; ".join(numbers), fontsize=8, wrap=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
