"""Stream monitors from configuration files or from a registered stream's stored rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from monitor.errors import MonitorError
from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import ConfigError, StreamConfig, load_stream_config
from monitor.streams.monitor import FeatureOrderError, StreamMonitor

if TYPE_CHECKING:
    from monitor.db.store import StoredStream


class RunError(MonitorError):
    """A run that cannot start (bad configuration, calibration or source); message says why."""


def load_calibration(config: StreamConfig) -> Calibration:
    """The calibration data named by (or embedded in) a stream configuration."""
    try:
        if isinstance(config.calibration, str):
            return Calibration.from_jsonl(config.calibration, **config.schema_options)
        return Calibration.from_rows(config.calibration, **config.schema_options)
    except CalibrationError as exc:
        raise RunError(f"stream {config.name!r}: {exc}") from None


def stored_calibration(stored: StoredStream) -> Calibration:
    """A registered stream's calibration, its features in the stored order.

    Raises :class:`FeatureOrderError` for object features whose order is not stored (an upgrade
    could not recover it: migration 0017)."""
    # the feature schema follows the version's declaration and seed (docs/tabular.md)
    options = StreamConfig.model_validate(stored.config).schema_options
    calibration = Calibration.from_rows(stored.calibration, stored.feature_names, **options)
    if calibration.feature_names is not None and stored.feature_names is None:
        name = stored.config.get("name")
        raise FeatureOrderError(
            f"stream {name!r}: the order of its features was not recovered by the database "
            "upgrade (its checkpoint names other features, or none); the stream is stopped. "
            "Fix: `monitor streams update CONFIG.yaml` stores the order, then replay its dead "
            "letters (`monitor dead-letters replay --stream NAME`)"
        )
    return calibration


def build_monitors(
    configs: Iterable[StreamConfig], calibrations: Mapping[str, Calibration] | None = None
) -> dict[str, StreamMonitor]:
    """Stream monitors by name; calibration is loaded from each configuration unless given."""
    monitors = {}
    for config in configs:
        calibration = (calibrations or {}).get(config.name) or load_calibration(config)
        try:
            monitors[config.name] = StreamMonitor(config, calibration)
        except (CalibrationError, ValueError) as exc:
            raise RunError(f"stream {config.name!r}: {exc}") from None
    return monitors


def read_configs(paths: Iterable[str]) -> list[StreamConfig]:
    try:
        return [load_stream_config(p) for p in paths]
    except ConfigError as exc:
        raise RunError(str(exc)) from None
