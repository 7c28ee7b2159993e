"""Per-stream OOD flags: scorers → conformal p-values → g-BH / eg-BH over windows, or LOND.

Pure computation (no I/O): the pipeline feeds events with :meth:`OODDecider.add` (or batches of
already checked rows with :meth:`OODDecider.add_many`, same windows and state), drains finished
windows with :meth:`OODDecider.windows` and persists them; :meth:`OODDecider.state_dict` keeps the
pending window across restarts.

Calibration and exchangeability. An unfitted KNN gets, by default (``conformal="full"``),
full-conformal p-values against every calibration row
(:mod:`monitor.core.decisions.full_conformal`): one deterministic run, no split. Any other unfitted
scorer that learns from data (Mahalanobis, ReAct, ..., and KNN with ``conformal="split"``) is
fitted on one random part of the calibration data (``fit_fraction``) and its
calibration scores are computed on the other part, so that a null test score is exchangeable with
them (a KNN distance of a point to a bank holding itself would be 0). Scorers that learn nothing
(MSP, energy, ASH, ...) and scorers passed already fitted on other data (the model's training
set, say) use every calibration point. For ``eg_bh`` each learning scorer contributes ``splits``
runs over independent random splits, and each scorer is one more run: the K p-value vectors are
merged by averaged BH e-values (see :mod:`monitor.core.decisions.eg_bh`; with one run, eg-BH is
g-BH). ``bh`` and ``lond`` use the first scorer with one run.

Missing inputs. Every scorer's input (``features``, ``logits`` or ``embedding``) must be present
in the calibration data and in every event: :meth:`OODDecider.add` raises a ``ValueError`` naming
the missing kind rather than silently skipping a scorer, which would change the rule (and its
guarantee) from one event to the next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.decisions.base import FloatArray, check_alpha
from monitor.core.decisions.conformal import p_values_from_sorted
from monitor.core.decisions.full_conformal import FullConformalKNN
from monitor.core.decisions.lond import LOND
from monitor.core.decisions.registry import RULES, make_rule
from monitor.core.ood import KNN, Energy, Scorer, reference_bank, scorer_from_state
from monitor.core.ood.base import INPUT_KINDS, as_matrix, check_width

#: How learning KNN scorers are calibrated: on all rows (full conformal) or on a split.
CONFORMAL_MODES: tuple[str, ...] = ("full", "split")

#: Child key of the seed that draws a full-conformal run's reference bank.
_BANK_KEY = 7


@dataclass(frozen=True, slots=True)
class WindowDecision:
    """Summary of one window of events, with the ids the rule flagged as OOD.

    ``start_index``/``end_index`` are the stream positions (from 0, in arrival order) of the
    window's first and last event, both inclusive. ``threshold`` is the step-up threshold for
    ``bh``/``eg_bh`` (alpha·R/n on the p-value, respectively 1/e-value, scale) and the LOND level
    alpha_t of the window's last event for ``lond``.
    """

    start_index: int
    end_index: int
    n: int
    n_flagged: int
    threshold: float
    rule: str
    alpha: float
    flagged_ids: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready builtins."""
        out = asdict(self)
        out["flagged_ids"] = list(self.flagged_ids)
        return out


def default_scorers(available: Sequence[str]) -> list[Scorer]:
    """Scorers used when a stream's configuration names none: one scorer, chosen by measurement.

    An embedding: ``knn`` (k = 1, L2-normalised). Else logits: ``energy``. Else raw tabular
    features: ``knn`` (k = 1, standardised, not normalised). The KNN gets full-conformal
    p-values against every calibration row (``conformal="full"``). One scorer, because eg-BH's
    averaged BH e-values reward consensus: on the bench every mix of scorers (KNN + Mahalanobis,
    energy + MSP, energy + KNN) made eg-BH flag nothing in windows of 100–256 events while each
    scorer alone had power; and k = 1 beat k = 5 and k = 10 on the digits embeddings and the
    Shuttle features (docs/ood.md, "Power on tabular data and embeddings").
    """
    if "embedding" in available:
        return [KNN(k=1)]
    if "logits" in available:
        return [Energy()]
    if "features" in available:
        return [KNN(k=1, standardize=True, normalize=False)]
    raise ValueError(f"calibration needs at least one of {list(INPUT_KINDS)}")


@dataclass(slots=True)
class _Run:
    """One p-value source: a fitted scorer and its sorted held-out calibration scores."""

    scorer: Scorer
    calibration: FloatArray

    def p_values(self, inputs: Mapping[str, FloatArray]) -> FloatArray:
        return p_values_from_sorted(self.scorer.score(inputs[self.scorer.input]), self.calibration)

    def state_dict(self) -> dict[str, Any]:
        return {"scorer": self.scorer.state_dict(), "calibration": self.calibration}


@dataclass(slots=True)
class _FullRun:
    """One p-value source: full-conformal KNN p-values against every calibration row."""

    full: FullConformalKNN

    @property
    def scorer(self) -> Scorer:
        return self.full.scorer

    def p_values(self, inputs: Mapping[str, FloatArray]) -> FloatArray:
        return self.full.p_values(inputs[self.scorer.input])

    def state_dict(self) -> dict[str, Any]:
        return {"full_knn": self.full.state_dict()}


def _run_from_state(state: Mapping[str, Any]) -> _Run | _FullRun:
    if "full_knn" in state:
        return _FullRun(FullConformalKNN.from_state(state["full_knn"]))
    scorer = scorer_from_state(state["scorer"])
    return _Run(scorer, np.asarray(state["calibration"], dtype=np.float64))


class OODDecider:
    """OOD flags with FDR control for one stream, over windows of ``window`` events.

    Parameters
    ----------
    rule
        ``"bh"`` (g-BH per window), ``"eg_bh"`` (ensemble per window) or ``"lond"`` (per event,
        restarted every window so that its FDR guarantee, like the others', is per window).
    alpha
        Target FDR in (0, 1).
    window
        Number of events per window (the last window may be shorter, see :meth:`flush`).
    scorers
        Unfitted scorers; empty means :func:`default_scorers` for the calibration inputs.
    splits
        Random fit/calibration splits per learning scorer for ``eg_bh``.
    seed
        Seed of the splits.
    fit_fraction
        Share of calibration rows used to fit learning scorers (the rest calibrates).
    bank
        None: a full-conformal KNN ranks each event against every calibration row. An integer
        B: against a seeded random subsample of at most B rows
        (:func:`monitor.core.ood.reference_bank`), so an event costs at most B distances
        whatever the calibration size; each p-value stays exactly valid (docs/ood.md).
    conformal
        ``"full"`` (default): an unfitted KNN scorer gets full-conformal p-values against every
        calibration row (:class:`monitor.core.decisions.full_conformal.FullConformalKNN`, one
        deterministic run, no split); each p-value is exactly valid, BH's FDR bound on them is
        checked by Monte Carlo, not proved. ``"split"``: every learning scorer is fitted on a
        random ``fit_fraction`` of the rows and calibrated on the rest (split conformal, PRDS,
        FDR proved). Other scorers are split in both modes.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> decider = OODDecider("eg_bh", alpha=0.1, window=100, splits=3)
    >>> decider = decider.fit({"features": rng.normal(size=(400, 3))})
    >>> for i in range(100):
    ...     x = rng.normal(size=3) + (6.0 if i % 10 == 0 else 0.0)  # every 10th event is OOD
    ...     decider.add(f"e-{i}", {"features": x})
    >>> [w.flagged_ids for w in decider.windows()]
    [('e-0', 'e-10', 'e-20', 'e-30', 'e-40', 'e-50', 'e-60', 'e-70', 'e-80', 'e-90')]
    """

    def __init__(
        self,
        rule: str = "eg_bh",
        alpha: float = 0.1,
        window: int = 256,
        scorers: Sequence[Scorer] = (),
        splits: int = 5,
        seed: int = 0,
        fit_fraction: float = 0.5,
        conformal: str = "full",
        bank: int | None = None,
    ) -> None:
        if rule not in RULES:
            raise ValueError(f"rule must be one of {sorted(RULES)}, got {rule!r}")
        check_alpha(alpha)
        for name, value in (("window", window), ("splits", splits)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not 0.0 < fit_fraction < 1.0:
            raise ValueError(f"fit_fraction must be in (0, 1), got {fit_fraction!r}")
        if bank is not None and (isinstance(bank, bool) or not isinstance(bank, int) or bank < 2):
            raise ValueError(f"bank must be None or an integer >= 2, got {bank!r}")
        if conformal not in CONFORMAL_MODES:
            raise ValueError(f"conformal must be one of {list(CONFORMAL_MODES)}, got {conformal!r}")
        self.rule = rule
        self.alpha = alpha
        self.window = window
        self.scorers = scorers
        self.splits = splits
        self.seed = seed
        self.fit_fraction = fit_fraction
        self.conformal = conformal
        self.bank = bank
        self._templates: list[Scorer] = []
        self._widths: dict[str, int] = {}
        self._runs: list[_Run | _FullRun] = []
        self._kinds: tuple[str, ...] = ()  # the runs' input kinds, in first-run order
        self._next_index = 0
        self._reset_window()
        self._finished: list[WindowDecision] = []

    # ----------------------------------------------------------------- calibration
    def fit(self, calibration: Mapping[str, ArrayLike], y: ArrayLike | None = None) -> Self:
        """Fit the scorers and compute the calibration scores of every run.

        ``calibration`` maps input kinds to arrays with one row per calibration example (all
        kinds with the same number of rows); ``y`` optional class labels (Mahalanobis means).
        """
        data = {kind: as_matrix(X, kind) for kind, X in calibration.items()}
        m = _common_rows(data)
        templates = list(self.scorers) or default_scorers(list(data))
        self._widths = {kind: X.shape[1] for kind, X in data.items()}
        for scorer in templates:
            _require_input(scorer, data, "calibration")
        labels = None if y is None else np.asarray(y)
        rng = np.random.default_rng(self.seed)
        self._templates = templates
        self._runs = []
        for scorer in templates[:1] if self.rule != "eg_bh" else templates:
            full = self._full_conformal(scorer)
            n_runs = self.splits if self.rule == "eg_bh" and _splittable(scorer) and not full else 1
            for _ in range(n_runs):
                self._runs.append(self._fit_run(scorer, data, labels, m, rng))
        self._kinds = _input_kinds(self._runs)
        return self

    def _fit_run(
        self,
        template: Scorer,
        data: Mapping[str, FloatArray],
        labels: np.ndarray | None,
        m: int,
        rng: np.random.Generator,
    ) -> _Run | _FullRun:
        X = data[template.input]
        if self._full_conformal(template):
            assert isinstance(template, KNN)
            # its own generator: the split runs' are the same with a bank or without
            keep = reference_bank(m, self.bank, np.random.SeedSequence([self.seed, _BANK_KEY]))
            return _FullRun(FullConformalKNN(template).fit(X if keep is None else X[keep]))
        if template.needs_fit and template.is_fitted:
            # Fitted elsewhere (e.g. on the model's training data): every row calibrates.
            return _Run(template, np.sort(template.score(X)))
        scorer = template.clone()
        if not scorer.needs_fit:
            return _Run(scorer.fit(X), np.sort(scorer.score(X)))
        n_fit = round(self.fit_fraction * m)
        if not 1 <= n_fit < m:
            raise ValueError(f"{m} calibration rows are too few to split for {scorer.name}")
        order = rng.permutation(m)
        fit_idx, cal_idx = order[:n_fit], order[n_fit:]
        scorer.fit(X[fit_idx], None if labels is None else labels[fit_idx])
        return _Run(scorer, np.sort(scorer.score(X[cal_idx])))

    def _full_conformal(self, scorer: Scorer) -> bool:
        """Whether this scorer gets full-conformal p-values (an unfitted KNN in "full" mode)."""
        return self.conformal == "full" and isinstance(scorer, KNN) and _splittable(scorer)

    @property
    def input_kinds(self) -> tuple[str, ...]:
        """The input kinds ("features", "logits", "embedding") the fitted runs read."""
        return self._kinds

    # ----------------------------------------------------------------- streaming
    def add(self, event_id: str, inputs: Mapping[str, ArrayLike]) -> None:
        """Add one event (inputs keyed by kind, one vector each); closes the window when full."""
        if not self._runs:
            raise RuntimeError("OODDecider must be fitted before add(); call fit()")
        row = self._event_inputs(event_id, inputs)
        self._ids.append(event_id)
        self._next_index += 1
        if self.rule == "lond":
            self._lond_step(row)
        else:
            for kind, vector in row.items():
                self._pending.setdefault(kind, []).append(vector)
        if len(self._ids) == self.window:
            self._finished.append(self._close())

    def add_many(self, event_ids: Sequence[str], inputs: Mapping[str, ArrayLike]) -> None:
        """Add a batch of events: ``inputs`` maps each kind to an ``(n, width)`` matrix, row i
        belonging to ``event_ids[i]``.

        Same windows, decisions and state as :meth:`add` called for each row in order (windows
        close at the same events, also several within one batch), without per-event Python work
        for ``bh`` and ``eg_bh``. The batch is checked as a whole before any row is added: a
        missing kind, a wrong shape or a non-finite value raises a ``ValueError`` naming the
        first bad event, and then no row of the batch is added. The rows are copied.
        """
        if not self._runs:
            raise RuntimeError("OODDecider must be fitted before add_many(); call fit()")
        ids = list(event_ids)
        if not ids:
            return
        batch = self._batch_inputs(ids, inputs)
        n, pos = len(ids), 0
        while pos < n:
            take = min(self.window - len(self._ids), n - pos)
            if self.rule == "lond":
                for i in range(pos, pos + take):  # online: one p-value and level per event
                    self._lond_step({kind: X[i : i + 1] for kind, X in batch.items()})
            else:
                for kind, X in batch.items():
                    self._pending.setdefault(kind, []).append(X[pos : pos + take])
            self._ids.extend(ids[pos : pos + take])
            self._next_index += take
            pos += take
            if len(self._ids) == self.window:
                self._finished.append(self._close())

    def _batch_inputs(
        self, ids: Sequence[str], inputs: Mapping[str, ArrayLike]
    ) -> dict[str, FloatArray]:
        """The batch's inputs the runs read, as C-ordered float64 copies ``(n, width)``.

        The checks of :meth:`_event_inputs`, once per kind for the whole batch; the messages
        (built only for a bad batch) name the first bad event as :meth:`add` would.
        """
        if not all(kind in inputs for kind in self._kinds):
            for run in self._runs:
                _require_input(run.scorer, inputs, f"batch of {len(ids)} events")
        n = len(ids)
        batch: dict[str, FloatArray] = {}
        for kind in self._kinds:
            X = np.array(inputs[kind], dtype=np.float64, order="C")
            width = self._widths[kind]
            if X.shape != (n, width):
                if X.ndim != 2 or X.shape[0] != n:
                    raise ValueError(
                        f"{kind} of a batch of {n} events must be a ({n}, {width}) matrix, "
                        f"got shape {X.shape}"
                    )
                check_width(X, width, f"{kind} of {ids[0]!r}")
            if not np.isfinite(X).all():
                bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
                as_matrix(X[bad : bad + 1], f"{kind} of {ids[bad]!r}")
            batch[kind] = X
        return batch

    def _event_inputs(
        self, event_id: str, inputs: Mapping[str, ArrayLike]
    ) -> dict[str, FloatArray]:
        """The inputs the runs read, as (1, d) rows checked against the calibration widths.

        Checked here, at arrival, so that a bad event cannot break a whole window later. Once
        per input kind, not per run; the messages are built only for a bad event.
        """
        if not all(kind in inputs for kind in self._kinds):
            for run in self._runs:
                _require_input(run.scorer, inputs, f"event {event_id!r}")
        row: dict[str, FloatArray] = {}
        for kind in self._kinds:
            vector = np.asarray(inputs[kind], dtype=np.float64).reshape(1, -1)
            width = self._widths[kind]
            if vector.shape[1] != width or not np.isfinite(vector).all():
                as_matrix(vector, f"{kind} of {event_id!r}")
                check_width(vector, width, f"{kind} of {event_id!r}")
            row[kind] = vector
        return row

    def start_at(self, index: int) -> None:
        """Number the events from ``index`` on (the stream's event index when this decider takes
        over a stream that already has events: a configuration update). Only before the first
        event."""
        if self._next_index or self._ids or self._finished:
            raise RuntimeError("start_at() must be called before the first event")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index must be an integer >= 0, got {index!r}")
        self._next_index = index

    def windows(self) -> list[WindowDecision]:
        """Finished windows since the last call (drained)."""
        finished, self._finished = self._finished, []
        return finished

    def flush(self) -> WindowDecision | None:
        """Close the partial window at the end of a stream; ``None`` if it is empty."""
        return self._close() if self._ids else None

    def p_values(self, inputs: Mapping[str, ArrayLike]) -> FloatArray:
        """The (K, n) conformal p-values of a batch under every run (K = number of runs)."""
        batch = {kind: as_matrix(X, kind) for kind, X in inputs.items()}
        return np.vstack([run.p_values(batch) for run in self._runs])

    def _lond_step(self, row: Mapping[str, FloatArray]) -> None:
        p = float(self._runs[0].p_values(row)[0])
        self._lond.update(p)
        self._flags.append(self._lond.rejected)

    def _close(self) -> WindowDecision:
        if self.rule == "lond":
            flags, threshold = np.array(self._flags, dtype=bool), self._lond.level
        else:
            batch = {kind: np.concatenate(rows) for kind, rows in self._pending.items()}
            rule = make_rule(self.rule, self.alpha)
            assert not isinstance(rule, LOND)
            decision = rule.decide(self.p_values(batch))
            flags, threshold = decision.rejected, decision.threshold
        ids = self._ids
        start = self._next_index - len(ids)
        self._reset_window()
        return WindowDecision(
            start_index=start,
            end_index=start + len(ids) - 1,
            n=len(ids),
            n_flagged=int(flags.sum()),
            threshold=float(threshold),
            rule=self.rule,
            alpha=self.alpha,
            flagged_ids=tuple(i for i, f in zip(ids, flags, strict=True) if f),
        )

    def _reset_window(self) -> None:
        self._ids: list[str] = []
        # Per input kind, the window's rows so far as (rows, width) blocks, in arrival order.
        self._pending: dict[str, list[FloatArray]] = {}
        self._flags: list[bool] = []
        self._lond = LOND(self.alpha, horizon=self.window)

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready builtins and numpy arrays (no pickle): fitted runs and the pending window."""
        return {
            "config": {
                "rule": self.rule,
                "alpha": self.alpha,
                "window": self.window,
                "splits": self.splits,
                "seed": self.seed,
                "fit_fraction": self.fit_fraction,
                "conformal": self.conformal,
                **({} if self.bank is None else {"bank": self.bank}),
            },
            "widths": dict(self._widths),
            "templates": [s.state_dict() for s in self._templates],
            "runs": [r.state_dict() for r in self._runs],
            "next_index": self._next_index,
            "pending_ids": list(self._ids),
            "pending_inputs": {k: np.concatenate(v) for k, v in self._pending.items()},
            "pending_flags": list(self._flags),
            "lond": self._lond.state_dict(),
            "finished": [w.to_json() for w in self._finished],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> OODDecider:
        """Rebuild a decider saved with :meth:`state_dict`, pending window included."""
        templates = [scorer_from_state(s) for s in state["templates"]]
        # States saved before full conformal existed hold split runs only.
        decider = cls(scorers=templates, **{"conformal": "split", **state["config"]})
        decider._templates = templates
        decider._widths = {k: int(v) for k, v in state["widths"].items()}
        decider._runs = [_run_from_state(r) for r in state["runs"]]
        decider._kinds = _input_kinds(decider._runs)
        decider._next_index = int(state["next_index"])
        decider._ids = list(state["pending_ids"])
        decider._pending = {
            k: [np.asarray(v, dtype=np.float64).reshape(len(decider._ids), -1)]
            for k, v in state["pending_inputs"].items()
        }
        decider._flags = [bool(f) for f in state["pending_flags"]]
        decider._lond = LOND.from_state(state["lond"])
        decider._finished = [_window_from_json(w) for w in state["finished"]]
        return decider


def _window_from_json(data: Mapping[str, Any]) -> WindowDecision:
    return WindowDecision(**{**data, "flagged_ids": tuple(data["flagged_ids"])})


def _input_kinds(runs: Sequence[_Run | _FullRun]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(run.scorer.input for run in runs))


def _splittable(scorer: Scorer) -> bool:
    """Whether the decider fits this scorer itself on a random calibration split."""
    return scorer.needs_fit and not scorer.is_fitted


def _common_rows(data: Mapping[str, FloatArray]) -> int:
    rows = {X.shape[0] for X in data.values()}
    if len(rows) != 1:
        raise ValueError(f"calibration inputs must have the same number of rows, got {rows}")
    return rows.pop()


def _require_input(scorer: Scorer, available: Mapping[str, Any], where: str) -> None:
    if scorer.input not in available:
        raise ValueError(
            f"scorer {scorer.name!r} reads {scorer.input!r}, missing from the {where} "
            f"(it has {sorted(available)})"
        )
