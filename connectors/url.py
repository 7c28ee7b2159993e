"""Open a source from the ``--source`` URL of ``monitor run``."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from connectors.base import Source
from connectors.errors import SourceConfigError
from connectors.file import FileSource
from connectors.rdkafka import RdKafkaSource
from monitor.errors import missing_extra

if TYPE_CHECKING:
    from connectors.kafka import KafkaSource

__all__ = ["KAFKA_CLIENTS", "kafka_module", "kafka_url_parts", "open_source"]

#: The Kafka client libraries a ``kafka://`` source can read with, by the name that
#: ``?client=`` and ``MONITOR_KAFKA_CLIENT`` take.
KAFKA_CLIENTS = ("kafka-python", "confluent")

_FORMS = (
    "file:PATH (or file:///ABS/PATH) or kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC][?OPTION=VALUE&...]"
)


def open_source(
    url: str, group: str | None = None, kafka_client: str = "kafka-python", **options: Any
) -> Source:
    """Open the source a URL names.

    Parameters
    ----------
    url
        ``file:PATH`` (relative or absolute; ``file:///abs/path`` works too) or
        ``kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC][?OPTION=VALUE&...]``, where the query
        holds the source's options (see :func:`kafka_url_parts`): ``client=kafka-python`` or
        ``client=confluent`` (overrides ``kafka_client``), then, for kafka-python
        (:class:`connectors.KafkaSource`), consumer options such as ``session_timeout_ms=6000``
        or ``security_protocol=SSL``, for confluent (:class:`connectors.RdKafkaSource`),
        librdkafka properties such as ``session.timeout.ms=6000``. Both take
        ``start_timeout_s``, ``retry_backoff_s``, ``max_backoff_s`` and ``max_poll_errors``.
        ``memory:`` sources are built directly (:class:`connectors.MemorySource`).
    group
        Consumer group, required for Kafka, ignored for files.
    kafka_client
        The client library of a ``kafka://`` URL without ``client=`` (a name of
        :data:`KAFKA_CLIENTS`; ``monitor run`` passes ``MONITOR_KAFKA_CLIENT``).
    **options
        Keyword arguments of the source class (e.g. ``start_timeout_s`` or kafka-python
        consumer options for Kafka, ``max_line_bytes`` for files).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "events.jsonl"
    >>> _ = path.write_text('{"kind": "label"}\\n')
    >>> source = open_source(f"file:{path}")
    >>> source.name == f"file:{path.resolve()}"
    True
    >>> source.close()
    >>> open_source("kafka://localhost:9092/events")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    connectors.errors.SourceConfigError: kafka://localhost:9092/events needs a consumer group ...
    """
    scheme, sep, rest = url.partition(":")
    if scheme == "memory":
        raise SourceConfigError("memory sources are built in code: connectors.MemorySource(values)")
    if not sep or not rest:
        raise SourceConfigError(f"cannot read source {url!r}: expected {_FORMS}")
    if scheme == "file":
        return FileSource(_file_path(rest), **options)
    if scheme == "kafka":
        servers, topics, url_options = kafka_url_parts(url)
        if not group:
            raise SourceConfigError(f"{url} needs a consumer group (--group)")
        client = kafka_source_class(str(url_options.pop("client", kafka_client)),
                                    what=f"the source {url}")
        source: Source = client(servers, topics, group_id=group, **{**url_options, **options})
        return source
    raise SourceConfigError(f"unknown source scheme {scheme!r} in {url!r}: expected {_FORMS}")


def kafka_source_class(
    client: str, what: str = "a kafka-python source"
) -> type[KafkaSource] | type[RdKafkaSource]:
    """The source class of a Kafka client name (``kafka-python`` or ``confluent``); the
    kafka-python one is imported now (it needs the ``kafka`` extra, which ``what`` needs).

    Examples
    --------
    >>> kafka_source_class("confluent").__name__
    'RdKafkaSource'
    """
    if client == "confluent":
        return RdKafkaSource
    if client == "kafka-python":
        kafka_source: type[KafkaSource] = kafka_module(what).KafkaSource
        return kafka_source
    raise SourceConfigError(
        f"unknown Kafka client {client!r}: expected one of {', '.join(KAFKA_CLIENTS)}"
    )


def kafka_module(what: str) -> ModuleType:
    """:mod:`connectors.kafka`, imported now: kafka-python is the ``kafka`` extra, so the file and
    memory sources work without it. Without it, a :class:`~monitor.errors.MissingExtraError`
    says that ``what`` needs the extra."""
    try:
        return importlib.import_module("connectors.kafka")
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, what) or exc from None


def _file_path(rest: str) -> str:
    # file:///abs/path and file://localhost/abs/path are URLs; file:rel/path is a plain path.
    if rest.startswith("//"):
        host, _, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise SourceConfigError(f"file URLs name a local file, not host {host!r}")
        return unquote("/" + path)
    return rest


def kafka_url_parts(url: str) -> tuple[list[str], list[str], dict[str, Any]]:
    """Split ``kafka://HOST:PORT[,...]/TOPIC[,...][?OPTION=VALUE&...]`` into its parts.

    Option values are typed: ``true``/``false`` become booleans, integers and decimals become
    numbers, ``api_version=2.3`` becomes ``(2, 3)``; anything else stays a string. Names are
    kept as they are: kafka-python's (``session_timeout_ms``) or librdkafka's
    (``session.timeout.ms``), for the client the URL is read with.

    Examples
    --------
    >>> kafka_url_parts("kafka://k1:9092,k2:9092/bikes,taxis?session_timeout_ms=6000")
    (['k1:9092', 'k2:9092'], ['bikes', 'taxis'], {'session_timeout_ms': 6000})
    >>> kafka_url_parts("kafka://k1:9092/bikes?client=confluent&session.timeout.ms=6000")[2]
    {'client': 'confluent', 'session.timeout.ms': 6000}
    """
    scheme, _, rest = url.partition("://")
    if scheme != "kafka" or not rest:
        raise SourceConfigError(f"cannot read {url!r}: expected {_FORMS}")
    location, _, query = rest.partition("?")
    servers, _, topics = location.partition("/")
    server_list = [s for s in servers.split(",") if s]
    topic_list = [unquote(t) for t in topics.split(",") if t]
    if not server_list or not topic_list:
        raise SourceConfigError(f"{url!r} needs brokers and topics: {_FORMS}")
    for server in server_list:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise SourceConfigError(f"broker {server!r} in {url!r} is not HOST:PORT")
    options = {key: _typed(key, value) for key, value in parse_qsl(query, keep_blank_values=True)}
    return server_list, topic_list, options


def _typed(name: str, text: str) -> Any:
    if name == "api_version":
        try:
            return tuple(int(part) for part in text.split("."))
        except ValueError as exc:
            raise SourceConfigError(f"api_version must look like 2.3, got {text!r}") from exc
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
