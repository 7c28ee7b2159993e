"""Which alarms go to which receivers: the alert routing configuration.

A routing file (YAML or JSON, ``--alerts FILE`` / ``MONITOR_ALERTS_FILE``) names receivers and
routes; an alarm goes to the receivers of every route it matches, each receiver once::

    receivers:
      - {name: oncall, type: webhook, url: "https://hooks.example/monitor"}
      - {name: ml-team, type: slack, url: "https://hooks.slack.com/services/T0/B0/XYZ"}
      - {name: am, type: alertmanager, url: "http://alertmanager:9093/api/v2/alerts"}
      - {name: data-eng, type: slack, url: "https://hooks.slack.com/services/T0/B1/UVW"}
    routes:
      - {receivers: [oncall], min_severity: critical}
      - {receivers: [ml-team], streams: ["fraud-*", bikes], kinds: [concept_shift]}
      - {receivers: [data-eng], kinds: [data_quality, schema_change]}
      - {receivers: [am]}
    delivery: {max_attempts: 8, backoff_seconds: 1, max_backoff_seconds: 300}
    generator_url: "http://monitor.internal:8000"

A route matches an alarm when its stream matches one of ``streams`` (names or shell-style globs;
all streams if absent), its kind is one of ``kinds`` (all kinds if absent) and its severity
(:data:`SEVERITY_OF_KIND`) is at least ``min_severity`` (``info`` if absent). The URLs of
``MONITOR_WEBHOOK_URLS`` are added as ``webhook`` receivers named ``webhook-1``, ``webhook-2``, ...
with a route that matches every alarm.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from monitor.errors import MonitorError
from monitor.settings import Settings
from monitor.streams.records import ALARM_KINDS, Alarm

__all__ = [
    "SEVERITY_OF_KIND",
    "AlertRouting",
    "AlertRoutingError",
    "Delivery",
    "Receiver",
    "Route",
    "Severity",
    "load_alert_routing",
    "routing_from_settings",
    "webhook_urls",
]

log = logging.getLogger(__name__)


class AlertRoutingError(MonitorError, ValueError):
    """A routing configuration that cannot be used; the message says where and why."""


class Severity(enum.IntEnum):
    """How urgent an alarm is; routes select a minimum."""

    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


#: The severity of each alarm kind. A concept shift means the model's predictions no longer hold
#: (act now); an extreme covariate shift puts inputs outside the calibration support, where the
#: model extrapolates (look soon); a benign covariate shift moves inputs within the support, where
#: the model is still valid (for the record). An alarm raised before its diagnosis has enough
#: evidence (``insufficient_evidence``) is a warning; its revision carries the decided kind's
#: severity and is routed again. A ``data_quality`` alarm (a feature's missing, unseen-category
#: or out-of-range rate rose above its calibration rate) and a ``schema_change`` alarm (a new
#: key, or a declared feature absent) are warnings: the inputs the model sees are degraded or
#: not what it was built for, but whether its predictions suffer is the other monitors' call.
SEVERITY_OF_KIND: dict[str, Severity] = {
    "concept_shift": Severity.CRITICAL,
    "extreme_covariate_shift": Severity.WARNING,
    "benign_covariate_shift": Severity.INFO,
    "insufficient_evidence": Severity.WARNING,
    "data_quality": Severity.WARNING,
    "schema_change": Severity.WARNING,
}

ReceiverType = Literal["webhook", "slack", "alertmanager"]
SeverityName = Literal["info", "warning", "critical"]
#: A receiver's name: what the API and the metrics show.
RECEIVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class Receiver(BaseModel):
    """Where alarms are POSTed, and in which format (:mod:`monitor.alerts.payloads`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=RECEIVER_NAME_PATTERN)
    type: ReceiverType
    url: str

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {value!r}")
        return value


class Route(BaseModel):
    """Alarms of these streams, kinds and severities go to these receivers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    receivers: tuple[str, ...] = Field(min_length=1)
    streams: tuple[str, ...] | None = Field(default=None, min_length=1)
    kinds: tuple[str, ...] | None = Field(default=None, min_length=1)
    min_severity: SeverityName = "info"

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        unknown = sorted(set(value or ()) - set(ALARM_KINDS))
        if unknown:
            raise ValueError(f"unknown alarm kind(s) {unknown}; valid kinds: {list(ALARM_KINDS)}")
        return value

    def matches(self, alarm: Alarm) -> bool:
        if self.streams is not None and not any(fnmatchcase(alarm.stream, p) for p in self.streams):
            return False
        if self.kinds is not None and alarm.kind not in self.kinds:
            return False
        return severity(alarm) >= Severity[self.min_severity.upper()]


class Delivery(BaseModel):
    """Retries: after failed attempt ``n`` wait ``backoff_seconds * 2**(n-1)`` (at most
    ``max_backoff_seconds``) scaled by a random factor in [1/2, 1]; ``max_attempts`` in all.
    A delivery whose process died during its attempt is taken again ``claim_lease_seconds``
    after the attempt started (default: ``timeout_seconds + 30``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=8, ge=1, le=100)
    backoff_seconds: float = Field(default=1.0, ge=0)
    max_backoff_seconds: float = Field(default=300.0, ge=0)
    timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    claim_lease_seconds: float | None = Field(default=None, gt=0, le=3600)

    @model_validator(mode="after")
    def _lease_outlasts_a_request(self) -> Delivery:
        lease = self.claim_lease_seconds
        if lease is not None and lease <= self.timeout_seconds:
            raise ValueError("claim_lease_seconds must be longer than timeout_seconds, or a "
                             "slow answer would be attempted twice at once")
        return self

    @property
    def lease_seconds(self) -> float:
        lease = self.claim_lease_seconds
        return self.timeout_seconds + 30.0 if lease is None else lease


class AlertRouting(BaseModel):
    """Receivers, routes and delivery settings (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    receivers: tuple[Receiver, ...] = Field(min_length=1)
    routes: tuple[Route, ...] = Field(min_length=1)
    delivery: Delivery = Delivery()
    #: Base URL of this service's API; Alertmanager alerts link to ``{generator_url}/alarms/{id}``.
    generator_url: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AlertRouting:
        names = [r.name for r in self.receivers]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"receiver names must be unique; repeated: {repeated}")
        for i, route in enumerate(self.routes):
            unknown = sorted(set(route.receivers) - set(names))
            if unknown:
                raise ValueError(f"routes[{i}] names unknown receiver(s) {unknown}; "
                                 f"receivers: {names}")
        return self

    def receivers_of(self, alarm: Alarm) -> list[Receiver]:
        """The receivers of every route ``alarm`` matches, each once, in configuration order."""
        wanted = {name for route in self.routes if route.matches(alarm) for name in route.receivers}
        return [r for r in self.receivers if r.name in wanted]

    def with_webhook_urls(self, urls: Sequence[str]) -> AlertRouting:
        """These routes plus a catch-all ``webhook`` receiver per URL (``MONITOR_WEBHOOK_URLS``)."""
        if not urls:
            return self
        extra = legacy_receivers(urls)
        return AlertRouting(
            receivers=(*self.receivers, *extra),
            routes=(*self.routes, Route(receivers=tuple(r.name for r in extra))),
            delivery=self.delivery,
            generator_url=self.generator_url,
        )


def severity(alarm: Alarm) -> Severity:
    """The alarm's severity (:data:`SEVERITY_OF_KIND`; an unknown kind is ``critical``)."""
    return SEVERITY_OF_KIND.get(alarm.kind, Severity.CRITICAL)


def legacy_receivers(urls: Iterable[str]) -> tuple[Receiver, ...]:
    try:
        return tuple(
            Receiver(name=f"webhook-{i}", type="webhook", url=u) for i, u in enumerate(urls, 1)
        )
    except ValidationError as exc:
        raise AlertRoutingError(f"MONITOR_WEBHOOK_URLS: {_first_error(exc)}") from None


def parse_alert_routing(data: Any, where: str = "alert routing") -> AlertRouting:
    """Validate decoded YAML/JSON; :class:`AlertRoutingError` names the first bad field."""
    try:
        return AlertRouting.model_validate(data)
    except ValidationError as exc:
        raise AlertRoutingError(f"{where}: {_first_error(exc)}") from None


def load_alert_routing(path: str | None, webhook_urls: Sequence[str] = ()) -> AlertRouting | None:
    """The routing of a YAML/JSON file plus the catch-all ``webhook_urls``; None if neither is
    given.

    Examples
    --------
    >>> routing = load_alert_routing(None, ["http://127.0.0.1:9/hook"])
    >>> [(r.name, r.type) for r in routing.receivers]
    [('webhook-1', 'webhook')]
    >>> load_alert_routing(None) is None
    True
    """
    if not path:
        if not webhook_urls:
            return None
        receivers = legacy_receivers(webhook_urls)
        return AlertRouting(receivers=receivers,
                            routes=(Route(receivers=tuple(r.name for r in receivers)),))
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AlertRoutingError(f"cannot read alert routing file {path!r}: {exc}") from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise AlertRoutingError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'}"
                                f": {exc}") from None
    return parse_alert_routing(data, path).with_webhook_urls(webhook_urls)


def routing_from_settings(settings: Settings) -> AlertRouting | None:
    """The routing of ``settings.alerts_file`` and ``settings.webhook_urls`` (None: neither),
    shared by ``monitor run`` and the API app; warns when deliveries would go unsigned."""
    routing = load_alert_routing(settings.alerts_file, webhook_urls(settings.webhook_urls))
    if routing is not None and not settings.webhook_secret:
        log.warning("alert receivers are configured without MONITOR_WEBHOOK_SECRET: signatures "
                    "are computed with an empty key and prove nothing")
    return routing


def webhook_urls(value: str | Sequence[str] | None) -> list[str]:
    """URLs from a comma/space separated string or a list.

    Examples
    --------
    >>> webhook_urls("http://a/hook, http://b/hook")
    ['http://a/hook', 'http://b/hook']
    """
    if not value:
        return []
    items = re.split(r"[\s,]+", value) if isinstance(value, str) else list(value)
    return [u.strip() for u in items if u and u.strip()]


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{message}{more}"
