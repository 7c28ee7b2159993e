"""The notebook API (monitor/notebook.py): ``monitor.watch`` on the Shuttle stream."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import monitor
from monitor.notebook import NotebookMonitor, Trace
from monitor.ops.datasets import SHUTTLE_FEATURES
from monitor.streams.calibration import Calibration
from monitor.streams.config import DEFAULT_THRESHOLD, StreamConfig
from monitor.streams.events import Event, LabelEvent, PredictionEvent
from monitor.streams.monitor import StreamMonitor
from tests.support.probe import assert_in_fresh_interpreter
from tests.support.real_alarms import scripted_stream

COVARIATE_ALARM = {"rule": "shiryaev_roberts", "threshold": 1000}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _calibration() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = scripted_stream()
    return data.X_calibration, data.pred_calibration, data.y_calibration


def _rows(X: np.ndarray, pred: np.ndarray, y: np.ndarray | None) -> list[dict[str, Any]]:
    rows = []
    for i in range(len(X)):
        row: dict[str, Any] = dict(zip(SHUTTLE_FEATURES, X[i].tolist(), strict=True))
        row["prediction"] = float(pred[i])
        if y is not None:
            row["label"] = float(y[i])
        rows.append(row)
    return rows


def _summary(m: NotebookMonitor) -> list[tuple[Any, ...]]:
    return [(a.detector, a.kind, a.event_index, a.changepoint, a.statistic) for a in m.alarms]


def _with_nan(X: np.ndarray, row: int, column: int) -> np.ndarray:
    X = X.copy()
    X[row, column] = np.nan
    return X


def _times(n: int, first: int = 0) -> list[datetime]:
    return [T0 + timedelta(seconds=first + i) for i in range(n)]


@pytest.fixture(scope="module")
def by_arrays() -> NotebookMonitor:
    """The whole stream fed as arrays in three batches."""
    data = scripted_stream()
    m = monitor.watch(_calibration(), covariate_alarm=COVARIATE_ALARM)
    for start in (0, 300, 600):
        part = slice(start, start + 300)
        m.update(data.X[part], data.pred[part], data.y[part], ts=_times(300, start))
    return m


def test_import_monitor_stays_light() -> None:
    probe = (
        "import sys, monitor\n"
        "heavy = [m for m in ('numpy', 'scipy', 'sqlalchemy', 'pandas', 'matplotlib', 'numba')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "import monitor.cli.main\n"
        "heavy = [m for m in ('numpy', 'scipy', 'sqlalchemy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert {'watch', 'NotebookMonitor', 'Trace'} <= set(dir(monitor))\n"
        "assert callable(monitor.watch) and 'numpy' in sys.modules\n"
    )
    assert_in_fresh_interpreter(probe)


def test_unknown_top_level_name() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'wach'"):
        monitor.wach  # noqa: B018


def test_alarms_with_diagnosis_and_evidence(by_arrays: NotebookMonitor) -> None:
    kinds = [(a.detector, a.kind) for a in by_arrays.alarms]
    assert ("conditional", "concept_shift") in kinds
    assert ("covariate", "extreme_covariate_shift") in kinds
    for alarm in by_arrays.alarms:
        assert alarm.statistic >= alarm.threshold
        assert alarm.changepoint is not None and alarm.changepoint <= alarm.event_index
        assert "outside_support_fraction" in alarm.evidence
        assert alarm.stream == "notebook"


def test_same_results_as_the_stream_monitor(by_arrays: NotebookMonitor) -> None:
    """The notebook API is the service's stream monitor: the same events give the same alarms
    and every trace point."""
    data = scripted_stream()
    config = StreamConfig(name="notebook", task="regression", calibration="x",
                          alarm={"threshold": DEFAULT_THRESHOLD},  # watch's (no event times)
                          covariate_alarm=COVARIATE_ALARM, trace_every=1)
    stream = StreamMonitor(config, Calibration(*_calibration()))
    events: list[Event] = [
        PredictionEvent(stream="notebook", id=str(i), ts=T0 + timedelta(seconds=i),
                        features=data.X[i].tolist(), prediction=float(data.pred[i]),
                        label=float(data.y[i]))
        for i in range(len(data))
    ]
    stream.step(events, lambda k: T0)
    alarms, points, _ = stream.drain()
    _, evidence = stream.drain_explanations()  # feature attributions complete earlier alarms
    extra = {e.alarm_id: e.evidence for e in evidence}
    alarms = [replace(a, evidence={**a.evidence, **extra.get(a.id, {})}) for a in alarms]
    assert by_arrays.alarms == alarms
    for detector in ("covariate", "conditional"):
        trace = getattr(by_arrays.trace, detector)
        expected = {p.event_index: p for p in points if p.detector == detector}
        assert trace.event_index.tolist() == sorted(expected)
        assert np.array_equal(trace.log_statistic,
                              [expected[i].log_statistic for i in trace.event_index],
                              equal_nan=True)
    assert len(by_arrays.trace.covariate) == len(data)  # trace_every=1: one point per event


def test_rows_and_dataframes_give_the_same_alarms(by_arrays: NotebookMonitor) -> None:
    pd = pytest.importorskip("pandas")
    data = scripted_stream()
    X_cal, p_cal, y_cal = _calibration()
    by_rows = monitor.watch(_rows(X_cal, p_cal, y_cal), covariate_alarm=COVARIATE_ALARM)
    by_frame = monitor.watch(pd.DataFrame(_rows(X_cal, p_cal, y_cal)),
                             covariate_alarm=COVARIATE_ALARM)
    assert by_rows.stream.calibration.feature_names == SHUTTLE_FEATURES
    for start in (0, 300, 600):
        part = slice(start, start + 300)
        rows = _rows(data.X[part], data.pred[part], data.y[part])
        by_rows.update(rows, ts=_times(300, start))
        frame = pd.DataFrame(rows)[list(reversed(frame_columns()))]  # column order is free
        by_frame.update(frame, ts=pd.to_datetime(_times(300, start)))
    assert _summary(by_rows) == _summary(by_frame) == _summary(by_arrays)


def frame_columns() -> list[str]:
    return [*SHUTTLE_FEATURES, "prediction", "label"]


def test_labels_later_by_id() -> None:
    """Predictions first, labels 25 events later by id: the same alarms as the stream monitor
    given the same prediction and label events."""
    data = scripted_stream()
    m = monitor.watch(_calibration(), covariate_alarm=COVARIATE_ALARM)
    config = StreamConfig(name="notebook", task="regression", calibration="x",
                          alarm={"threshold": DEFAULT_THRESHOLD},  # watch's (no event times)
                          covariate_alarm=COVARIATE_ALARM, trace_every=1)
    stream = StreamMonitor(config, Calibration(*_calibration()))
    delay, n = 25, 700
    for start in range(0, n, delay):
        part = slice(start, start + delay)
        ids = [f"e{i}" for i in range(start, start + delay)]
        m.update(data.X[part], data.pred[part], ids=ids)
        events: list[Event] = [
            PredictionEvent(stream="notebook", id=i, features=data.X[k].tolist(),
                            prediction=float(data.pred[k]))
            for k, i in zip(range(start, start + delay), ids, strict=True)
        ]
        if start:
            late = range(start - delay, start)
            m.add_labels([f"e{k}" for k in late], data.y[late.start:late.stop])
            events += [LabelEvent(stream="notebook", id=f"e{k}", label=float(data.y[k]))
                       for k in late]
        stream.step(events, lambda k: T0)
    expected = [(a.detector, a.kind, a.event_index, a.changepoint, a.statistic)
                for a in stream.drain()[0]]
    assert _summary(m) == expected
    assert ("conditional", "concept_shift") in [(a[0], a[1]) for a in expected]


def test_integer_ids_and_epoch_times_as_on_the_wire(by_arrays: NotebookMonitor) -> None:
    """Issue #31: integer ids are their decimal strings (labels given later by the string join
    them) and times may be epoch seconds or milliseconds (from 1e11), numpy numbers too."""
    data = scripted_stream()
    m = monitor.watch(_calibration(), covariate_alarm=COVARIATE_ALARM)
    epoch = int(T0.timestamp())
    for start in (0, 300, 600):
        part = slice(start, start + 300)
        ids = np.arange(start, start + 300)  # numpy integers
        millis = (epoch + ids) * 1000
        m.update(data.X[part], data.pred[part], ids=list(ids), ts=list(millis))
        m.add_labels([str(i) for i in ids], data.y[part], ts=[float(epoch + i) for i in ids])
    assert _summary(m) == _summary(by_arrays)
    assert [a.ts for a in m.alarms] == [a.ts for a in by_arrays.alarms]
    assert [a.event_id for a in m.alarms] == [str(a.event_index) for a in by_arrays.alarms]
    with pytest.raises(ValueError, match="timestamps must be datetimes or epoch numbers"):
        m.update(data.X[:1], data.pred[:1], ts=[True])


def test_save_and_load_resume_exactly(by_arrays: NotebookMonitor, tmp_path: Path) -> None:
    data = scripted_stream()
    m = monitor.watch(_calibration(), covariate_alarm=COVARIATE_ALARM)
    m.update(data.X[:450], data.pred[:450], data.y[:450], ts=_times(450))
    m.save(tmp_path / "monitor.json")
    resumed = NotebookMonitor.load(tmp_path / "monitor.json")
    assert resumed.n_events == 450 and resumed.alarms == m.alarms
    resumed.update(data.X[450:], data.pred[450:], data.y[450:], ts=_times(450, 450))
    assert resumed.alarms == by_arrays.alarms
    for detector in ("covariate", "conditional"):
        got, expected = getattr(resumed.trace, detector), getattr(by_arrays.trace, detector)
        for name in expected.dtype.names:
            assert np.array_equal(got[name], expected[name], equal_nan=True), (detector, name)
    (tmp_path / "other.json").write_text('{"format": 99}')
    with pytest.raises(ValueError, match=r"not a monitor saved by NotebookMonitor\.save"):
        NotebookMonitor.load(tmp_path / "other.json")


def test_trace_to_pandas(by_arrays: NotebookMonitor) -> None:
    pytest.importorskip("pandas")
    frame = by_arrays.trace.to_pandas()
    assert list(frame.columns) == ["detector", "event_index", "log_martingale", "p_value",
                                   "log_statistic", "log_threshold", "weights_ess"]
    assert len(frame) == len(by_arrays.trace)
    assert (frame.detector == "covariate").sum() == len(by_arrays.trace.covariate)


def test_works_without_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    """pandas hidden (an import of it fails): arrays and dict rows work, ``to_pandas`` says
    how to install it."""
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError):
        import pandas  # noqa: F401
    data = scripted_stream()
    X_cal, p_cal, y_cal = _calibration()
    m = monitor.watch(_rows(X_cal, p_cal, y_cal), alarm={"rule": "ville", "alpha": 0.01})
    m.update(_rows(data.X[:50], data.pred[:50], data.y[:50]))
    m.update(data.X[50:60], data.pred[50:60])
    assert m.n_events == 60 and len(m.trace.covariate) == 60
    with pytest.raises(ImportError, match=r"pip install 'conformal-monitor\[pandas\]'"):
        m.trace.to_pandas()


def test_classification() -> None:
    """Probability vectors make a classification monitor; labels are class indexes."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    logits = np.stack([X[:, 0], -X[:, 0]], axis=1)
    P = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (rng.random(200) < P[:, 1]).astype(int)
    m = monitor.watch((X[:100], P[:100], y[:100]))
    assert m.stream.config.task == "classification"
    assert m.stream.config.score == "one_minus_prob"
    m.update(X[100:], P[100:], y[100:])
    assert m.n_events == 100
    with pytest.raises(ValueError, match=r"class indexes in \[0, 2\)"):
        m.update(X[:1], P[:1], [2])


def test_a_missing_value_in_a_numeric_stream_is_monitored() -> None:
    """NaN where the calibration had none: a monitored missing value (the data-quality
    monitor counts it), not an error (docs/tabular.md)."""
    data = scripted_stream()
    m = monitor.watch(_rows(*_calibration()))
    m.update(_with_nan(data.X[:10].copy(), 3, 1), data.pred[:10], data.y[:10])
    assert m.n_events == 10


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, X, P, y: m.update(X + np.inf, P, y),
         "features: row 0, column 'f2': inf is not a finite number of magnitude <= 1e\\+100"),
        (lambda m, X, P, y: m.update(X[:, :4], P, y), "features have 4 columns, the "
         "calibration has 5"),
        (lambda m, X, P, y: m.update(X, P[:-1], y), r"predictions must be 10 numbers, got "
         r"shape \(9,\)"),
        (lambda m, X, P, y: m.update(X, P, y[:-1]), "got 9 labels for 10 rows"),
        (lambda m, X, P, y: m.update(X), "predictions are required with a features array"),
        (lambda m, X, P, y: m.update(X, P, ids=["a"] * 10), "duplicate event id 'a'"),
        (lambda m, X, P, y: m.update([{"f2": 1.0}]), "row 0 has no column 'f3'"),
        (lambda m, X, P, y: m.update("rows"), "features must be numbers"),
        (lambda m, X, P, y: m.update(X[0], P[:1]), "must be a non-empty 2-D array"),
        (lambda m, X, P, y: m.add_labels(["x"], [np.nan]), "labels must be known"),
    ],
    ids=["inf", "width", "predictions", "labels", "no-predictions", "duplicate-ids",
         "missing-column", "not-a-table", "one-row-1d", "unknown-label"],
)
def test_bad_batches_change_nothing(call: Any, message: str) -> None:
    data = scripted_stream()
    X_cal, p_cal, y_cal = _calibration()
    m = monitor.watch(_rows(X_cal, p_cal, y_cal))
    X, P, y = data.X[:10].copy(), data.pred[:10], data.y[:10]
    with pytest.raises(ValueError, match=message):
        call(m, X, P, y)
    assert m.n_events == 0 and m.alarms == [] and len(m.trace) == 0


@pytest.mark.parametrize(
    ("calibration", "options", "message"),
    [
        ((np.zeros((10, 2)), np.zeros(10), np.zeros(10)), {}, "at least 20 rows, got 10"),
        ((np.zeros((30, 2)), np.zeros(30)), {}, r"\(features, predictions, labels\)"),
        ((np.zeros((30, 2)), np.zeros(30), np.full(30, np.nan)), {}, "needs a label"),
        ("data.csv", {}, "got str"),
        ((np.zeros((30, 2)), np.zeros(30), np.zeros(30)), {"alarm": {"rule": "x"}},
         "invalid monitor options"),
    ],
    ids=["too-small", "two-arrays", "no-labels", "a-path", "bad-option"],
)
def test_bad_calibration(calibration: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        monitor.watch(calibration, **options)


def test_trace_is_a_record_array(by_arrays: NotebookMonitor) -> None:
    trace = by_arrays.trace
    assert isinstance(trace, Trace)
    assert trace.conditional.dtype.names == (
        "event_index", "log_martingale", "p_value", "log_statistic", "log_threshold",
        "weights_ess")
    assert np.all(np.isnan(trace.covariate.weights_ess))
    assert np.isfinite(trace.conditional.log_statistic).all()
