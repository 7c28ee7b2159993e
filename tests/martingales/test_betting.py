"""Betting functions are test martingales: exact one-step quadrature of ``log_factor``, which is
pinned to the compiled steps the service runs, and Monte Carlo."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy import integrate

from monitor.core.martingales import (
    BETTING_FUNCTIONS,
    AGrapaBetting,
    BettingFunction,
    CompositeJumper,
    PlugInPower,
    PowerBetting,
    SimpleJumper,
    SimpleMixture,
    Ville,
    make_betting,
)
from monitor.core.martingales.batch import run_test
from monitor.core.martingales.betting.base import P_FLOOR
from monitor.core.martingales.betting.mixture import log_mixture

N_STATES = 1000
QUAD_TOL = 1e-9
GL_X, GL_W = np.polynomial.legendre.leggauss(8)
GL_U, GL_UW = (GL_X + 1) / 2, GL_W / 2  # nodes and weights on [0, 1]
GLAG_V, GLAG_W = np.polynomial.laguerre.laggauss(8)  # ∫_0^∞ h(v) e^(-v) dv


def random_states(make: Callable[[], BettingFunction], seed: int) -> Any:
    """Yield betting functions driven to random reachable states (random lengths and regimes)."""
    rng = np.random.default_rng(seed)
    for _ in range(N_STATES):
        length = int(rng.integers(0, 80))
        a, b = rng.choice([0.2, 1.0, 3.0], size=2)  # small, uniform or large p-values
        bet = make()
        bet.update_many(rng.beta(a, b, size=length))
        yield bet


@pytest.mark.parametrize(
    "make",
    [SimpleJumper, lambda: SimpleJumper(jump=0.3), CompositeJumper,
     lambda: CompositeJumper(jumps=(0.0, 0.5))],
    ids=["simple", "simple-J0.3", "composite", "composite-custom"],
)
def test_jumper_factor_integrates_to_one(make: Callable[[], BettingFunction]) -> None:
    # the factor is linear in p, so 8-point Gauss-Legendre is exact
    for bet in random_states(make, seed=1):
        before = bet.log_martingale
        integral = sum(w * math.exp(bet.log_factor(u)) for u, w in zip(GL_U, GL_UW, strict=True))
        assert abs(integral - 1.0) < QUAD_TOL
        assert bet.log_martingale == before  # log_factor does not change the state


def test_power_factor_integrates_to_one() -> None:
    # substitute p = u^(1/ε): ε p^(ε-1) dp = du, so the integrand must be 1 at every node
    rng = np.random.default_rng(2)
    for bet in random_states(lambda: PowerBetting(epsilon=float(rng.uniform(0.05, 1.0))), 2):
        eps = float(bet.epsilon)
        p = GL_U ** (1.0 / eps)
        jac = GL_U ** (1.0 / eps - 1.0) / eps
        vals = np.exp([bet.log_factor(float(max(q, P_FLOOR))) for q in p]) * jac
        assert abs(float(np.dot(GL_UW, vals)) - 1.0) < QUAD_TOL


@pytest.mark.parametrize(
    "make", [AGrapaBetting, lambda: AGrapaBetting(forgets=(0.5, 0.05), max_bet=0.9)],
    ids=["agrapa", "agrapa-fast-0.9"],
)
def test_agrapa_factor_integrates_to_one(make: Callable[[], BettingFunction]) -> None:
    # p = e^(-v), v ~ Exp(1): the factor is linear in v, so 8-point Gauss–Laguerre is exact
    # (its largest node, ≈ 22.9, keeps p far above the floor)
    for bet in random_states(make, seed=7):
        before = bet.log_martingale
        integral = sum(w * math.exp(bet.log_factor(math.exp(-v)))
                       for v, w in zip(GLAG_V, GLAG_W, strict=True))
        assert abs(integral - 1.0) < QUAD_TOL
        assert bet.log_martingale == before  # log_factor does not change the state


#: Every betting function in the forms the quadrature tests integrate.
QUADRATURE_FORMS: list[tuple[str, Callable[[], BettingFunction]]] = [
    ("simple", SimpleJumper), ("simple-J0.3", lambda: SimpleJumper(jump=0.3)),
    ("composite", CompositeJumper), ("composite-custom", lambda: CompositeJumper(jumps=(0.0, 0.5))),
    ("power-0.05", lambda: PowerBetting(epsilon=0.05)), ("power-0.7", lambda: PowerBetting(0.7)),
    ("agrapa", AGrapaBetting), ("agrapa-fast-0.9", lambda: AGrapaBetting((0.5, 0.05), 0.9)),
    ("plug_in_power", PlugInPower),
    ("plug_in_power-last-0.01", lambda: PlugInPower(forgets=(1.0, 0.01), min_epsilon=0.01)),
    ("mixture", SimpleMixture),
]
P_GRID = np.r_[0.0, P_FLOOR, np.logspace(-300, -1, 24), np.linspace(0.1, 0.9, 9),
               1.0 - np.logspace(-1, -12, 6), 1.0]


def _stepped(bet: BettingFunction, p: float) -> tuple[float, float, float]:
    """log S after p from copies of ``bet``: by ``update`` (the compiled per-event step),
    ``update_many`` (the compiled path) and the detectors' batch kernel (``run_test``)."""
    one, many, batch = (copy.deepcopy(bet) for _ in range(3))
    one.update(p)
    path = many.update_many([p])
    out_m, out_s = np.empty(1), np.empty(1)
    run_test(batch, Ville(1e-300), np.array([p]), 0, 1, out_m, out_s)
    return one.log_martingale, float(path[-1]), float(out_m[0])


@pytest.mark.parametrize("make", [make for _, make in QUADRATURE_FORMS],
                         ids=[name for name, _ in QUADRATURE_FORMS])
def test_log_factor_is_the_compiled_step(make: Callable[[], BettingFunction]) -> None:
    """The quadrature tests integrate the pure-Python ``log_factor``; the service runs compiled
    steps. On a grid of p from 0 to 1 and random reachable states, log S + log_factor(p) equals
    log S after ``update(p)``, ``update_many([p])`` and the detectors' ``run_test`` kernel, so
    the quadrature is about the production step (a bet fitted with the current p-value, say,
    fails here)."""
    for bet in itertools.islice(random_states(make, seed=12), 60):
        before = bet.log_martingale
        for p in P_GRID.tolist():
            expected = before + bet.log_factor(p)
            tol = 1e-12 + 1e-14 * abs(expected)
            for path, got in zip(("update", "update_many", "run_test"), _stepped(bet, p),
                                 strict=True):
                assert abs(got - expected) <= tol, (path, p, got, expected)


def test_agrapa_bets_only_on_small_p_values_and_adapts() -> None:
    """λ is clipped to [0, c]: a run of large p-values never makes S_n grow, and after a long
    null stretch the discounted plug-in bet still adapts within a few dozen small p-values."""
    rng = np.random.default_rng(8)
    bet = AGrapaBetting()
    assert bet.update_many(rng.uniform(0.5, 1.0, size=200)).max() <= 0.0
    bet.reset()
    bet.update_many(rng.uniform(size=5000))
    before = bet.log_martingale
    path = bet.update_many(rng.uniform(0, 0.1, size=100))
    assert path[39] - before > math.log(1e4)


@pytest.mark.parametrize(
    "make", [PlugInPower, lambda: PlugInPower(forgets=(1.0, 0.01), min_epsilon=0.01)],
    ids=["plug_in_power", "plug_in_power-last-0.01"],
)
def test_plug_in_power_factor_integrates_to_one(make: Callable[[], BettingFunction]) -> None:
    """p = e^(-v): ∫_0^1 f(p) dp = ∫_0^∞ f(e^(-v)) e^(-v) dv, a mixture of ε e^(-εv).

    The mass beyond v = 700 (p below the floor) is at most e^(-700 ε_min) < 1e-9 here.
    """
    for bet in itertools.islice(random_states(make, seed=9), 300):
        before = bet.log_martingale
        integral, _ = integrate.quad(lambda v, b=bet: math.exp(b.log_factor(math.exp(-v)) - v),
                                     0.0, 700.0, epsabs=1e-13, epsrel=1e-13, limit=400,
                                     points=[1.0, 10.0, 100.0])
        assert abs(integral - 1.0) < QUAD_TOL
        assert bet.log_martingale == before


def test_plug_in_power_bets_only_on_small_p_values_and_adapts() -> None:
    """ε ≤ 1: large p-values never make S_n grow; after a long null stretch the re-fitted
    exponent still catches a shift within a few dozen small p-values."""
    rng = np.random.default_rng(10)
    bet = PlugInPower()
    path = bet.update_many(rng.uniform(0.4, 1.0, size=200))
    assert np.all(np.diff(np.r_[0.0, path]) <= 1e-12)
    bet.reset()
    bet.update_many(rng.uniform(size=5000))
    before = bet.log_martingale
    path = bet.update_many(rng.uniform(0, 0.1, size=100))
    assert path[39] - before > math.log(1e4)


def test_mixture_factor_integrates_to_one() -> None:
    """p = e^(-v); quad over v ≤ V, plus the exact tail e^(-V) S_n(λ+V) / S_n(λ) (Fubini).

    The tail is the mass at p < e^(-V) ≈ 1e-304, below which p is floored: analytically it is
    there; numerically no p-value is that small.
    """
    v_max = 700.0
    for bet in random_states(SimpleMixture, seed=3):
        n, lam = float(bet._n), float(bet._lam)
        head, _ = integrate.quad(lambda v, b=bet: math.exp(b.log_factor(math.exp(-v)) - v),
                                 0.0, v_max, epsabs=1e-13, epsrel=1e-13, limit=400,
                                 points=[1.0, 10.0, 100.0])
        tail_log = log_mixture(np.array([n]), np.array([lam + v_max]))[0] - v_max
        tail = math.exp(tail_log - bet.log_martingale)
        assert abs(head + tail - 1.0) < QUAD_TOL


def test_mixture_matches_direct_integration() -> None:
    rng = np.random.default_rng(4)
    for length in [1, 2, 10, 50, 300]:
        ps = rng.uniform(size=length) ** rng.choice([0.3, 1.0, 3.0])
        lam = -np.log(ps).sum()
        direct, _ = integrate.quad(
            lambda e, lam=lam, n=length: math.exp(n * math.log(e) + lam * (1 - e) - lam)
            if e > 0 else 0.0, 0.0, 1.0, epsabs=0, epsrel=1e-12, limit=200)
        got = SimpleMixture().update_many(ps)[-1]
        assert got == pytest.approx(math.log(direct) + lam, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    ("name", "params"),
    [("simple_jumper", {}), ("composite_jumper", {}), ("power", {"epsilon": 0.75}),
     ("agrapa", {}), ("agrapa", {"forgets": (0.3,), "max_bet": 0.9}),
     ("plug_in_power", {"min_epsilon": 0.6}), ("plug_in_power", {"forgets": (1.0,),
                                                                 "min_epsilon": 0.55})],
    ids=["simple_jumper", "composite_jumper", "power-0.75", "agrapa", "agrapa-fast-0.9",
         "plug_in_power-0.6", "plug_in_power-last-0.55"],
)
def test_monte_carlo_mean_is_one(name: str, params: dict[str, float]) -> None:
    """Mean of S_n over 10 000 uniform paths within 3 standard errors of 1 (n = 10, 100).

    The power betting function with ε ≤ ½ and the mixture have S_n of infinite variance (their
    ε → 0 part bets like 1/p): a sample mean has no standard error, so they are checked by the
    exact quadrature above instead; the plug-in power is run here with ε_min > ½.
    """
    rng = np.random.default_rng(5)
    bet = make_betting(name, **params)
    ends = np.empty((10_000, 2))
    for i, row in enumerate(rng.uniform(size=(10_000, 100))):
        bet.reset()
        path = bet.update_many(row)
        ends[i] = path[9], path[99]
    s = np.exp(ends)
    se = s.std(axis=0, ddof=1) / math.sqrt(s.shape[0])
    assert np.all(np.abs(s.mean(axis=0) - 1.0) < 3 * se)


def test_monte_carlo_harness_can_fail() -> None:
    """The same harness rejects the mean when the p-values are not uniform (Beta(0.8, 1))."""
    rng = np.random.default_rng(5)
    bet = SimpleJumper()
    ends = np.empty(10_000)
    for i, row in enumerate(rng.beta(0.8, 1.0, size=(10_000, 100))):
        bet.reset()
        ends[i] = bet.update_many(row)[-1]
    s = np.exp(ends)
    assert abs(s.mean() - 1.0) > 3 * s.std(ddof=1) / 100


@pytest.mark.parametrize("name", sorted(BETTING_FUNCTIONS))
def test_update_many_equals_repeated_update(name: str) -> None:
    rng = np.random.default_rng(6)
    ps = np.concatenate([rng.uniform(size=400), rng.uniform(0, 0.05, 300), [0.0, 1.0, 0.5]])
    one, many = make_betting(name), make_betting(name)
    path = []
    for p in ps:
        one.update(p)
        path.append(one.log_martingale)
    got = np.concatenate([many.update_many(ps[:250]), many.update_many(ps[250:])])
    np.testing.assert_array_equal(got, path)
    assert np.all(np.isfinite(got))


def test_jumper_paths_match_the_previous_implementation() -> None:
    """Per-event update == update_many bit for bit, and both == the values the pure-Python
    implementation (before the compiled per-event step) produced on this stream."""
    rng = np.random.default_rng(0)
    ps = np.concatenate([rng.uniform(size=15_000), rng.beta(0.6, 1.0, size=5000)])
    one, many = CompositeJumper(), CompositeJumper()
    path = []
    for p in ps.tolist():
        one.update(p)
        path.append(one.log_martingale)
    batch = many.update_many(ps)
    np.testing.assert_array_equal(path, batch)
    previous = [-1.189509049224113, -1.4491607840966674, -1.4924257410796253,
                175.8803964994029, 351.757369114756]
    np.testing.assert_allclose(batch[[999, 9999, 14_999, 17_499, 19_999]], previous, rtol=1e-12)


def test_jumper_pickle_mid_stream_continues_exactly() -> None:
    rng = np.random.default_rng(4)
    ps = rng.uniform(size=500)
    bet = CompositeJumper()
    bet.update_many(ps[:200])
    clone = pickle.loads(pickle.dumps(bet))
    np.testing.assert_array_equal(clone.update_many(ps[200:]), bet.update_many(ps[200:]))


@pytest.mark.parametrize("name", sorted(BETTING_FUNCTIONS))
def test_long_strong_evidence_never_overflows(name: str) -> None:
    bet = make_betting(name)
    path = bet.update_many(np.full(100_000, 1e-6))
    assert np.all(np.isfinite(path)) and path[-1] > 1000


@pytest.mark.parametrize("name", sorted(BETTING_FUNCTIONS))
def test_invalid_p_values_are_rejected(name: str) -> None:
    bet = make_betting(name)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            bet.update(bad)
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            bet.update_many([0.5, bad])


def test_make_betting_names_the_valid_choices() -> None:
    valid = "agrapa, composite_jumper, mixture, plug_in_power, power, simple_jumper"
    with pytest.raises(ValueError, match=valid):
        make_betting("kelly")
    with pytest.raises(ValueError, match="epsilon"):
        PowerBetting(epsilon=0.0)
    with pytest.raises(ValueError, match="jump"):
        SimpleJumper(jump=1.5)
    with pytest.raises(ValueError, match="forgetting rates"):
        AGrapaBetting(forgets=(0.1, 1.0))
    with pytest.raises(ValueError, match="max_bet"):
        AGrapaBetting(max_bet=1.0)
    with pytest.raises(ValueError, match="forgetting rate"):
        PlugInPower(forgets=())
    with pytest.raises(ValueError, match="min_epsilon"):
        PlugInPower(min_epsilon=0.0)
