"""Size a Monte Carlo test of a guarantee: its false-failure probability and its power.

A **rate test** checks a guarantee "the probability of an event is at most ``bound``" (a false
alarm, a false rejection, an alarm before step L) by counting the event over ``n`` independent
repetitions; it passes while the count is at most ``max_count``. From exact binomial tails:

- its *false-failure probability* is P(Bin(n, bound) > max_count): the chance that it fails
  when the rate is exactly the proved bound, the worst case the guarantee allows (a smaller rate
  only fails less often, since the binomial tail grows with its rate);
- its *power* against a named violation (a rate ``violation`` > bound, e.g. Ville's rule at 2α)
  is P(Bin(n, violation) > max_count).

:func:`rate_test` picks the smallest pass count whose false-failure probability is at most
:data:`MAX_FALSE_FAILURE`; :func:`repetitions_for` the fewest repetitions with power at least
:data:`MIN_POWER`.

A **mean test** checks "the mean of a bounded statistic is at most ``bound``" (a false discovery
rate: the mean false-discovery proportion) with the normal approximation: it passes while the
mean over the repetitions is at most bound + z·SE, with z = :data:`Z_FALSE_FAILURE` (the normal
quantile of the false-failure probability) and SE the standard error measured in the run;
:func:`mean_test_power` is its power against a true mean ``violation`` with that standard error,
and :func:`assert_fdr_within` applies it to an FDR Monte Carlo summary, failing as "no power"
when the rule rejected nothing in any repetition.

Examples
--------
>>> test = rate_test(1000, bound=0.1, violation=0.2)
>>> test.max_count, round(test.false_failure, 5), round(test.power, 3)
(130, 0.00097, 1.0)
>>> repetitions_for(bound=0.1, violation=0.2)
186
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scipy.stats import binom, norm

__all__ = [
    "MAX_FALSE_FAILURE",
    "MIN_POWER",
    "Z_FALSE_FAILURE",
    "RateTest",
    "assert_fdr_within",
    "mean_test_power",
    "rate_test",
    "repetitions_for",
]

#: The largest false-failure probability a fast Monte Carlo test may have (issue 26).
MAX_FALSE_FAILURE = 1e-3
#: The smallest power a Monte Carlo test must have against its named violation.
MIN_POWER = 0.8
#: z with P(N(0, 1) > z) = MAX_FALSE_FAILURE (≈ 3.09): the slack of a mean test, in SEs.
Z_FALSE_FAILURE = float(norm.isf(MAX_FALSE_FAILURE))


@dataclass(frozen=True)
class RateTest:
    """A test that passes while an event happens at most ``max_count`` times in ``n`` runs.

    Parameters
    ----------
    n
        Independent repetitions.
    max_count
        The largest count of events that passes.
    bound
        The proved bound on the event's probability.
    violation
        The event's probability under the named violation the test is sized for.
    """

    n: int
    max_count: int
    bound: float
    violation: float

    @property
    def false_failure(self) -> float:
        """P(the test fails) when the event's probability is the proved bound."""
        return float(binom.sf(self.max_count, self.n, self.bound))

    @property
    def power(self) -> float:
        """P(the test fails) under the named violation."""
        return float(binom.sf(self.max_count, self.n, self.violation))

    @property
    def max_rate(self) -> float:
        """The largest observed rate (count / n) that passes."""
        return self.max_count / self.n

    def passes(self, count: int) -> bool:
        """Whether ``count`` events in ``n`` runs pass."""
        return count <= self.max_count

    def describe(self) -> str:
        """One line for an assertion message or a docstring."""
        return (f"{self.n} runs, pass at ≤ {self.max_count} events (bound {self.bound:g}): "
                f"false failure {self.false_failure:.1e}, power {self.power:.3f} against a "
                f"rate of {self.violation:g}")


def _check_rates(bound: float, violation: float) -> None:
    if not 0.0 <= bound < violation <= 1.0:
        raise ValueError(f"need 0 <= bound < violation <= 1, got bound={bound!r}, "
                         f"violation={violation!r}")


def rate_test(n: int, bound: float, violation: float,
              max_false_failure: float = MAX_FALSE_FAILURE) -> RateTest:
    """The rate test over ``n`` runs with the smallest pass count whose false-failure
    probability is at most ``max_false_failure``."""
    _check_rates(bound, violation)
    if n < 1:
        raise ValueError(f"n must be a positive number of repetitions, got {n!r}")
    count = int(binom.isf(max_false_failure, n, bound))
    while count > 0 and binom.sf(count - 1, n, bound) <= max_false_failure:
        count -= 1  # isf may land one above the smallest admissible count
    while binom.sf(count, n, bound) > max_false_failure:
        count += 1
    return RateTest(n, count, bound, violation)


def repetitions_for(bound: float, violation: float, min_power: float = MIN_POWER,
                    max_false_failure: float = MAX_FALSE_FAILURE) -> int:
    """The fewest runs whose :func:`rate_test` has power ≥ ``min_power`` against ``violation``.

    Power is not monotone in n (the pass count moves in integer steps), so this is the first n
    that reaches it; callers use at least this many.
    """
    _check_rates(bound, violation)
    n = 1
    while rate_test(n, bound, violation, max_false_failure).power < min_power:
        n += 1
    return n


def mean_test_power(se: float, bound: float, violation: float,
                    z: float = Z_FALSE_FAILURE) -> float:
    """Power of "mean ≤ bound + z·se" against a true mean ``violation`` (normal approximation,
    the same standard error ``se`` under the violation)."""
    if se < 0.0:
        raise ValueError(f"a standard error is not negative, got {se!r}")
    if se == 0.0:
        return 1.0 if violation > bound else 0.0
    return float(norm.sf(bound + z * se, loc=violation, scale=se))


def assert_fdr_within(rule: str, stats: Mapping[str, float], bound: float,
                      violation_factor: float = 1.5) -> float:
    """Check one rule's FDR Monte Carlo summary against its bound; return the check's power.

    ``stats`` holds ``fdr`` (mean false-discovery proportion), ``fdr_se`` and ``tpr`` (the mean
    true-positive rate) over the repetitions. The check fails as "no power" when the rule
    rejected nothing in any repetition (FDR and TPR both 0: its FDR of 0 says nothing), when the
    mean FDP exceeds bound + z·SE, and when its power against an FDR of
    ``violation_factor``·bound (the named violation: BH at 1.5·α·n₀/n) is below
    :data:`MIN_POWER` at the measured SE.
    """
    if stats["fdr"] == 0.0 and stats["tpr"] == 0.0:
        raise AssertionError(f"{rule}: no power — it rejected nothing in any repetition")
    threshold = bound + Z_FALSE_FAILURE * stats["fdr_se"]
    assert stats["fdr"] <= threshold, (
        f"{rule}: FDR {stats['fdr']:.4f} > bound {bound:.4f} + {Z_FALSE_FAILURE:.2f} SE "
        f"({threshold:.4f})")
    power = mean_test_power(stats["fdr_se"], bound, violation_factor * bound)
    assert power >= MIN_POWER, (
        f"{rule}: power {power:.2f} against an FDR of {violation_factor * bound:.4f} "
        f"(SE {stats['fdr_se']:.4f}): more repetitions are needed")
    return power
