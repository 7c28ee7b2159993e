"""Cross-stream error control for a fleet of streams: e-d-BH, e-d-Bonferroni, per-stream alarms.

A fleet is a named group of K monitored hypotheses (one per stream detector). Each stream's
Shiryaev–Roberts statistic R_t is an **e-detector**: R_0 = 0 and, with no change,
E_∞[R_τ] ≤ E_∞[τ] for every stopping time τ (R_t − t is a martingale; Shin, Ramdas & Rinaldo
2024). A CUSUM
statistic is ≤ R_t, and a Ville stream's test martingale S_t has E[S_τ] ≤ 1 ≤ E[τ] for τ ≥ 1, so
both are e-detectors too. The decider consumes these values; it never sees data (no I/O here).

**Error over patience** (Dandapanthula & Ramdas 2025, "DR"; checked against DR's abstract and
the authors' public code, not the paper's body, so no theorem numbers are cited). Any procedure
with a finite average run length has a trivial worst-case FDR/FWER (DR, abstract), so the
controllable metric divides the error of the set declared at a stopping time T by the patience
E[T]: a rule controls EOP at level α when

    Err(T) ≤ α · E[T]   for every stopping time T.

**Rules**, applied at every fleet step t to the current values M_t^1, …, M_t^K:

- ``"e_d_bh"`` — e-BH at level α (Wang & Ramdas 2022, Def. 2): reject the r largest values,
  r = max{r : M_(r) ≥ K/(α r)}. Since E[M_T^k] ≤ E[T] for a null stream, the e-BH bound
  FDR ≤ (α'/K) Σ_{null k} E[e^k] (Wang & Ramdas 2022, Theorem 2, any dependence), applied at
  α' = α·E[T] to e^k = M_T^k / E[T], gives FDR(T) ≤ α·(K₀/K)·E[T] (derived here; same rule as
  DR's e-d-BH in the authors' code).
- ``"e_d_bonferroni"`` — reject stream k when M_t^k ≥ K/α. Markov's inequality per null stream
  gives PFER(T) = E[#false rejections at T] ≤ α·(K₀/K)·E[T], hence FWER(T) ≤ the same.
- ``"per_stream"`` — today's behaviour: each stream alarms at M_t^k ≥ 1/α, its own threshold
  (an SR threshold c is α = 1/c). PFER(T) ≤ α·K₀·E[T]: the fleet's error grows with K.

The bounds are about the set rejected *at* T, not the number of alarms raised up to T. A caller
that re-baselines an admitted stream (its detector restarts at R = 0) tells the decider with
:meth:`FleetDecider.reset`; restarting keeps each stream an e-detector (the restarted SR sums R
over completed cycles plus the current one, still minus t a martingale), and under
e-d-Bonferroni the count of false alarms by T is then also ≤ α·(K₀/K)·E[T]. The database runner
(:mod:`monitor.db.fleet_runner`) does not re-baseline; it calls
:meth:`~FleetDecider.release` for a
stream that leaves the rejection set. DR's e-d-Holm is not implemented.

References
----------
Dandapanthula, S. & Ramdas, A. Multiple testing in multi-stream sequential change detection.
arXiv 2501.04130 (2025). Wang, R. & Ramdas, A. False discovery rate control with e-values.
JRSSB 84 (2022). Shin, J., Ramdas, A. & Rinaldo, A. E-detectors: a nonparametric framework for
sequential change detection. New England J. Stat. Data Sci. (2024).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.decisions.base import check_alpha
from monitor.core.decisions.eg_bh import e_benjamini_hochberg
from monitor.core.martingales.state import check_state, decode_float, encode_float, new_state

__all__ = ["FLEET_RULES", "FleetDecider", "FleetDecision", "FleetRule"]

FleetRule = Literal["e_d_bh", "e_d_bonferroni", "per_stream"]
FLEET_RULES: tuple[str, ...] = get_args(FleetRule)
_LOG_E_CAP = 700.0


@dataclass(frozen=True, slots=True)
class FleetDecision:
    """One fleet step: which streams the rule rejects now and which of them are new alarms.

    ``rejected`` is the rule's rejection set at this step; ``admitted`` the streams of it that
    were not already in alarm (each alarm is raised once, until :meth:`FleetDecider.reset` or
    :meth:`FleetDecider.release`);
    ``log_threshold`` the log e-detector bar the rejected values cleared (inf when none).
    """

    step: int
    rule: str
    level: float
    rejected: tuple[str, ...]
    admitted: tuple[str, ...]
    log_threshold: float


class FleetDecider:
    """Apply a cross-stream rule to the latest e-detector value of every stream of a fleet.

    Values are kept as logs (``log_statistic`` of a stream's alarm rule). Streams report
    asynchronously through :meth:`update`; :meth:`decide` evaluates the rule on the latest value
    of every stream (a stream that has not reported yet counts as R = 0) and advances the fleet
    step.

    Parameters
    ----------
    streams
        Names of the fleet's K streams (or stream detectors), at least one, no duplicates.
    rule
        ``"e_d_bh"``, ``"e_d_bonferroni"`` or ``"per_stream"``.
    alpha
        EOP level in (0, 1): the rule's error at any stopping time T is at most α·E[T].

    Examples
    --------
    >>> import numpy as np
    >>> from monitor.core.martingales import CompositeJumper, ShiryaevRoberts
    >>> rng = np.random.default_rng(0)
    >>> names = [f"s{k}" for k in range(20)]
    >>> fleet = FleetDecider(names, rule="e_d_bh", alpha=1e-3)
    >>> detectors = {k: (CompositeJumper(), ShiryaevRoberts()) for k in names}
    >>> for t in range(400):
    ...     for k, (jumper, sr) in detectors.items():
    ...         shifted = k == "s3" and t >= 200  # one stream changes at t = 200
    ...         jumper.update(rng.uniform(0, 0.2) if shifted else rng.uniform())
    ...         sr.update(jumper.log_martingale)
    ...         fleet.update(k, sr.log_statistic)
    ...     decision = fleet.decide()
    ...     if decision.admitted:
    ...         break
    >>> decision.step, decision.admitted
    (225, ('s3',))
    """

    def __init__(
        self, streams: Iterable[str], rule: FleetRule = "e_d_bh", alpha: float = 1e-3
    ) -> None:
        names = tuple(streams)
        if not names or len(set(names)) != len(names):
            raise ValueError("a fleet needs at least one stream and stream names must be unique")
        if rule not in FLEET_RULES:
            raise ValueError(f"rule must be one of {', '.join(FLEET_RULES)}; got {rule!r}")
        check_alpha(alpha)
        self.streams = names
        self.rule = rule
        self.alpha = alpha
        self._index = {name: i for i, name in enumerate(names)}
        self._log_values = np.full(len(names), -math.inf)
        self._in_alarm = np.zeros(len(names), dtype=bool)
        self._step = 0

    @property
    def step(self) -> int:
        """Number of fleet steps decided so far."""
        return self._step

    def log_value(self, stream: str) -> float:
        """Latest log e-detector value reported by ``stream`` (-inf before its first report)."""
        return float(self._log_values[self._position(stream)])

    def update(self, stream: str, log_value: float) -> None:
        """Record ``stream``'s current log e-detector value (log R_t; -inf for R_t = 0)."""
        x = float(log_value)
        if math.isnan(x) or x == math.inf:
            raise ValueError(f"log e-detector value of {stream!r} must be finite or -inf, got {x}")
        self._log_values[self._position(stream)] = x

    def update_all(self, log_values: ArrayLike) -> None:
        """Record every stream's current log e-detector value at once, in ``streams`` order."""
        arr = np.asarray(log_values, dtype=np.float64)
        if arr.shape != self._log_values.shape:
            raise ValueError(f"expected {len(self.streams)} log values, got shape {arr.shape}")
        if np.isnan(arr).any() or (arr == math.inf).any():
            raise ValueError("log e-detector values must be finite or -inf")
        self._log_values = arr.copy()

    def reset(self, stream: str) -> None:
        """``stream`` was re-baselined: its detector restarts at R = 0 and may alarm again."""
        i = self._position(stream)
        self._log_values[i] = -math.inf
        self._in_alarm[i] = False

    @property
    def in_alarm(self) -> tuple[str, ...]:
        """Streams whose alarm was raised and not yet reset or released."""
        return self._names(self._in_alarm)

    def release(self, stream: str) -> None:
        """``stream`` left the rejection set without a re-baseline: a later entry alarms anew."""
        self._in_alarm[self._position(stream)] = False

    def log_threshold(self, n_rejected: int = 1) -> float:
        """Log of the bar a value must clear when ``n_rejected`` streams are rejected together."""
        k = len(self.streams)
        if self.rule == "per_stream":
            return -math.log(self.alpha)
        if self.rule == "e_d_bonferroni":
            return math.log(k / self.alpha)
        return math.log(k / (self.alpha * max(n_rejected, 1)))

    def decide(self) -> FleetDecision:
        """Evaluate the rule on the latest values; new alarms: rejected streams not in alarm."""
        self._step += 1
        rejected = self._rejected()
        new = rejected & ~self._in_alarm
        self._in_alarm |= rejected
        n = int(rejected.sum())
        return FleetDecision(
            step=self._step,
            rule=self.rule,
            level=self.alpha,
            rejected=self._names(rejected),
            admitted=self._names(new),
            log_threshold=self.log_threshold(n) if n else math.inf,
        )

    def _rejected(self) -> np.ndarray:
        if self.rule == "e_d_bh":
            # capped so e stays a finite float; a log value of 700 (e ≈ 1e304) clears any bar
            e = np.exp(np.minimum(self._log_values, _LOG_E_CAP))
            return np.asarray(e_benjamini_hochberg(e, self.alpha).rejected, dtype=bool)
        return np.asarray(self._log_values >= self.log_threshold(), dtype=bool)

    def _names(self, mask: np.ndarray) -> tuple[str, ...]:
        return tuple(self.streams[i] for i in np.flatnonzero(mask))

    def _position(self, stream: str) -> int:
        try:
            return self._index[stream]
        except KeyError:
            raise ValueError(f"stream {stream!r} is not in this fleet") from None

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state: parameters, latest values, alarm flags and the step count."""
        return new_state(
            self,
            streams=list(self.streams),
            rule=self.rule,
            alpha=self.alpha,
            log_values=[encode_float(float(x)) for x in self._log_values],
            in_alarm=[bool(b) for b in self._in_alarm],
            step=self._step,
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> FleetDecider:
        """Rebuild a decider that continues exactly where :meth:`state_dict` left it."""
        check_state(state, cls)
        decider = cls(state["streams"], rule=state["rule"], alpha=float(state["alpha"]))
        decider._log_values = np.array(
            [decode_float(x, -math.inf) for x in state["log_values"]], dtype=np.float64
        )
        decider._in_alarm = np.array(state["in_alarm"], dtype=bool)
        decider._step = int(state["step"])
        return decider
