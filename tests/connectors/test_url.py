"""open_source: the --source URL forms, and the public surface of the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import connectors
from connectors import FileSource, SourceConfigError, kafka_url_parts, open_source


def test_public_surface_is_pinned() -> None:
    assert sorted(connectors.__all__) == [
        "DEFAULT_CONSUMER_OPTIONS",
        "DEFAULT_RDKAFKA_CONFIG",
        "FileSource",
        "KafkaSource",
        "MemorySource",
        "OffsetCommitError",
        "OffsetRegressionError",
        "PartitionNotAssignedError",
        "PartitionsCallback",
        "RdKafkaSource",
        "Record",
        "Source",
        "SourceConfigError",
        "SourceError",
        "SourceUnavailableError",
        "TopicPartition",
        "UnsupportedCompressionError",
        "kafka_url_parts",
        "open_source",
    ]
    for name in connectors.__all__:
        assert hasattr(connectors, name), name


def test_errors_share_one_base() -> None:
    errors = [getattr(connectors, n) for n in connectors.__all__ if n.endswith("Error")]
    assert len(errors) == 7
    assert all(issubclass(e, connectors.SourceError) for e in errors)
    assert issubclass(SourceConfigError, ValueError)


@pytest.mark.parametrize("form", ["file:{path}", "file://{path}", "file://localhost{path}"])
def test_file_urls(tmp_path: Path, form: str) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"{}\n")
    source = open_source(form.format(path=path), group="ignored-for-files")
    assert isinstance(source, FileSource)
    assert source.name == f"file:{path.resolve()}"
    source.close()


def test_relative_file_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("rel.jsonl").write_bytes(b"{}\n")
    source = open_source("file:rel.jsonl")
    assert source.name == f"file:{(tmp_path / 'rel.jsonl').resolve()}"
    source.close()


def test_kafka_url_parts() -> None:
    assert kafka_url_parts("kafka://k1:9092/t") == (["k1:9092"], ["t"], {})
    servers, topics, options = kafka_url_parts(
        "kafka://k1:9092,k2:9093/a,b?session_timeout_ms=6000&check_crcs=false"
        "&security_protocol=SSL&api_version=2.3&retry_backoff_s=0.25"
    )
    assert servers == ["k1:9092", "k2:9093"]
    assert topics == ["a", "b"]
    assert options == {
        "session_timeout_ms": 6000,
        "check_crcs": False,
        "security_protocol": "SSL",
        "api_version": (2, 3),
        "retry_backoff_s": 0.25,
    }


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("kafka://k1:9092", "needs brokers and topics"),
        ("kafka://k1/t", "not HOST:PORT"),
        ("kafka://k1:x/t", "not HOST:PORT"),
        ("kafka://k1:9092/t?api_version=new", "api_version"),
        ("kafka:k1:9092/t", "expected"),
    ],
)
def test_bad_kafka_urls(url: str, message: str) -> None:
    with pytest.raises(SourceConfigError, match=message):
        open_source(url, group="g")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("kafka://k1:9092/t", "consumer group"),
        ("memory:", "built in code"),
        ("s3://bucket/key", "unknown source scheme"),
        ("events.jsonl", "expected file:PATH"),
        ("file://remote-host/x.jsonl", "local file"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(SourceConfigError, match=message):
        open_source(url)


@pytest.mark.parametrize(
    ("url", "client"),
    [("kafka://k1:9092/t?client=confluent", "kafka-python"),  # the URL wins
     ("kafka://k1:9092/t", "confluent")],  # MONITOR_KAFKA_CLIENT, through run_source
)
def test_the_confluent_client_without_confluent_kafka_says_what_to_install(
    url: str, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails, as if absent
    with pytest.raises(SourceConfigError, match=r"pip install 'conformal-monitor\[kafka\]'"):
        open_source(url, group="g", kafka_client=client)


def test_an_unknown_kafka_client_names_the_known_ones() -> None:
    with pytest.raises(SourceConfigError, match="expected one of kafka-python, confluent"):
        open_source("kafka://k1:9092/t?client=java", group="g")


def test_librdkafka_refuses_kafka_python_option_names() -> None:
    with pytest.raises(SourceConfigError, match="librdkafka names"):
        open_source("kafka://127.0.0.1:9/t?client=confluent&session_timeout_ms=3000", group="g")


@pytest.mark.parametrize("name", ["enable.auto.commit", "enable.auto.offset.store"])
def test_librdkafka_auto_commit_cannot_be_turned_on(name: str) -> None:
    with pytest.raises(SourceConfigError, match=f"{name} must stay false"):
        open_source(f"kafka://127.0.0.1:9/t?client=confluent&{name}=true", group="g")
