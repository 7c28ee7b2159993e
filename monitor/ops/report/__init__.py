"""The alarm report: one self-contained page explaining one alarm (``monitor report``).

:func:`report_context` gathers from the database what explains an alarm — the alarm with its
diagnosis and evidence, the detectors' martingale traces around it, and (given by the caller)
the model's performance windows — into a :class:`ReportContext`; :func:`render_html` turns it
into one HTML page with inline SVG figures and inline CSS (no script, no external resource, so it
opens anywhere, offline, and can be mailed), :func:`render_png` into one PNG image.

Sections render only when their data exists: data-quality indicators (a ``data_quality``
alarm's ``evidence["indicators"]``: each feature's rate in the calibration and since the
changepoint), the schema change (a ``schema_change`` alarm's key), feature attribution
(``evidence["attribution"]``, with each categorical feature's category frequencies before and
after), density-ratio directions (``evidence["density_ratio_directions"]``) and performance
before/after (the ``performance`` windows).

Modules: :mod:`~monitor.ops.report.context` (what a report shows, read from the database),
:mod:`~monitor.ops.report.html` (the page), :mod:`~monitor.ops.report.figures` (matplotlib
figures and the PNG).
"""

from __future__ import annotations

from pathlib import Path

from monitor.ops.report.context import (
    ReportContext,
    check_performance,
    report_context,
    trace_window,
)
from monitor.ops.report.figures import render_png
from monitor.ops.report.html import render_html

__all__ = [
    "ReportContext",
    "check_performance",
    "render_html",
    "render_png",
    "report_context",
    "trace_window",
    "write_report",
]


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
