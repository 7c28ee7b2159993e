"""The HTTP API (FastAPI): alarms, streams, traces, OOD windows, batch ingest, health, metrics.

Build it with :func:`create_app` from one :class:`~monitor.settings.Settings`; ``monitor serve``
runs it under uvicorn. See docs/api.md.
"""

from monitor.api.app import create_app

__all__ = ["create_app"]
