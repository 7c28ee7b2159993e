"""Feature attribution of covariate alarms: which features moved (docs/explain.md).

After a covariate or extreme-covariate alarm, the next ``window`` prediction events of the stream
are compared with the calibration rows, feature by feature, by a two-sample Kolmogorov–Smirnov
test; Holm's step-down procedure adjusts the p-values across features. The window starts *after*
the alarm, so the alarm did not choose it: this is what keeps the p-values valid although the
alarm decided when to look (see :data:`GUARANTEE`). Pure computation, no I/O; the state
round-trips through :meth:`AlarmAttribution.state_dict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from monitor.core.attribution import category_test, holm_adjusted, missing_rate_test
from monitor.streams.schema import FeatureSchema

__all__ = [
    "GUARANTEE",
    "METHOD",
    "AlarmAttribution",
    "CompletedAttribution",
    "attribute_features",
    "density_ratio_directions",
    "holm_adjusted",
]

FloatArray = NDArray[np.float64]

METHOD = "ks_holm_post_alarm"

GUARANTEE = (
    "p_value: two-sample Kolmogorov-Smirnov test of one feature, the window of prediction "
    "events after the alarm against the calibration rows; the window starts after the alarm, "
    "so the alarm did not choose it. If the window's events are independent of the events "
    "before it and a feature's distribution equals its calibration distribution, "
    "P(p_value <= a) <= a (conservative for tied values). p_adjusted: Holm's step-down "
    "adjustment across features; P(some feature whose distribution did not change has "
    "p_adjusted <= a) <= a, under any dependence between features."
)

#: Default number of post-alarm prediction events in an attribution window.
DEFAULT_WINDOW = 200


def attribute_features(
    reference: ArrayLike,
    window: ArrayLike,
    feature_names: Sequence[str],
    start_index: int = 0,
    end_index: int | None = None,
) -> dict[str, Any]:
    """Per-feature two-sample Kolmogorov–Smirnov tests of ``window`` (n, d) against
    ``reference`` (m, d), Holm-adjusted, in the shape of ``alarm.evidence["attribution"]``.

    ``statistic`` is the KS distance sup_x |F̂_window(x) − F̂_reference(x)| (Kolmogorov 1933,
    Smirnov 1939); ``p_value`` its two-sided p-value from ``scipy.stats.ks_2samp``: exact
    (Hodges 1958) when both samples have at most 10 000 rows, else asymptotic; conservative
    when values tie.
    Features are sorted by p-value ascending, then statistic descending.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> reference = rng.normal(size=(500, 3))
    >>> window = rng.normal(size=(200, 3)) + [0.0, 0.6, 0.0]
    >>> out = attribute_features(reference, window, ["a", "b", "c"], 100, 299)
    >>> [f["feature"] for f in out["features"]][0], out["window"]
    ('b', {'start_index': 100, 'end_index': 299, 'n': 200})
    """
    ref = _matrix(reference, "reference")
    win = _matrix(window, "window")
    names = [str(name) for name in feature_names]
    if ref.shape[1] != win.shape[1] or len(names) != ref.shape[1]:
        raise ValueError(
            f"reference has {ref.shape[1]} columns, window {win.shape[1]} and there are "
            f"{len(names)} feature names; they must agree"
        )
    if ref.shape[0] < 2 or win.shape[0] < 2:
        raise ValueError("reference and window need at least 2 rows each")
    statistic, p_value = ks_statistics(ref, win)
    adjusted = holm_adjusted(p_value)
    order = np.lexsort((-statistic, p_value))
    end = int(start_index) + win.shape[0] - 1 if end_index is None else int(end_index)
    return {
        "method": METHOD,
        "guarantee": GUARANTEE,
        "window": {"start_index": int(start_index), "end_index": end, "n": int(win.shape[0])},
        "features": [
            {
                "feature": names[j],
                "statistic": float(statistic[j]),
                "p_value": float(p_value[j]),
                "p_adjusted": float(adjusted[j]),
            }
            for j in order.tolist()
        ],
    }


#: The method of a tabular stream's attribution (docs/tabular.md, "Attribution by type").
TYPED_METHOD = "typed_holm_post_alarm"

TYPED_GUARANTEE = (
    "Per original column, the window of prediction events after the alarm against the "
    "calibration rows (the window starts after the alarm, so the alarm did not choose it): "
    "numeric — a two-sample Kolmogorov-Smirnov test of the values present; categorical — a "
    "G-test of the counts over the vocabulary, other, unseen and missing cells (chi-square, or "
    "a Monte Carlo permutation p-value where an expected count is small); missing — Fisher's "
    "exact test of the missing rate. Each p-value is valid (P(p <= a) <= a) when the window's "
    "events are independent of those before it and the column did not change. p_adjusted: "
    "Holm's step-down adjustment across all the tests; P(some unchanged column's test has "
    "p_adjusted <= a) <= a, under any dependence."
)


def attribute_mixed(
    reference: ArrayLike,
    window: ArrayLike,
    schema: FeatureSchema,
    start_index: int = 0,
    end_index: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Attribution of a tabular stream's alarm by feature type (docs/tabular.md): code rows
    ``window`` (n, d) against the calibration's ``reference`` (m, d), one test per numeric or
    categorical column and one of the missing rate per column with a missing value in either,
    Holm-adjusted together, each named by its original column; sorted by p-value ascending.
    A categorical entry carries the cells' shares before and after (``frequencies``)."""
    ref = _matrix(reference, "reference", missing=True)
    win = _matrix(window, "window", missing=True)
    entries: list[dict[str, Any]] = []
    for j, feature in enumerate(schema.features):
        r, w = ref[:, j], win[:, j]
        r_missing, w_missing = np.isnan(r), np.isnan(w)
        if feature.kind == "categorical":
            n_codes = int(feature.unseen) + 1  # vocabulary, other, unseen
            cells = [*feature.vocabulary, "other", "unseen", "missing"]
            out = category_test(_cell_counts(r, n_codes), _cell_counts(w, n_codes), cells,
                                seed=seed + j)
            entries.append({"feature": feature.name, "type": "categorical", **out})
            continue
        r_present, w_present = r[~r_missing], w[~w_missing]
        if r_present.size >= 2 and w_present.size >= 2:
            statistic, p_value = ks_statistics(r_present[:, None], w_present[:, None])
            entries.append({"feature": feature.name, "type": "numeric", "test": "ks",
                            "statistic": float(statistic[0]), "p_value": float(p_value[0])})
        if r_missing.any() or w_missing.any():
            out = missing_rate_test(int(r.size), int(r_missing.sum()), int(w.size),
                                    int(w_missing.sum()))
            entries.append({"feature": feature.name, "type": "missing", **out})
    adjusted = holm_adjusted([e["p_value"] for e in entries])
    for entry, p in zip(entries, adjusted.tolist(), strict=True):
        entry["p_adjusted"] = float(p)
    order = sorted(range(len(entries)),
                   key=lambda i: (entries[i]["p_value"], -abs(entries[i]["statistic"])))
    end = int(start_index) + win.shape[0] - 1 if end_index is None else int(end_index)
    return {
        "method": TYPED_METHOD,
        "guarantee": TYPED_GUARANTEE,
        "window": {"start_index": int(start_index), "end_index": end, "n": int(win.shape[0])},
        "features": [entries[i] for i in order],
    }


def _cell_counts(codes: FloatArray, n_codes: int) -> NDArray[np.int64]:
    """Counts of codes 0..n_codes-1 and a last cell of the missing (NaN) values."""
    missing = np.isnan(codes)
    counts = np.bincount(codes[~missing].astype(np.intp), minlength=n_codes)[:n_codes]
    return np.append(counts, int(missing.sum())).astype(np.int64)


def ks_statistics(reference: FloatArray, window: FloatArray) -> tuple[FloatArray, FloatArray]:
    """KS distance and two-sided p-value of each column of ``window`` against the same
    column of ``reference``."""
    result = stats.ks_2samp(window, reference, axis=0, method="auto")
    return (
        np.asarray(result.statistic, np.float64).reshape(-1),
        np.clip(np.asarray(result.pvalue, np.float64).reshape(-1), 0.0, 1.0),
    )


def density_ratio_directions(
    coefficients: ArrayLike, feature_names: Sequence[str]
) -> list[dict[str, Any]]:
    """The weighted monitor's density ratio w(x) ∝ exp(β·z(x)) (a logistic model on the
    standardised inputs z, Prinster et al. 2025, WATCH, Sec. 4.2) read as directions: β_j is
    the change of log w per standard deviation of feature j. Largest |β_j| first."""
    beta = np.asarray(coefficients, dtype=np.float64).ravel()
    if beta.size != len(feature_names):
        raise ValueError(f"{beta.size} coefficients for {len(feature_names)} features")
    order = np.lexsort((np.arange(beta.size), -np.abs(beta)))
    return [{"feature": str(feature_names[j]), "weight": float(beta[j])} for j in order.tolist()]


@dataclass(slots=True)
class _OpenWindow:
    alarm_id: str
    rows: list[list[float]] = field(default_factory=list)
    start_index: int | None = None
    end_index: int = -1
    #: A window of an alarm raised under an earlier configuration version: that version's
    #: sorted calibration rows and window length (None: this object's).
    reference: FloatArray | None = None
    size: int | None = None


@dataclass(frozen=True, slots=True)
class CompletedAttribution:
    """The attribution of one alarm, ready to join its evidence."""

    alarm_id: str
    attribution: dict[str, Any]


class AlarmAttribution:
    """Collects the ``window`` prediction events after each alarm it is told of and, once a
    window is full, attributes the alarm (:func:`attribute_features` against the calibration).

    Parameters
    ----------
    calibration_X
        The calibration rows (m, d); only each column's sorted values are kept (the KS test
        reads the marginals only).
    feature_names
        One name per column.
    window
        Post-alarm prediction events per attribution, >= 20.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(3)
    >>> attribution = AlarmAttribution(rng.normal(size=(400, 2)), ["x0", "x1"], window=50)
    >>> attribution.open("alarm-1")
    >>> done = attribution.add(rng.normal(size=(60, 2)) + [0.0, 1.5], first_index=10)
    >>> [(d.alarm_id, d.attribution["features"][0]["feature"]) for d in done]
    [('alarm-1', 'x1')]
    """

    def __init__(
        self, calibration_X: ArrayLike, feature_names: Sequence[str], window: int = DEFAULT_WINDOW,
        schema: FeatureSchema | None = None,
    ) -> None:
        if not (isinstance(window, int) and window >= 20):
            raise ValueError(f"window must be an integer >= 20, got {window!r}")
        reference = _matrix(calibration_X, "calibration_X", missing=schema is not None)
        if len(feature_names) != reference.shape[1]:
            raise ValueError(
                f"{len(feature_names)} feature names for {reference.shape[1]} calibration columns"
            )
        self.window = window
        #: A tabular stream's schema: its code rows are attributed by type
        #: (:func:`attribute_mixed`); None for numeric features (:func:`attribute_features`).
        self.schema = schema
        self.feature_names = tuple(str(name) for name in feature_names)
        self._reference = np.sort(reference, axis=0)
        self._open: list[_OpenWindow] = []

    @property
    def pending(self) -> tuple[str, ...]:
        """Ids of the alarms whose window is still filling."""
        return tuple(w.alarm_id for w in self._open)

    @property
    def reference(self) -> FloatArray:
        """The calibration rows, each column sorted (what the windows are tested against)."""
        return self._reference

    def open(
        self, alarm_id: str, reference: FloatArray | None = None, size: int | None = None
    ) -> None:
        """Start the window of an alarm: the prediction events added from now on. An alarm
        raised under an earlier configuration version passes that version's sorted calibration
        rows (:attr:`reference`) and window length."""
        self._open.append(_OpenWindow(alarm_id, reference=reference, size=size))

    def adopt(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """Take over the open windows of :meth:`state_dict` output taken under an earlier
        configuration version (another calibration or window length): each completes as it
        would have under that version, against its calibration (the state's ``reference``;
        a state written before it was kept gives this object's) and at its length. Windows
        need the same features (names, in order); with others none is taken over, and the
        windows are returned as :meth:`close` returns them (their caller closes them)."""
        if tuple(state["feature_names"]) != self.feature_names:
            width = max(1, len(state["feature_names"]))
            return [
                _collected(str(w["alarm_id"]), w["start_index"],
                           np.asarray(w["rows"]).size // width, int(w["end_index"]))
                for w in state["open"]
            ]
        shared = state.get("reference")
        for w in self._windows(state):
            if w.reference is None and shared is not None:
                w.reference = np.asarray(shared, np.float64).reshape(-1, len(self.feature_names))
            w.size = w.size or int(state["window"])
            self._open.append(w)
        return []

    def add(self, X: ArrayLike, first_index: int) -> list[CompletedAttribution]:
        """Prediction events with stream indexes first_index, first_index + 1, …; the
        attributions of the windows they completed, in the order the alarms were opened."""
        if not self._open:
            return []
        rows = _matrix(X, "X", min_rows=0, missing=self.schema is not None)
        done: list[CompletedAttribution] = []
        for w in self._open:
            size = w.size or self.window
            take = min(size - len(w.rows), rows.shape[0])
            if take <= 0:
                continue
            if w.start_index is None:
                w.start_index = int(first_index)
            w.rows.extend(rows[:take].tolist())
            w.end_index = int(first_index) + take - 1
            if len(w.rows) == size:
                reference = self._reference if w.reference is None else w.reference
                if self.schema is None:
                    attribution = attribute_features(
                        reference, np.asarray(w.rows), self.feature_names,
                        w.start_index, w.end_index)
                else:
                    attribution = attribute_mixed(
                        reference, np.asarray(w.rows), self.schema, w.start_index,
                        w.end_index, seed=w.start_index)
                done.append(CompletedAttribution(w.alarm_id, attribution))
        self._open = [w for w in self._open if len(w.rows) < (w.size or self.window)]
        return done

    def close(self) -> list[dict[str, Any]]:
        """Close every open window without attributing it; what each had collected, as
        ``{"alarm_id", "window": {"start_index", "end_index", "n"}}`` (start_index None when
        empty)."""
        closed = [_collected(w.alarm_id, w.start_index, len(w.rows), w.end_index)
                  for w in self._open]
        self._open = []
        return closed

    def state_dict(self, keep_reference: bool = False) -> dict[str, Any]:
        """JSON-ready state: the open windows. The calibration, which the stream's configuration
        holds, is included (``reference``, sorted) only while a window is open or when
        ``keep_reference`` asks for it: :meth:`load_state` takes it from the object it restores
        into, but after a configuration update it is gone and :meth:`adopt` needs it. A window
        taken over from an earlier version keeps its own reference and length."""
        state: dict[str, Any] = {
            "window": self.window,
            "feature_names": list(self.feature_names),
            "open": [self._window_state(w) for w in self._open],
        }
        if keep_reference or any(w.reference is None for w in self._open):
            state["reference"] = self._reference
        return state

    @staticmethod
    def _window_state(w: _OpenWindow) -> dict[str, Any]:
        state = {"alarm_id": w.alarm_id, "rows": np.asarray(w.rows, np.float64),
                 "start_index": w.start_index, "end_index": w.end_index}
        if w.reference is not None:
            state["reference"] = w.reference
        if w.size is not None:
            state["size"] = w.size
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume the open windows of :meth:`state_dict` output, taken with the same window and
        features (and calibration)."""
        if int(state["window"]) != self.window or tuple(state["feature_names"]) != \
                self.feature_names:
            raise ValueError("the state was taken with another window or other features")
        self._open = self._windows(state)

    def _windows(self, state: dict[str, Any]) -> list[_OpenWindow]:
        d = len(self.feature_names)
        out = []
        for w in state["open"]:
            rows = np.asarray(w["rows"], np.float64).reshape(-1, d).tolist()
            start = None if w["start_index"] is None else int(w["start_index"])
            reference = w.get("reference")
            out.append(_OpenWindow(
                str(w["alarm_id"]), rows, start, int(w["end_index"]),
                None if reference is None else np.asarray(reference, np.float64).reshape(-1, d),
                None if w.get("size") is None else int(w["size"]),
            ))
        return out


def _collected(alarm_id: str, start_index: int | None, n: int, end_index: int) -> dict[str, Any]:
    """What a window closed unattributed had collected (:meth:`AlarmAttribution.close`)."""
    return {"alarm_id": alarm_id, "window": {
        "start_index": start_index, "n": n, "end_index": end_index if n else None}}


def _matrix(X: ArrayLike, name: str, min_rows: int = 1, missing: bool = False) -> FloatArray:
    """A float matrix, finite (``missing``: NaN allowed, a tabular stream's missing value)."""
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim == 1 and min_rows == 0 and arr.size == 0:
        return arr.reshape(0, 0)
    if arr.ndim != 2 or arr.shape[0] < min_rows:
        raise ValueError(f"{name} must be a 2-d array with >= {min_rows} rows, got {arr.shape}")
    if not (np.isfinite(arr) | (missing & np.isnan(arr))).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr
