"""One router per resource; :func:`monitor.api.create_app` includes them all."""

from monitor.api.routes import alarms, events, fleets, health, metrics, streams

__all__ = ["alarms", "events", "fleets", "health", "metrics", "streams"]
