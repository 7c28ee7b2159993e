"""The report as one self-contained HTML page: inline CSS and SVG figures, no script, no
external resource, so it opens anywhere, offline, and can be mailed."""

from __future__ import annotations

import hashlib
import html
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from monitor.alerts.payloads import evidence_summary, percent
from monitor.ops.report import figures
from monitor.ops.report.context import (
    AROUND,
    ReportContext,
    adjusted_p,
    frequencies,
    ranked,
)
from monitor.ops.report.meanings import evidence_meaning
from monitor.streams.records import iso

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: What each kind means, for the reader of the report (docs/detectors.md "Diagnosis",
#: docs/alerts.md for the data-quality and schema kinds).
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
    "data_quality": (
        "The data quality of the features below fell: their rate of missing values, of "
        "categories the calibration never had, or of values outside the calibration range "
        "rose above the calibration's. The model sees imputed or unknown inputs there; look "
        "at what produces these features."
    ),
    "schema_change": (
        "The events no longer have the calibration's schema: a key the calibration never had "
        "arrived (it is not monitored), or a declared feature is absent from the events "
        "(monitored as missing). Fix the producer or update the stream's configuration."
    ),
}


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
        _figure_section("Martingale traces around the alarm", figures.trace_figure(context),
                        _TRACE_CAPTION),
    ]
    if context.indicators is not None:
        sections.append(_quality_section(context.indicators, alarm.changepoint))
    if context.schema_change is not None:
        sections.append(_schema_section(context.schema_change))
    sections.append(_evidence_section(alarm.evidence))
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
    "solid #ddd}h3{font-size:1em}table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em"
    " .8em;border-bottom:1px solid #eee;text-align:left}td.n{text-align:right;font-variant-"
    "numeric:tabular-nums}.kind{display:inline-block;padding:.1em .6em;border-radius:.8em;color:"
    "#fff;background:#b3261e}.kind.benign_covariate_shift{background:#4f6b8a}.kind."
    "extreme_covariate_shift,.kind.data_quality,.kind.schema_change{background:#b36b00}"
    "figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{color:#555;"
    "font-size:.9em}td.meaning{color:#444;font-size:.92em}"
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
    what = evidence_summary(a)
    rows = [
        ("stream", _e(a.stream)),
        ("detector", _e(a.detector)),
        ("diagnosis", f'<span class="kind {_e(a.kind)}">{_e(a.kind)}</span>'),
        *([("what changed", _e(what))] if what else []),
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


def _quality_section(indicators: Sequence[Mapping[str, Any]], changepoint: int | None) -> str:
    rows = "".join(
        f"<tr><td>{_e(str(i.get('feature')))}</td><td>{_e(str(i.get('rate')))}</td>"
        f"<td class=\"n\">{_e(percent(i.get('calibration_rate')))}</td><td class=\"n\">"
        f"{_e(percent(i.get('rate_after')))}</td><td class=\"n\">{_num(i.get('log_e'))}</td>"
        "</tr>" for i in indicators
    )
    since = "the changepoint estimate" if changepoint is None else f"event {changepoint}"
    table = ("<table><tr><th>feature</th><th>rate</th><th>calibration</th>"
             f"<th>since {_e(since)}</th><th>ln e-value</th></tr>{rows}</table>")
    figure = _figure_section("", figures.paired_bars_figure(
        *figures.indicator_bars(indicators), "rate (%)", f"since {since}"),
        f"Each indicator's rate in the calibration and since {since}.")
    return ("<section id=\"quality\"><h2>Data quality</h2><p>Per feature, the share of events "
            "with a missing value, a category the calibration never had (unseen) or a value "
            "outside the calibration range, against the calibration's share; ln e-value: "
            f"the evidence of its test.</p>{table}{figure}</section>")


def _schema_section(evidence: Mapping[str, Any]) -> str:
    change = {"new_key": "a key the calibration never had",
              "absent_feature": "a declared feature absent from the events"}
    rows = [
        ("change", _e(change.get(str(evidence.get("change")), str(evidence.get("change"))))),
        ("key", f"<code>{_e(str(evidence.get('key')))}</code>"),
        ("first event index", _num(evidence.get("first_event_index"))),
        ("events", _num(evidence.get("events"))),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<section id=\"schema\"><h2>Schema change</h2><table>{body}</table></section>"


def _evidence_section(evidence: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{_e(k)}</th><td class=\"n\">{_e(figures.value_text(v))}</td>"
        f"<td class=\"meaning\">{_e(evidence_meaning(k))}</td></tr>"
        for k, v in sorted(evidence.items()) if not isinstance(v, dict | list)
    )
    return ("<section id=\"evidence\"><h2>Evidence</h2><table><tr><th>field</th><th>value</th>"
            f"<th>meaning</th></tr>{rows}</table></section>")


def _attribution_section(attribution: Mapping[str, Any]) -> str:
    window = attribution.get("window") or {}
    features = ranked(attribution["features"])
    typed = any("type" in f or "test" in f for f in features)  # plain streams: today's table
    head = (f"<p>Method: {_e(str(attribution.get('method', '?')))}; guarantee: "
            f"{_e(str(attribution.get('guarantee', '?')))}; window: events "
            f"{_e(str(window.get('start_index', '?')))}–{_e(str(window.get('end_index', '?')))} "
            f"(n = {_e(str(window.get('n', '?')))}).</p>")
    columns = ["feature", *(["type", "test"] if typed else []), "statistic", "p-value",
               "adjusted p-value"]
    table = ("<table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
             + "".join(_attribution_row(f, typed) for f in features) + "</table>")
    figure = _figure_section("", figures.attribution_figure(features),
                             "−log₁₀ adjusted p-value per feature; dashed: p = 0.05.")
    counted = "".join(_frequencies(f) for f in figures.categorical(features))
    return (f"<section id=\"attribution\"><h2>Feature attribution</h2>{head}{figure}{table}"
            f"{counted}</section>")


def _attribution_row(f: Mapping[str, Any], typed: bool) -> str:
    kind = (f"<td>{_e(str(f.get('type', '–')))}</td><td>{_e(str(f.get('test', '–')))}</td>"
            if typed else "")
    return (f"<tr><td>{_e(str(f.get('feature')))}</td>{kind}<td class=\"n\">"
            f"{_num(f.get('statistic'))}</td><td class=\"n\">{_num(f.get('p_value'))}</td>"
            f"<td class=\"n\">{_num(adjusted_p(f))}</td></tr>")


def _frequencies(feature: Mapping[str, Any]) -> str:
    """A categorical feature's category shares in the calibration and in the window."""
    before, after = frequencies(feature) or ({}, {})
    name = str(feature.get("feature"))
    rows = "".join(f"<tr><td>{_e(c)}</td><td class=\"n\">{_e(percent(before[c]))}</td>"
                   f"<td class=\"n\">{_e(percent(after[c]))}</td></tr>" for c in before)
    figure = _figure_section("", figures.paired_bars_figure(
        list(before), list(before.values()), list(after.values()), "share",
        "attribution window"),
        f"Share of each category of {name}: calibration vs the attribution window.")
    return (f"<h3>{_e(name)}: categories before and after</h3><table><tr><th>category</th>"
            f"<th>calibration</th><th>window</th></tr>{rows}</table>{figure}")


def _directions_section(directions: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{_e(str(d.get('feature')))}</td><td class=\"n\">"
                   f"{_num(d.get('weight'))}</td></tr>" for d in directions)
    return ("<section id=\"directions\"><h2>Density-ratio directions</h2><p>Coefficients of the "
            "online density-ratio estimate w(x): the directions in which the new inputs differ "
            "from the reference.</p><table><tr><th>feature</th><th>weight</th></tr>"
            f"{rows}</table></section>")


def _performance_section(context: ReportContext) -> str:
    before, after = context.before_after
    head = "<section id=\"performance\"><h2>Performance before and after</h2>"
    if not before or not after:
        return (f"{head}<p>Too few labels around the changepoint estimate (event {context.cut}) "
                f"to compare the model's performance: {_windows(before)} end before it and "
                f"{_windows(after)} start after it (a performance window is the stream's "
                "<code>performance.window</code> labels; a smaller one gives more).</p></section>")
    names = sorted({m for w in before + after for m in w["metrics"]})
    rows = "".join(
        f"<tr><th>{_e(m)}</th><td class=\"n\">{_num(_mean(before, m))}</td>"
        f"<td class=\"n\">{_num(_mean(after, m))}</td></tr>" for m in names
    )
    table = (f"<table><tr><th>metric</th><th>{_span('before', before)}</th>"
             f"<th>{_span('after', after)}</th></tr>{rows}</table>")
    figure = _figure_section("", figures.performance_figure(context, names),
                             "Each metric per window; red line: the alarm; purple dotted: the "
                             "changepoint estimate.")
    return (f"{head}<p>The {AROUND} labelled windows nearest the changepoint estimate (event "
            f"{context.cut}) that end before it vs the {AROUND} nearest that start at or after "
            "it (n-weighted means of n labelled predictions; a window across the changepoint is "
            f"in neither).</p>{table}{figure}</section>")


def _span(side: str, windows: Sequence[Mapping[str, Any]]) -> str:
    n = sum(w["n"] for w in windows)
    return (f"{side} (n = {n}; events {windows[0]['start_index']}–"
            f"{windows[-1]['end_index']})")


def _windows(windows: Sequence[Mapping[str, Any]]) -> str:
    n = sum(w["n"] for w in windows)
    count = len(windows)
    return f"{count} window{'s' if count != 1 else ''} ({n} labels)"


def _figure_section(title: str, figure: Figure, caption: str) -> str:
    heading = f"<h2>{_e(title)}</h2>" if title else ""
    return (f"{heading}<figure>{figures.svg(figure)}<figcaption>{_e(caption)}</figcaption>"
            "</figure>")


def _mean(windows: Sequence[Mapping[str, Any]], metric: str) -> float:
    pairs = [(w["metrics"][metric], w["n"]) for w in windows if metric in w["metrics"]]
    total = sum(n for _, n in pairs)
    return math.fsum(v * n for v, n in pairs) / total if total else math.nan


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _num(value: Any) -> str:
    return _e(figures.number_text(value))
