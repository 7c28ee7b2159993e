"""SIGKILL the Kafka worker (``monitor run``) at random points of a replay, restarting it each
time: the final alarms, diagnoses, trace points, OOD decisions, dead letters and detector
checkpoints equal one uninterrupted run's, bit for bit; nothing lost, nothing duplicated.

The uninterrupted run is the file run of the same events (tests/integration shows it equals an
uninterrupted Kafka run). Kills land after a random amount of progress plus a random fraction
of a batch, and some during start-up (see chaos.py). At every kill, Kafka's committed offsets
must not lead the database's. Alarms printed on stdout by all incarnations together must hold
no duplicate and nothing the database lacks.

The CI-size case (3 kills on ~2 500 events) is tests/integration/test_crash_recovery.py, by the
streaming engineer; this module adds the full-size run (``slow``): 20 kills after progress plus 3
during start-up, on a 100 000-event replay over eight streams (two per partition, < 5 MiB each, so
the mock broker deletes nothing), with the alarms printed on stdout checked as well.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.bad_input import Templates, generate
from tests.support.chaos import CrashRun, duplicates, replay_with_kills
from tests.support.streams import Snapshot, reference_run, snapshot
from tests.support.workloads import build_workload, differences, with_extra

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def poison(values: tuple[bytes, ...], streams: list[str], n: int, seed: int
           ) -> list[tuple[str, bytes]]:
    """``n`` malformed records (every kind but oversized), keyed by stream."""
    rng = np.random.default_rng(seed)
    bad = generate(rng, Templates.from_values(values, streams), n, max_event_bytes=1, n_huge=0)
    return [(str(b.key), b.value or b"") for b in bad]


def check(run: CrashRun, got: Snapshot, want: Snapshot, n_poison: int, topic: str) -> None:
    assert differences(got, want) == []
    assert got.dead_letters == want.dead_letters
    assert got.dead_letter_rows == n_poison
    assert got.offsets == {(f"kafka:{topic}", p): o for p, o in run.end.items()}
    printed = run.printed_alarm_ids()
    assert duplicates(printed) == []
    assert set(printed) <= set(got.alarm_versions)


def crash_replay(tmp_path: Path, bootstrap: str, pg_url: str, ref_url: str, *, messages: int,
                 streams: int, kills: int, startup_kills: int, seed: int, batch_size: int,
                 n_poison: int) -> dict[str, object]:
    good = build_workload(tmp_path / "streams", messages, streams, seed)
    example = with_extra(good, poison(good.values, sorted(set(good.keys)), n_poison, seed),
                         "with-poison")
    want = reference_run(example, ref_url, batch_size=batch_size)
    assert want.alarms, "the replay must raise alarms for the comparison to mean something"
    run = replay_with_kills(example, bootstrap, pg_url, tmp_path, kills=kills, seed=seed,
                            batch_size=batch_size, startup_kills=startup_kills,
                            timeout_s=300)
    got = snapshot(pg_url)
    check(run, got, want, n_poison, "events")
    return {**run.summary(), "events": len(example.values), "alarms": len(got.alarms),
            "printed_alarms": len(run.printed_alarm_ids()),
            "trace_points": len(got.trace_points)}


@pytest.mark.slow
def test_sigkill_20_times_in_a_100k_replay_changes_nothing(
    tmp_path: Path, kafka_broker: str, pg_url: str, ref_url: str
) -> None:
    summary = crash_replay(tmp_path, kafka_broker, pg_url, ref_url, messages=100_000, streams=8,
                           kills=20, startup_kills=3, seed=11, batch_size=500, n_poison=100)
    print(json.dumps(summary))
