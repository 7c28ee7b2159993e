"""TEMPORARY: stand-ins for pieces other engineers are still writing (removed before handover)."""

import sys
import types

from pydantic import create_model

import monitor.settings

try:
    import monitor.wiring
except ImportError:
    stub = types.ModuleType("monitor.wiring")
    stub.build_detectors = stub.build_ood = stub.conditional_score = None  # type: ignore[attr-defined]
    sys.modules["monitor.wiring"] = stub

_FIELDS = {
    "webhook_urls": (str, ""),
    "webhook_secret": (str, ""),
    "max_body_bytes": (int, 10_000_000),
    "max_event_bytes": (int, 262_144),
    "batch_size": (int, 500),
}
_missing = {k: v for k, v in _FIELDS.items() if k not in monitor.settings.Settings.model_fields}
if _missing:
    monitor.settings.Settings = create_model(  # type: ignore[misc]
        "Settings", __base__=monitor.settings.Settings, **_missing
    )
