"""Attribution windows taken over by a new configuration version (:meth:`AlarmAttribution.adopt`):
they complete at the old window length against the old calibration, through a checkpoint too;
with other features they are handed back to be closed."""

from __future__ import annotations

import numpy as np

from monitor.streams.attribution import AlarmAttribution
from monitor.streams.state import decode_state, encode_state


def test_an_adopted_window_completes_as_under_its_version() -> None:
    rng = np.random.default_rng(11)
    old_calibration = rng.normal(size=(300, 2))
    new_calibration = rng.normal(size=(200, 2)) + np.array([2.0, 0.0])  # recalibrated on it
    stream = rng.normal(size=(80, 2)) + np.array([2.0, 0.0])
    whole = AlarmAttribution(old_calibration, ["u", "v"], window=40)
    whole.open("a")
    (expected,) = whole.add(stream, 0)
    assert expected.attribution["features"][0]["feature"] == "u"

    old = AlarmAttribution(old_calibration, ["u", "v"], window=40)
    old.open("a")
    old.add(stream[:15], 0)
    state = old.state_dict()
    assert np.array_equal(state["reference"], np.sort(old_calibration, axis=0))
    new = AlarmAttribution(new_calibration, ["u", "v"], window=25)
    assert new.adopt(decode_state(*encode_state(state))) == []
    assert new.pending == ("a",)
    new.open("b")  # an alarm of the new version: its own window and calibration
    # a checkpoint of the new version keeps the adopted window's reference and length
    resumed = AlarmAttribution(new_calibration, ["u", "v"], window=25)
    resumed.load_state(decode_state(*encode_state(new.state_dict())))
    done = resumed.add(stream[15:], 15)
    assert [d.alarm_id for d in done] == ["a", "b"]  # in the order opened
    assert done[0].attribution == expected.attribution  # as if never updated
    b = AlarmAttribution(new_calibration, ["u", "v"], window=25)
    b.open("b")
    assert done[1].attribution == b.add(stream[15:], 15)[0].attribution


def test_other_features_hand_the_windows_back() -> None:
    rng = np.random.default_rng(12)
    old = AlarmAttribution(rng.normal(size=(100, 3)), ["u", "v", "w"], window=30)
    old.open("a")
    old.add(rng.normal(size=(12, 3)), 7)
    old.open("b")
    new = AlarmAttribution(rng.normal(size=(100, 2)), ["u", "v"], window=30)
    assert new.adopt(decode_state(*encode_state(old.state_dict()))) == [
        {"alarm_id": "a", "window": {"start_index": 7, "n": 12, "end_index": 18}},
        {"alarm_id": "b", "window": {"start_index": None, "n": 0, "end_index": None}},
    ]
    assert new.pending == ()
    assert old.close() == [
        {"alarm_id": "a", "window": {"start_index": 7, "n": 12, "end_index": 18}},
        {"alarm_id": "b", "window": {"start_index": None, "n": 0, "end_index": None}},
    ]
    assert old.pending == ()
