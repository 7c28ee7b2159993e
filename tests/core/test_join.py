"""Delayed-label join: bounded by count and time, expiries counted, state round-trips."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.streams.join import LabelJoin, Pending
from monitor.streams.state import decode_state, encode_state
from tests.support.streams import canonical


def pending(i: int, ts: float = 0.0) -> Pending:
    return Pending(f"e{i}", i, ts, (float(i),), float(i))


def test_labels_join_in_either_order() -> None:
    join = LabelJoin(max_pending=10, max_delay_seconds=100)
    join.add_prediction(pending(0))
    join.add_label("e1", 1.5, ts=1.0)  # early label
    join.add_label("e0", 0.5, ts=2.0)
    join.add_prediction(pending(1, ts=3.0))
    assert [(j.pending.event_id, j.label) for j in join.drain()] == [("e0", 0.5), ("e1", 1.5)]
    assert join.pending_predictions == 0 and join.pending_labels == 0 and join.joined == 2


def test_count_bound_expires_oldest_and_counts_it() -> None:
    join = LabelJoin(max_pending=3, max_delay_seconds=1e9)
    for i in range(5):
        join.add_prediction(pending(i, ts=float(i)))
    assert join.pending_predictions == 3 and join.expired_predictions == 2
    join.add_label("e0", 0.0, ts=5.0)  # its prediction expired: the label waits
    assert join.pending_labels == 1 and not join.drain()


def test_time_bound_expires_old_entries() -> None:
    join = LabelJoin(max_pending=100, max_delay_seconds=10)
    join.add_prediction(pending(0, ts=0.0))
    join.add_label("zz", 0.0, ts=1.0)
    join.add_prediction(pending(1, ts=20.0))
    join.add_prediction(pending(2, ts=21.0))
    assert join.expired_predictions == 0  # the clock is the median of [0, 1, 20, 21] → 1
    join.add_prediction(pending(3, ts=22.0))  # median of [0, 1, 20, 21, 22] → 20
    assert join.clock == 20.0
    assert join.expired_predictions == 1 and join.expired_labels == 1
    assert join.pending_predictions == 3


def test_one_far_future_timestamp_does_not_expire_everything() -> None:
    # A producer stamping one event years ahead must not flush every waiting prediction.
    join = LabelJoin(max_pending=100, max_delay_seconds=3600)
    for i in range(10):
        join.add_prediction(pending(i, ts=60.0 * i))
    join.add_label("late", 1.0, ts=1e12)
    join.add_prediction(pending(10, ts=600.0))
    assert join.expired_predictions == 0 and join.pending_predictions == 11
    assert join.clock == 540.0  # median of [420, 480, 540, 1e12, 600]


def test_the_clock_never_goes_back() -> None:
    join = LabelJoin(max_pending=100, max_delay_seconds=10)
    for i, ts in enumerate([100.0, 101.0, 102.0, 0.0, 0.0, 0.0]):
        join.add_prediction(pending(i, ts=ts))
    assert join.clock == 101.0  # the median of the last five fell to 0.0; the clock stays


def test_a_version_1_state_loads() -> None:
    old = {"version": 1, "predictions": [["e0", 0, 5.0, [1.0], 2.0]], "labels": [],
           "counts": [0, 0, 0]}
    join = LabelJoin(max_pending=5, max_delay_seconds=50)
    join.load_state(old)
    assert join.pending_predictions == 1 and join.clock == float("-inf")
    join.add_label("e0", 1.0, ts=6.0)
    assert [j.pending.event_id for j in join.drain()] == ["e0"]


def test_state_round_trip_resumes_exactly() -> None:
    a = LabelJoin(max_pending=5, max_delay_seconds=50)
    for i in range(4):
        a.add_prediction(pending(i, ts=float(i)))
    a.add_label("x", 3.0, ts=4.0)
    b = LabelJoin(max_pending=5, max_delay_seconds=50)
    b.load_state(a.state_dict())
    for join in (a, b):
        join.add_label("e2", 7.0, ts=5.0)
        join.add_prediction(pending(9, ts=6.0))
    assert a.drain() == b.drain()
    assert a.state_dict() == b.state_dict()


def test_a_predicted_scale_travels_through_the_join_and_its_state() -> None:
    """normalized_residual: the scale waits with its prediction, survives a checkpoint (as a
    sixth item of the row), and rows without one keep the five-item form older code reads."""
    a = LabelJoin(max_pending=5, max_delay_seconds=50)
    a.add_prediction(Pending("s", 0, 0.0, (1.0,), 2.0, 0.25))
    a.add_prediction(pending(1, ts=1.0))
    state = a.state_dict()
    assert [len(row) for row in state["predictions"]] == [6, 5]
    b = LabelJoin(max_pending=5, max_delay_seconds=50)
    b.load_state(state)
    b.add_label("s", 3.0, ts=2.0)
    b.add_label("e1", 3.0, ts=2.0)
    assert [j.pending.scale for j in b.drain()] == [0.25, None]


def test_joined_ids_are_known_within_the_bounds_and_survive_the_state() -> None:
    """What a replay refuses (monitor.cli.dead_letters): pairs joined no longer ago than the time
    bound, the most recent ``max_pending`` of them; kept through the checkpointed state."""
    join = LabelJoin(max_pending=3, max_delay_seconds=10)
    for i in range(5):
        join.add_prediction(pending(i, ts=float(i)))
        join.add_label(f"e{i}", 0.0, ts=float(i))
    assert join.pending_predictions == join.pending_labels == 0
    assert [join.processed("prediction", f"e{i}") for i in range(5)] == [False, False] + [True] * 3
    assert join.processed("label", "e4") and not join.processed("label", "e9")
    restored = LabelJoin(max_pending=3, max_delay_seconds=10)
    restored.load_state(decode_state(*encode_state(join.state_dict())))
    assert [restored.processed("label", f"e{i}") for i in range(5)] == [False, False] + [True] * 3
    for i in range(5, 20):  # time moves on past the bound: e2-e4 are forgotten
        restored.add_prediction(pending(i, ts=float(i)))
    assert not any(restored.processed("prediction", f"e{i}") for i in range(5))


def test_a_state_without_joined_ids_loads() -> None:
    join = LabelJoin()
    state = join.state_dict()
    assert "joined" not in state  # a stream without labels: its state is as before
    join.load_state(state)
    assert not join.processed("label", "e0")


def test_support_flags_wait_with_their_predictions() -> None:
    """The covariate monitor's support flags are kept in the state; an older state without
    them, and a configuration update (other detectors), leave them unknown."""
    join = LabelJoin()
    for i in range(3):
        join.add_prediction(pending(i, float(i)))
    join.keep_outside(["e0", "e2", "gone"], [True, False, True])
    state = decode_state(*encode_state(join.state_dict()))
    restored = LabelJoin()
    restored.load_state(state)
    assert [p.outside for p in restored.predictions.values()] == [True, None, False]
    del state["outside"]
    old = LabelJoin()
    old.load_state(state)
    assert [p.outside for p in old.predictions.values()] == [None, None, None]
    restored.mark_made_under(1, ("x",))
    assert [p.outside for p in restored.predictions.values()] == [None, None, None]
    assert "outside" not in restored.state_dict()


def _random_batches(seed: int, n: int) -> list[list[tuple[str, str, float, bool]]]:
    """Batches of (kind, id, ts, inline label) with out-of-order times, re-used ids, early
    labels, labels that never come and jumps in time."""
    rng = np.random.default_rng(seed)
    events, t = [], 0.0
    for i in range(n):
        t += float(rng.exponential(1.0)) + (50.0 if rng.uniform() < 0.01 else 0.0)
        ts = t + float(rng.normal(0.0, 3.0))
        k = int(rng.integers(0, i + 1)) if rng.uniform() < 0.05 else i  # a re-used id
        kind = "label" if rng.uniform() < 0.4 else "prediction"
        j = max(0, i - int(rng.integers(-3, 30))) if kind == "label" else k
        events.append((kind, f"e{j}", ts, kind == "prediction" and rng.uniform() < 0.3))
    cuts = sorted(rng.choice(np.arange(1, n), size=n // 40, replace=False).tolist())
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


def _feed(
    join: LabelJoin, batch: list[tuple[str, str, float, bool]], deferred: bool
) -> tuple[list[Any], bool]:
    """The pairs a batch joined; whether its expiry was deferred."""
    held = False
    if deferred:
        times = [ts for _, _, ts, _ in batch]
        held = join.defer_expiry(min(times), max(times), len(batch))
    for kind, event_id, ts, inline in batch:
        if kind == "prediction":
            join.add_prediction(Pending(event_id, 0, ts, (ts,), 0.0))
            if inline:
                join.add_label(event_id, 1.0, ts)
        else:
            join.add_label(event_id, 2.0, ts)
    if deferred:
        join.catch_up()
    return [(j.pending.event_id, j.label) for j in join.drain()], held


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("cap", "delay"), [(8, 1e9), (10_000, 200.0), (15, 120.0)])
def test_a_batch_with_its_expiry_deferred_ends_as_one_event_at_a_time(
    seed: int, cap: int, delay: float
) -> None:
    """Deferred where :meth:`LabelJoin.defer_expiry` allows it (count bound only in the
    batch), else one event at a time: the same joins, expiries, clock and state."""
    reference, deferred = LabelJoin(cap, delay), LabelJoin(cap, delay)
    held = []
    for batch in _random_batches(seed, 1200):
        joined, was_held = _feed(deferred, batch, True)
        assert joined == _feed(reference, batch, False)[0]
        assert canonical(deferred.state_dict()) == canonical(reference.state_dict())
        assert deferred.clock == reference.clock
        held.append(was_held)
    assert reference.expired_predictions > 0 and reference.expired_labels > 0
    assert any(held) and (cap == 8 or not all(held)), "both paths should run"


def test_a_pair_joined_from_an_old_waiting_prediction_ends_the_deferral() -> None:
    """A prediction stamped out of order waits behind newer ones, where the deferral's check
    does not look; its label joins it in a deferred batch: the pair's old time could expire
    first among the joined ids, so the batch goes on event by event, as the reference."""
    joins = LabelJoin(100, 10.0), LabelJoin(100, 10.0)
    for join in joins:
        for i in range(6):
            join.add_prediction(Pending(f"e{i}", i, 100.0 + i, (0.0,), 0.0))
        join.add_prediction(Pending("old", 6, 50.0, (0.0,), 0.0))
        join.add_prediction(Pending("e7", 7, 107.0, (0.0,), 0.0))
    deferred, reference = joins
    assert deferred.defer_expiry(108.0, 108.0, 1)
    deferred.add_label("old", 1.0, 108.0)
    deferred.catch_up()
    reference.add_label("old", 1.0, 108.0)
    assert not reference.processed("label", "old"), "the pair's id expired at once"
    assert canonical(deferred.state_dict()) == canonical(reference.state_dict())
