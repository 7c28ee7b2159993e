"""The checkpoint blob: one buffer of raw array bytes, exact round trips, and blobs written in
the earlier npz layout still load and continue exactly.

``data/checkpoint_npz_v1.{json,npz}`` is a stream checkpoint written by the code before the
single-buffer layout (npz blob): the state of the example below after its first 150 records.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import ConditionalMonitor
from monitor.engine.pipeline import BatchOutput, Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import BLOB_MAGIC, StateFormatError, decode_state, encode_state
from tests.support.states import assert_identical
from tests.support.streams import canonical

DATA = Path(__file__).parent / "data"
SPLIT = 150  # records folded into the fixture's state


def _arrays() -> dict[str, Any]:
    base = np.arange(24.0).reshape(4, 6)
    return {
        "f8": np.linspace(-1.0, 1.0, 7),
        "zero_d": np.array(3.5),
        "zero_d_int": np.array(-7, np.int16),
        "empty": np.empty(0),
        "empty_2d": np.empty((0, 3), np.float32),
        "empty_cols": np.empty((2, 0), np.int64),
        "fortran": np.asfortranarray(base),
        "strided": base[::2, 1::3],  # neither C nor Fortran contiguous
        "big_endian": np.arange(5, dtype=">i4"),
        "bool": np.array([True, False, True]),
        "uint8": np.arange(250, 256, dtype=np.uint8),
        "float16": np.array([0.1, -2.0, np.inf], np.float16),
        "complex": np.array([1 + 2j, np.nan - 1j]),
        "nan_bits": np.frombuffer(struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF), np.float64),
        "datetime": np.array(["2026-01-01T00:00:00", "NaT"], "datetime64[ns]"),
        "text": np.array(["a", "bcd"]),
        "cube": np.arange(24, dtype=np.int32).reshape(2, 3, 4),
    }


def test_round_trip_is_exact_in_one_buffer() -> None:
    state = {"arrays": _arrays(), "scalar": np.float32(0.25), "nested": [{"x": np.ones(2)}]}
    text, blob = encode_state(state)
    assert blob is not None and blob.startswith(BLOB_MAGIC)
    back = decode_state(text, blob)
    assert_identical(back, state)
    assert back["arrays"]["fortran"].flags.f_contiguous
    assert back["arrays"]["strided"].flags.c_contiguous  # written in C order, like .npy
    for array in back["arrays"].values():
        assert array.flags.writeable and array.flags.aligned and array.flags.owndata


def test_structured_dtypes_fall_back_to_npz() -> None:
    record = np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")])
    record["a"] = [1.5, -2.0]
    state = {"r": record, "x": np.arange(3)}
    text, blob = encode_state(state)
    assert blob is not None and blob[:2] == b"PK"
    assert_identical(decode_state(text, blob), state)


def test_old_npz_blobs_decode_to_the_same_state() -> None:
    state = {"arrays": _arrays(), "scalar": np.complex64(1j)}
    text, blob = encode_state(state)
    arrays = _blob_arrays(blob)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)  # what the writer produced before
    old = buffer.getvalue()
    assert old[:2] == b"PK"
    assert_identical(decode_state(text, old), decode_state(text, blob))


def _blob_arrays(blob: bytes | None) -> dict[str, np.ndarray]:
    from monitor.streams.state import _load_arrays

    return _load_arrays(blob)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b + b"\x00",  # trailing bytes
        lambda b: b.replace(b"[2,3]", b"[-1]"),  # a bad shape
        lambda b: BLOB_MAGIC + b"\xff\xff",  # a header cut short
        lambda b: b"garbage",
    ],
    ids=["truncated", "trailing", "bad-shape", "short-header", "garbage"],
)
def test_corrupt_blobs_are_refused(mutate: Any) -> None:
    text, blob = encode_state({"w": np.ones((2, 3)), "v": np.arange(4)})
    assert blob is not None
    with pytest.raises(StateFormatError):
        decode_state(text, mutate(blob))


# -- a real checkpoint written in the npz layout ------------------------------------------------


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[RawRecord]]:
    folder = tmp_path_factory.mktemp("example")
    paths = build_example(folder, seed=5, phases=[("stable", 120), ("concept", 120)],
                          n_calibration=60, label_delay=7,
                          alarm={"rule": "shiryaev_roberts", "threshold": 50})
    lines = paths["events"].read_bytes().splitlines()
    records = [RawRecord("t", 0, i, v, 1_700_000_000_000 + i) for i, v in enumerate(lines)]
    return [str(paths["config"])], records


def _results(out: BatchOutput) -> list[Any]:
    return [[repr(r.to_json()) for r in rows]  # repr: nan == nan
            for rows in (out.alarms, out.trace_points, out.ood_windows, out.dead_letters)]


def test_npz_checkpoint_loads_and_continues_exactly(
    example: tuple[list[str], list[RawRecord]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint written in the npz layout by an earlier version loads, has the layout of
    today's states, and continues exactly as the same state written in today's layout.

    (Its values are no longer today's to the last bit: kNN distances are now summed in a fixed
    order per row, ``monitor/core/ood/_distances.py``, which moved the calibration scores by an
    ulp.)
    """
    configs, records = example
    # The checkpoint was written when the conditional monitor's default betting was the Simple
    # Mixture (the plug-in power since #19); the uninterrupted run must use the same one.
    defaults = ConditionalMonitor.__init__.__defaults__ or ()
    monkeypatch.setattr(ConditionalMonitor.__init__, "__defaults__",
                        tuple("mixture" if d == "plug_in_power" else d for d in defaults))
    old_text = (DATA / "checkpoint_npz_v1.json").read_text()
    old_state = decode_state(old_text, (DATA / "checkpoint_npz_v1.npz").read_bytes())["state"]

    uninterrupted = Pipeline(build_monitors(read_configs(configs)), "file:x")
    uninterrupted.process(records[:SPLIT])
    (name, monitor), = uninterrupted.streams.items()
    now = _layout(monitor.state_dict())
    # Keys added since (read with defaults when absent): the configuration version in force,
    # the alarms waiting for their evidence and the diagnosis' min_events (alarm revisions), the
    # open performance window and attribution windows (docs/explain.md), data quality and
    # schema changes (docs/tabular.md).
    assert set(now) - set(_layout(old_state)) == {
        "config_version", "version_since", "unrevised", "performance", "attribution", "attributed",
        "quality",
    }
    assert now["detectors"].pop("pending") == []
    assert now["detectors"]["params"].pop("min_events") == "int"
    # The OOD part's layout follows its configuration: since the default became full-conformal
    # KNN p-values its runs hold leave-one-out distances, not split calibration scores. The old
    # split runs still load and continue (below). Deeper, the rules' changepoint estimate (the
    # latest argmin when absent) and the weighted reference's window (unbounded when absent).
    now = _without_keys_added_since(now)
    assert _layout({k: v for k, v in old_state.items() if k != "ood"}) == {
        k: v for k, v in now.items() if k in old_state and k != "ood"
    }

    restored = Pipeline(build_monitors(read_configs(configs)), "file:x")
    restored.streams[name].load_state(old_state)
    text, blob = encode_state({"state": old_state, "arrays": {}})  # written in the new layout
    assert blob is not None and blob.startswith(BLOB_MAGIC)
    rewritten = Pipeline(build_monitors(read_configs(configs)), "file:x")
    rewritten.streams[name].load_state(decode_state(text, blob)["state"])
    want = uninterrupted.process(records[SPLIT:])
    got, again = restored.process(records[SPLIT:]), rewritten.process(records[SPLIT:])
    assert len(got.trace_points) > 20  # p-values and martingales after the split
    assert _results(again) == _results(got)
    assert [a.event_index for a in got.alarms] == [a.event_index for a in want.alarms]
    final = restored.streams[name].state_dict()
    assert canonical(rewritten.streams[name].state_dict()) == canonical(final)


_ADDED_SINCE = {
    "estimate": "argmin",  # an alarm rule's running minimum
    "reference_window": "adapt",  # the conditional monitor's parameters
    "window": "grow_reference",  # the weighted p-values' parameters
    "n_fixed": "sum_w2",  # the weighted p-values' state
    "n_evicted": "sum_w2",
    "joined": "labels",  # the label join's ids of pairs joined (replays refuse them again)
    "outside": "labels",  # the label join's support flags of the waiting predictions
    "reference_limit": "support_level",  # the covariate monitor's bounded reference
    "reference_bank": "support_level",  # and its reference bank
}


def _without_keys_added_since(layout: Any) -> Any:
    """A layout without the keys added since the checkpoint was written (each recognised by a
    sibling key of the dict it belongs to)."""
    if isinstance(layout, dict):
        return {k: _without_keys_added_since(v) for k, v in layout.items()
                if not (k in _ADDED_SINCE and _ADDED_SINCE[k] in layout)}
    if isinstance(layout, list):
        return [_without_keys_added_since(v) for v in layout]
    return layout


def _layout(value: Any) -> Any:
    """Keys, types and array shapes of a state, not its values."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape)
    if isinstance(value, dict):
        return {k: _layout(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_layout(v) for v in value]
    return type(value).__name__
