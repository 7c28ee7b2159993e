"""bench_memory.py --pipeline: one stream of the default configuration keeps a flat checkpoint
once its bounds are reached (the covariate monitor's reference after
``covariate_reference_limit`` scores, the conditional monitor's ``reference_window``, the label
join's expiry, the OOD decider's windows), and the verdict names what grows."""

from __future__ import annotations

import json

import bench_memory
import pytest


def test_synthetic_stream_delays_labels_leaves_every_tenth_unlabeled_and_is_seeded() -> None:
    stream = bench_memory.life_stream(5)
    events = [json.loads(v) for v in stream.values(200)]
    predictions = [e for e in events if e["kind"] == "prediction"]
    labels = [e for e in events if e["kind"] == "label"]
    assert len(predictions) == 200 and all("label" not in e for e in predictions)
    labelled = {int(e["id"][2:]) for e in labels}
    assert labelled == {i for i in range(150) if i % 10}  # 50 late; every 10th never
    at = {e["id"]: k for k, e in enumerate(events) if e["kind"] == "prediction"}
    for k, e in enumerate(events):  # each label right after the prediction 50 later
        if e["kind"] == "label":
            assert at[f"e-{int(e['id'][2:]) + 50:08d}"] < k
    assert predictions[1]["ts"] == "2026-01-01T00:01:00Z"
    again = [json.loads(v) for v in bench_memory.life_stream(5).values(200)]
    assert again == events
    other = [json.loads(v) for v in bench_memory.life_stream(6).values(200)]
    assert other[0]["features"] != events[0]["features"]


def _point(events: int, size: int, keys: dict[str, int]) -> dict[str, object]:
    return {"events": events, "rss_mb": 300.0, "encoded_bytes": size, "keys": keys}


def test_flat_verdict_names_the_growing_key_in_bytes_per_event() -> None:
    # a transient (an alarm restarts a reference, which refills) is flat; growth of the median
    # beyond 2 % is not
    sizes = [1000, 1010, 700, 1000, 1100, 1005]
    flat = [_point(n, size, {"a": 600, "b": size - 600})
            for n, size in zip(range(1000, 6001, 1000), sizes, strict=True)]
    verdict = bench_memory.flat_verdict(flat)
    assert verdict["flat"] is True and verdict["growing_keys"] == {}
    assert verdict["tail"] == 3 and verdict["encoded_bytes"]["max_tail"] == 1100
    assert verdict["encoded_bytes"]["median_before"] == 1000
    growing = [_point(n, 1000 + n // 10, {"a": 600 + n // 1000 * 5, "b": 400 + n // 10})
               for n in range(1000, 6001, 1000)]
    verdict = bench_memory.flat_verdict(growing, tail=3)
    assert verdict["flat"] is False and verdict["encoded_bytes"]["flat"] is False
    # b: 300 bytes over 3 000 events; a's 15 bytes are within 2 % of the checkpoint's 1 300
    assert verdict["growing_keys"] == {"b": 0.1}
    assert verdict["from_events"] == 4000 and verdict["tail"] == 3
    assert bench_memory.flat_verdict(growing[:1], tail=3)["flat"] is False


def _flat_after_bounds(events: int, every: int, bounded_from: int) -> None:
    life = bench_memory.pipeline_life(bench_memory.every_marks(events, every))
    points = [p for p in life["points"] if p["events"] >= bounded_from]
    assert len(points) >= 4
    verdict = bench_memory.flat_verdict(points, tail=len(points) // 2)
    assert verdict["encoded_bytes"]["flat"], verdict
    assert verdict["growing_keys"] == {}, verdict
    # the covariate reference is within its limit: 20 000 exact scores of 8 bytes
    assert max(p["keys"]["detectors.covariate"] for p in points) < 20_000 * 8 * 1.05


def test_the_checkpoint_stops_growing_once_the_bounds_are_reached_over_200k_events() -> None:
    # 200 000 records ≈ 105 000 predictions: the covariate reference is full after 20 000
    # scores, the join expires after 7 days = 10 080 predictions a minute apart.
    _flat_after_bounds(200_000, 25_000, 75_000)


@pytest.mark.slow
def test_the_checkpoint_stays_flat_over_1m_events() -> None:
    _flat_after_bounds(1_000_000, 100_000, 200_000)
