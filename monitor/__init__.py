"""Online ML monitoring with anytime-valid sequential tests.

Weighted conformal test martingales (WATCH) with CUSUM / Shiryaev–Roberts / Ville alarms, OOD
scorers with FDR-controlled decision rules, and a diagnosis of every alarm. See README.md.

The notebook API (docs/python.md) is here at the top level: :func:`watch` returns a
:class:`NotebookMonitor`. These names load on first use, so ``import monitor`` (and the
``monitor`` command's ``--help``) does not import numpy, scipy or SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from monitor._version import __version__

if TYPE_CHECKING:
    from monitor.notebook import NotebookMonitor, Trace, watch

__all__ = ["NotebookMonitor", "StreamFiles", "Trace", "__version__", "stream_from", "to_events",
           "watch"]

#: Top-level name → the module that defines it (imported on first access).
_LAZY = {"watch": "monitor.notebook", "NotebookMonitor": "monitor.notebook",
         "Trace": "monitor.notebook",
         **dict.fromkeys(("stream_from", "to_events", "StreamFiles"), "monitor.frontdoor")}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'monitor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
