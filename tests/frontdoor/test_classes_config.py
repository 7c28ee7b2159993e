"""The configuration's ``classes:``: a classification stream's class names in the order of the
probability vector, refused when they cannot describe it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.streams.config import StreamConfig
from monitor.streams.setup import RunError, build_monitors


def _config(**changes: Any) -> dict[str, Any]:
    return {"name": "pets", "task": "classification", "calibration": "c.jsonl", **changes}


@pytest.mark.parametrize(("changes", "message"), [
    pytest.param({"task": "regression"}, "only a classification stream has classes",
                 id="regression"),
    pytest.param({"classes": ["cat"]}, "name at least two classes", id="one"),
    pytest.param({"classes": ["cat", "dog", "cat"]}, "class 'cat' is given twice",
                 id="repeated"),
    pytest.param({"classes": [1, "1"]}, "class '1' is given twice", id="same-text"),
])
def test_classes_that_cannot_name_a_probability_vector_are_refused(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        StreamConfig.model_validate(_config(classes=["cat", "dog"]) | changes)


def test_classes_are_kept_and_default_to_none() -> None:
    assert StreamConfig.model_validate(_config()).classes is None
    assert StreamConfig.model_validate(_config(classes=["cat", "dog"])).classes == ["cat", "dog"]


def test_classes_must_match_the_calibration(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "c.jsonl"
    with path.open("w") as fh:
        for i in range(30):
            p = rng.dirichlet([1.0, 1.0, 1.0]).tolist()
            row = {"kind": "prediction", "stream": "pets", "id": str(i),
                   "features": [float(i)], "prediction": p, "label": i % 3}
            fh.write(json.dumps(row) + "\n")
    config = StreamConfig.model_validate(_config(calibration=str(path), classes=["cat", "dog"]))
    with pytest.raises(RunError, match="2 classes, but the calibration's probability vectors "
                                       "have 3"):
        build_monitors([config])
    ok = StreamConfig.model_validate(_config(calibration=str(path),
                                             classes=["cat", "dog", "owl"]))
    assert set(build_monitors([ok])) == {"pets"}

