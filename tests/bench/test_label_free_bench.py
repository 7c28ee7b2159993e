"""bench_label_free in its quick form: the result's layout, the label lag added to the
conditional monitors' delays, and the label-free detector ahead of them once labels are late."""

from __future__ import annotations

import bench_label_free as lf


def test_quick_run() -> None:
    result = lf.run(1, quick=True)
    for task in ("banana", "shuttle"):
        part = result[task]
        assert set(part) == {"null", "harmful", "benign", "estimation", "delays"}
        delays = part["delays"]
        free = delays["label_free"]["median_delay"]
        assert delays["label_free"]["detected"] == 1.0, delays
        for name in ("conditional_plain", "conditional_weighted"):
            own = delays[name]["median_delay"]
            for lag in lf.LAGS:
                assert delays[name][f"median_delay_lag_{lag}"] == lag + own
                assert free < lag + own, delays  # labels 1 000 events late: label-free first
        estimation = part["estimation"]
        assert estimation["ours"]["mae"] < estimation["constant"]["mae"], estimation
        assert estimation["n_windows"] == 3 * 3 * 6  # 3 seeds, 3 mixes, 3 000 / 500 windows
