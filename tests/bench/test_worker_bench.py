"""The pieces of bench_worker.py that its figures rest on: the broker process is always stopped,
the river peer joins labels by id, and the stage table tolerates missing functions."""

from __future__ import annotations

import cProfile
import dataclasses
import json
import math
import os
import time

import bench_kafka
import bench_worker
import pytest
from mock_broker import broker_process


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.kafka
def test_broker_process_serves_its_topic_and_stops_also_on_an_error() -> None:
    values = [json.dumps({"kind": "label", "stream": "s", "id": str(i), "label": 1.0}).encode()
              for i in range(40)]
    info: dict[str, float] = {}
    with pytest.raises(KeyError), broker_process({"t": (values, ["s"] * 40)},
                                                 info=info) as bootstrap:
        rate, cpu = bench_kafka.raw_consume_rates(bootstrap, "t", 40, timeout_s=30,
                                                  max_records=10)
        assert rate > 0 and cpu > 0
        raise KeyError("the block fails")
    assert info["produce_s"] > 0
    assert _gone(int(info["pid"]))


def test_river_peer_joins_labels_by_id_in_either_order() -> None:
    peer = bench_kafka.RiverPeer()
    events = [
        {"kind": "prediction", "stream": "a", "id": "1", "prediction": 2.0, "label": 3.5},
        {"kind": "prediction", "stream": "a", "id": "2", "prediction": 2.0},
        {"kind": "label", "stream": "b", "id": "2", "label": 0},  # other stream: not joined
        {"kind": "label", "stream": "a", "id": "3", "label": 1.0},  # before its prediction
        {"kind": "prediction", "stream": "b", "id": "9", "prediction": [0.2, 0.8], "label": 1},
    ]
    for event in events:
        peer.observe(event)
    assert peer.updates == 2 and set(peer.detectors) == {"a", "b"}
    peer.observe({"kind": "label", "stream": "a", "id": "2", "label": 1.0})
    peer.observe({"kind": "prediction", "stream": "a", "id": "3", "prediction": 0.0})
    assert peer.updates == 4
    assert peer.predictions == {"a": {}} and peer.labels == {"b": {"2": 0}, "a": {}}
    adwin, _ = peer.detectors["a"]
    assert adwin.width == 3 and adwin.estimation == pytest.approx((1.5 + 1.0 + 1.0) / 3)
    adwin_b, _ = peer.detectors["b"]
    assert adwin_b.estimation == pytest.approx(0.2)  # 1 - p(true class)


def _inner() -> None:
    time.sleep(0.02)


def run() -> None:  # the stand-in for Worker.run (its name is what the table looks up)
    _inner()
    _inner()


def test_stage_costs_are_microseconds_per_record_and_missing_functions_are_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here = "tests/bench/test_worker_bench.py"
    monkeypatch.setattr(bench_worker, "TOTAL_STAGE", (here, "run"))
    monkeypatch.setattr(bench_worker, "STAGES", (
        ("inner", here, "_inner"),
        ("  part of inner, not yet written", here, "_not_there"),
        ("renamed away", "monitor/nowhere.py", "_inner"),
    ))
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    costs = bench_worker.stage_costs(profile, records=10)
    stages = costs["stages_us_per_record"]
    assert costs["records"] == 10
    assert stages["inner"] >= 0.04e6 / 10 * 0.9  # two sleeps of 20 ms over 10 records
    assert stages["  part of inner, not yet written"] == 0 and stages["renamed away"] == 0
    other = stages["other (routing, join, records, loop)"]
    assert other == pytest.approx(costs["total_us_per_record"] - stages["inner"], abs=0.02)
    assert 0 <= other < stages["inner"]


def test_median_case_takes_wall_and_cpu_medians_separately() -> None:
    runs = [bench_worker.Rates(100.0, 400.0), bench_worker.Rates(300.0, 200.0),
            bench_worker.Rates(200.0, 250.0)]
    case = bench_worker.median_case(runs)
    assert case["per_s"] == 200 and case["cpu_per_s"] == 250
    assert case["cpu_us_per_record"] == pytest.approx(4000.0)
    assert case["runs_per_s"] == [100, 300, 200]


def test_every_worker_case_runs_its_topic_batch_and_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: dict[str, tuple[object, ...]] = {}

    def record(bootstrap: str, topic: str, group: str, work: object, checkpoint_every: int,
               batch: int, client: str) -> bench_worker.Rates:
        calls[group] = (topic, work, batch, checkpoint_every, client)
        return bench_worker.Rates(1.0, 1.0)

    monkeypatch.setattr(bench_worker, "kafka_worker", record)
    work, alone, wide = object(), object(), object()
    loads = {"events": work, "alone": alone, "wide": wide}
    cases = [c for c in bench_worker.KAFKA_CASES if c.startswith("worker")]
    for case in cases:
        bench_worker.worker_case("b", case, 0, loads)  # type: ignore[arg-type]
    batch, every = bench_worker.cli_defaults()
    four, one, ten, base = ("events", work), ("alone", alone), ("wide", wide), bench_worker.BATCH
    assert calls == {
        "bench-worker-0": (*four, base, 1, "kafka-python"),
        "bench-worker_alone-0": (*one, base, 1, "kafka-python"),
        "bench-worker_defaults-0": (*four, batch, every, "kafka-python"),
        "bench-worker_alone_defaults-0": (*one, batch, every, "kafka-python"),
        "bench-worker_wide_defaults-0": (*ten, batch, every, "kafka-python"),
        "bench-worker_rdkafka-0": (*four, base, 1, "confluent"),
        "bench-worker_alone_rdkafka-0": (*one, base, 1, "confluent"),
        "bench-worker_defaults_rdkafka-0": (*four, batch, every, "confluent"),
        "bench-worker_alone_defaults_rdkafka-0": (*one, batch, every, "confluent"),
        "bench-worker_wide_defaults_rdkafka-0": (*ten, batch, every, "confluent"),
    }
    assert [bench_worker.case_topic(c) for c in ("raw", "raw_alone", "raw_wide", "peer",
                                                 "peer_alone", "peer_wide")] == [
        "events", "alone", "wide", "events", "alone", "wide"]


def _case(per_s: float, cpu_per_s: float) -> dict[str, float]:
    return {"per_s": per_s, "cpu_per_s": cpu_per_s}


def test_acceptance_gives_both_clients_each_ratio_beside_the_peer_and_a_met_flag() -> None:
    kafka = {"raw": _case(1000, 2000), "raw_alone": _case(800, 1600), "raw_wide": _case(500, 400),
             "peer": _case(900, 1800), "peer_alone": _case(400, 800), "peer_wide": _case(250, 100),
             "worker_defaults": _case(500, 1000),  # 0.5 wall and CPU: met (≥)
             "worker_alone_defaults": _case(400, 700),  # 0.5 wall but 0.4375 CPU: not met
             "worker_wide_defaults": _case(200, 200),  # 0.4, 0.5: met
             "worker_defaults_rdkafka": _case(499, 1000),  # 0.499 wall: not met
             "worker_alone_defaults_rdkafka": _case(360, 720),  # 0.45 both: met
             "worker_wide_defaults_rdkafka": _case(150, 400)}  # 0.3: not met
    table = bench_worker.acceptance(kafka)
    assert set(table) == {"kafka-python", "confluent"}
    names = [name for name, *_ in bench_worker.ACCEPTANCE]
    met = {client: [table[client][n]["met"] for n in names] for client in table}
    assert met == {"kafka-python": [True, False, True], "confluent": [False, True, False]}
    alone = table["kafka-python"][names[1]]
    assert (alone["goal"], alone["wall"], alone["cpu"]) == (0.45, 0.5, 0.438)
    assert (alone["peer_wall"], alone["peer_cpu"]) == (0.5, 0.5)
    assert table["confluent"][names[2]]["case"] == "worker_wide_defaults_rdkafka"
    assert [g for *_, g in bench_worker.ACCEPTANCE] == [0.5, 0.45, 0.4]
    del kafka["peer_wide"], kafka["worker_wide_defaults_rdkafka"]  # results of an older bench
    older = bench_worker.acceptance(kafka)
    assert older["confluent"][names[2]]["met"] is None
    assert older["kafka-python"][names[2]]["met"] is True
    assert older["kafka-python"][names[2]]["peer_wall"] is not None
    assert math.isnan(older["kafka-python"][names[2]]["peer_wall"])


def test_quick_calibration_costs_fill_every_cell_and_compute_the_acceptance_ratio() -> None:
    sizes = dataclasses.replace(bench_worker.QUICK, calibration_events=400)
    costs = bench_worker.calibration_costs(sizes)
    cells = {(c["m"], c["d"]): c for c in costs["cells"]}
    assert set(cells) == {(m, d) for m in (500, 1000, 2000, 8000) for d in (5, 10, 50)}
    assert all(c["per_s"] > 0 and c["cpu_us_per_record"] > 0 for c in cells.values())
    ratio = costs["ratio"]
    expected = cells[8000, 10]["cpu_us_per_record"] / cells[1000, 10]["cpu_us_per_record"]
    assert ratio["cpu"] == pytest.approx(expected, abs=1e-3)
    assert ratio["met"] == (ratio["cpu"] <= 1.5)


def test_quick_checkpoint_sizes_are_taken_at_the_marks_and_the_chunked_write_is_smaller() -> None:
    sizes = bench_worker.checkpoint_sizes(bench_worker.QUICK)
    points = sizes["points"]
    marks = bench_worker.QUICK.checkpoint_marks
    assert len(points) == len(marks)
    assert all(mark <= p["events"] < mark + 2000 for mark, p in zip(marks, points, strict=True))
    for p in points:
        assert p["pieces"] > 0 and p["row_bytes"] < p["encoded_bytes"]
        assert p["row_bytes"] < p["sent_next_bytes"] <= p["row_bytes"] + p["pieces_bytes"] * 1.5
