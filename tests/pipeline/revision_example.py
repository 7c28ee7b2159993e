"""The example stream of the revision tests: frequent Ville alarms (alpha 0.5), a short
re-baseline (20 events) and labels 7 events late, so that when the extreme shift starts
(event 150) alarms are raised with fewer than ``MIN_EVENTS`` labelled events of evidence and
are revised once they arrive; attribution windows of ``WINDOW`` predictions."""

from __future__ import annotations

from pathlib import Path

import yaml

from monitor.datasets import build_example

MIN_EVENTS = 15
WINDOW = 30


def revision_example(folder: Path) -> tuple[Path, list[bytes]]:
    """The stream's configuration file and its events (JSONL lines)."""
    paths = build_example(folder, seed=4, phases=(("stable", 150), ("extreme_covariate", 250)),
                          n_calibration=300, label_delay=7, alarm={"rule": "ville", "alpha": 0.5})
    config = yaml.safe_load(paths["config"].read_text())
    config |= {"rebaseline": 20, "diagnosis": {"min_events": MIN_EVENTS},
               "attribution": {"window": WINDOW}}
    paths["config"].write_text(yaml.safe_dump(config))
    return paths["config"], paths["events"].read_bytes().splitlines()
