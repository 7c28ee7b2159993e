"""The batch pass over a mixed stream equals the per-event reference, at every batch size.

One sequence holds what the batch pass treats apart from the common case: dead letters of every
reason the pipeline and the streams give (not JSON, oversized, unknown stream, a bad
field, a wrong width, a non-numeric label, logits of a wrong width, a duplicate prediction id,
an unknown feature name), labels before and after their predictions and inline, predictions
and early labels expired by the label join's clock and by its count bound, events without
``ts``, OOD decisions on (the default) and a tabular stream (strings, missing values, object
features). Alarms, trace points, OOD windows and their flags, dead letters (reasons and order)
and the checkpointed states must be those of ``tests/support/oracle.py`` for batches of 1, 37
and 5 000.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from monitor.ops.datasets import build_example
from tests.support.pipeline_runs import assert_same, run
from tests.support.tabular_data import penguins, wire_rows

ALARM = {"rule": "shiryaev_roberts", "threshold": 100}
_TS = "2026-01-01T00:00:00Z"


def _join_bounds(config: Path, **labels: Any) -> None:
    data = yaml.safe_load(config.read_text())
    data["labels"] = labels
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def _shuttle(
    folder: Path, name: str, seed: int, delay: int, **labels: Any
) -> tuple[Path, list[bytes]]:
    paths = build_example(folder, seed=seed, stream=name, n_calibration=300, label_delay=delay,
                          phases=[("stable", 150), ("extreme_covariate", 120), ("concept", 150)],
                          alarm=ALARM)
    if labels:
        _join_bounds(paths["config"], **labels)
    return paths["config"], paths["events"].read_bytes().splitlines()


def _early_labels(lines: list[bytes], every: int) -> list[bytes]:
    """Every ``every``-th label moved before its prediction."""
    out = list(lines)
    for k, line in enumerate(lines):
        event = json.loads(line)
        if event["kind"] != "label" or k % every:
            continue
        at = next(i for i, v in enumerate(out) if json.loads(v)["id"] == event["id"]
                  and json.loads(v)["kind"] == "prediction")
        out.remove(line)
        out.insert(at, line)
    return out


def _tabular(folder: Path, seed: int) -> tuple[Path, list[bytes]]:
    """Penguins with strings and missing values, features by name; a new key now and then."""
    names, rows = penguins()
    rng = np.random.default_rng(seed)
    calibration = folder / "penguins_calibration.jsonl"
    cal = [rows[i] for i in rng.integers(0, len(rows), 300)]
    calibration.write_text("".join(
        json.dumps({"kind": "prediction", "stream": "penguins", "id": f"c-{i}", **row}) + "\n"
        for i, row in enumerate(wire_rows(names, cal))))
    config = folder / "penguins.yaml"
    config.write_text(yaml.safe_dump({
        "name": "penguins", "task": "regression", "calibration": str(calibration),
        "alarm": ALARM, "seed": seed, "labels": {"max_delay_seconds": 30},
    }))
    lines = []
    for i, r in enumerate(rng.integers(0, len(rows), 300).tolist()):
        features = {n: v for n, v in zip(names, rows[r], strict=True) if v is not None}
        if i % 41 == 40:
            features["model_version"] = "b"
        event: dict[str, Any] = {"kind": "prediction", "stream": "penguins", "id": f"t-{i}",
                                 "features": features, "prediction": 4000.0 + i}
        if i % 3:
            event["ts"] = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"
        if i % 2:
            event["label"] = float(i)
        lines.append(json.dumps(event).encode())
    return config, lines


def _bad(stream: str, i: int) -> list[bytes]:
    """One record of each dead-letter reason the pipeline and the streams give here."""
    ts = f'"ts":"{_TS}"'
    return [
        b"not json at all",
        b'{"kind":"prediction","stream":"nobody","id":"u-%d",' % i + ts.encode()
        + b',"features":[1,2,3,4,5],"prediction":1.0}',
        f'{{"kind":"prediction","stream":"{stream}","id":"b-{i}",{ts},'
        f'"features":[1,2],"prediction":1.0}}'.encode(),
        f'{{"kind":"prediction","stream":"{stream}","id":"n-{i}",{ts},'
        f'"features":[NaN,2,3,4,5],"prediction":1.0}}'.encode(),
        f'{{"kind":"prediction","stream":"{stream}","id":"k-{i}",{ts},'
        f'"features":{{"a":1.0}},"prediction":1.0}}'.encode(),
        f'{{"kind":"prediction","stream":"{stream}","id":"o-{i}",{ts},'
        f'"features":[1,2,3,4,5],"logits":[0.1,0.2],"prediction":1.0}}'.encode(),
        f'{{"kind":"prediction","stream":"{stream}","id":"p-{i}","pad":"{"x" * 300_000}",'
        f'"features":[1,2,3,4,5],"prediction":1.0}}'.encode(),
        f'{{"kind":"prediction","stream":"penguins","id":"q-{i}",{ts},'
        f'"features":{{"nothing":1.0}},"prediction":1.0}}'.encode(),
    ]


def _join_counts(state: Any) -> list[int]:
    """The label join's counts in a canonical state (``tests/support/streams.canonical``)."""
    for key in ("'join'", "'counts'"):
        state = dict(state["mapping"])[key]
    return list(state[1])


def _without_ts(line: bytes) -> bytes:
    event = json.loads(line)
    event.pop("ts", None)
    return json.dumps(event).encode()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[bytes]]:
    folder = tmp_path_factory.mktemp("batch_pass")
    inline, a = _shuttle(folder, "inline", 21, 0)
    late, b = _shuttle(folder, "late", 22, 6)
    # labels 20 predictions (20 s) late, a clock bound of 8 s and a count bound of 12: most
    # predictions expire, then their labels wait and expire in turn
    expiring, c = _shuttle(folder, "expiring", 23, 20, max_delay_seconds=8, max_pending=12)
    tabular, d = _tabular(folder, 24)
    b = _early_labels(b, 4)
    a = [_without_ts(line) if k % 29 == 3 else line for k, line in enumerate(a)]
    streams = [a, b, c, d]
    values: list[bytes] = []
    for i in range(max(map(len, streams))):
        values += [s[i] for s in streams if i < len(s)]
        if i % 53 == 52:
            values += _bad(("inline", "late", "expiring")[i % 3], i)
        if i % 71 == 70 and i < len(a):  # a duplicate prediction id while the first may wait
            values.append(b[min(i, len(b) - 1)])
    return [inline, late, expiring, tabular], values


@pytest.mark.parametrize("batch", [1, 37, 5000])
def test_the_batch_pass_equals_the_per_event_path(
    mixed: tuple[list[Path], list[bytes]], batch: int
) -> None:
    configs, values = mixed
    reference = run(configs, values, 500, per_event=True)
    dead = " ".join(reference["dead"])
    for reason in ("not valid JSON", "unknown stream", "wrong feature dimension",
                   "numbers must be finite", "got 1,", "'logits' has length",
                   "exceeds the limit", "duplicate prediction id"):
        assert reason in dead, reason
    expired_predictions, expired_labels, _ = _join_counts(reference["states"]["expiring"])
    assert expired_predictions > 0 and expired_labels > 0, "both waiting rooms should expire"
    assert reference["windows"] and any("flagged_ids=()" not in w for w in reference["windows"])
    assert {a["stream"] for a in reference["alarms"]} >= {"inline", "late", "penguins"}
    assert_same(run(configs, values, batch, per_event=False), reference)
