"""How the worker's log names where it reads: a Kafka source's partitions and offsets, a file's
lines.

A file is partition 0 of a topic named by its path, and its offsets are line numbers (the next
line to read, 0-based: also the count of lines done); its log lines say so, in a file's words,
instead of Kafka's assignment, committed offsets and revocation.

Examples
--------
>>> kafka, file = log_words("kafka"), log_words("file")
>>> kafka.assigned({("predictions", 1), ("predictions", 0)}, {})
"assigned [('predictions', 0), ('predictions', 1)]; resuming at committed offsets"
>>> file.assigned({("/data/events.jsonl", 0)}, {("/data/events.jsonl", 0): 1200})
'reading /data/events.jsonl: resuming after line 1200 (stored in the database)'
>>> file.assigned({("/data/events.jsonl", 0)}, {})
'reading /data/events.jsonl from its first line'
>>> kafka.record("predictions", 3, 41), file.record("/data/events.jsonl", 0, 41)
('predictions[3]@41', '/data/events.jsonl line 42')
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.engine.sink import TopicPartition

__all__ = ["FileWords", "KafkaWords", "log_words"]


class KafkaWords:
    """Partitions and offsets (the Kafka consumer's own words)."""

    def assigned(self, partitions: set[TopicPartition],
                 stored: Mapping[TopicPartition, int]) -> str:
        return f"assigned {sorted(partitions)}; resuming at {dict(stored) or 'committed offsets'}"

    def revoked(self, partitions: set[TopicPartition]) -> str:
        return f"revoked {sorted(partitions)}"

    def resynchronised(self, target: Mapping[TopicPartition, int]) -> str:
        return f"resynchronised from the database; resuming at {dict(target)}"

    def record(self, topic: str, partition: int, offset: int) -> str:
        """Where one record is."""
        return f"{topic}[{partition}]@{offset}"


class FileWords(KafkaWords):
    """A file's lines: offsets are line numbers, the topic is the file's path."""

    def assigned(self, partitions: set[TopicPartition],
                 stored: Mapping[TopicPartition, int]) -> str:
        where = [_path(tp) + (f": resuming after line {stored[tp]} (stored in the database)"
                              if stored.get(tp) else " from its first line")
                 for tp in sorted(partitions)]
        return "reading " + "; ".join(where)

    def revoked(self, partitions: set[TopicPartition]) -> str:
        return "stopped reading " + ", ".join(_path(tp) for tp in sorted(partitions))

    def resynchronised(self, target: Mapping[TopicPartition, int]) -> str:
        where = ", ".join(f"{_path(tp)} after line {line}" if line else
                          f"{_path(tp)} from its first line" for tp, line in sorted(target.items()))
        return f"resynchronised from the database; resuming {where or 'nothing'}"

    def record(self, topic: str, partition: int, offset: int) -> str:
        return f"{_path((topic, partition))} line {offset + 1}"


def log_words(source_kind: str) -> KafkaWords:
    """The words of a source of this kind (``file``: :class:`FileWords`; any other reads as
    Kafka)."""
    return FileWords() if source_kind == "file" else KafkaWords()


def _path(tp: TopicPartition) -> str:
    return tp[0] if tp[1] == 0 else f"{tp[0]}[{tp[1]}]"
