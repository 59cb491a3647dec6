"""``hull.best`` is the exact argmax of P(τ)·B − τ on its float inputs, ties to the smaller τ.

The reference is a brute force in rational arithmetic (``fractions.Fraction``) over the
same floats the hull is given: every candidate τ = 0 and τ = x_j, the largest value wins
and equal values go to the smaller τ. Decimal grids (x in steps of 0.5, p in steps of
0.1) put many candidates within a rounding error of one another, which is where
floating slopes and a floating cross product decide wrongly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitting import cdf as cdf_mod
from fitting import hull


def exact_argmax(x: Sequence[float], p: Sequence[float], benefit: float) -> float:
    """The smallest τ among the candidates of largest exact value."""
    if not x:
        return 0.0
    b = Fraction(benefit)
    best_tau = 0.0
    best = (Fraction(p[0]) if x[0] == 0.0 else Fraction(0)) * b
    for tau, prob in zip(x, p, strict=True):
        value = Fraction(prob) * b - Fraction(tau)
        if value > best:
            best_tau, best = tau, value
    return best_tau


def exact_vertices(x: Sequence[float], p: Sequence[float]) -> list[float]:
    """The τ of the upper hull's vertices, by definition: a point strictly above every
    chord between a point on its left and one on its right (the ends always count)."""
    pts = [(Fraction(0), Fraction(p[0]) if x[0] == 0.0 else Fraction(0), 0.0)]
    pts += [(Fraction(a), Fraction(b), a) for a, b in zip(x, p, strict=True) if a > 0.0]

    def slope(i: int, j: int) -> Fraction:
        return (pts[j][1] - pts[i][1]) / (pts[j][0] - pts[i][0])

    out = []
    for i in range(len(pts)):
        if 0 < i < len(pts) - 1:
            into = min(slope(j, i) for j in range(i))
            out_of = max(slope(i, k) for k in range(i + 1, len(pts)))
            if not into > out_of:
                continue
        out.append(pts[i][2])
    return out


def decimal_grid(
    rng: random.Random, n: int, dx: float = 0.5, dp: float = 0.1
) -> tuple[list[float], list[float]]:
    """x = 0, then steps of k·dx; p = decimal-rounded steps of k·dp (on the tie line) or
    less (below it); strictly increasing, p ≤ 1. B = dx/dp puts every on-line point in a
    tie up to rounding (the issue's grids: x = [0, 1, 1.5, …], p = [.1, .3, .4, …], B = 5)."""
    xs = [0.0]
    ps = [round(rng.randint(1, 3) * dp, 12)]
    for _ in range(n):
        k = rng.randint(1, 3)
        step = k * dp if rng.random() < 0.75 else rng.uniform(0.01, k * dp)
        nxt = round(ps[-1] + step, 12)
        if nxt > 1.0:
            break
        xs.append(round(xs[-1] + k * dx, 12))
        ps.append(nxt)
    return xs, ps


def test_a_dropped_tie_vertex_is_the_answer() -> None:
    # exactly, on these floats: τ = 1 and τ = 3.5 tie for the best value, F(.4)·5 − 1 =
    # F(.9)·5 − 3.5 = 1 + 2^-53 > F(.2)·5 = 1 + 2^-54, so the answer is 1.0; a floating
    # cross product drops τ = 1 from the hull as collinear and the query then says 0
    x, p = [0.0, 1.0, 2.5, 3.5, 4.0], [0.2, 0.4, 0.7, 0.9, 1.0]
    assert exact_argmax(x, p, 5.0) == 1.0
    h = hull.build(x, p)
    assert list(h.x) == exact_vertices(x, p) == [0.0, 1.0, 3.5, 4.0]
    assert hull.best(h, 5.0)[0] == 1.0


def test_the_issue_grid_is_decided_on_its_floats() -> None:
    # the issue's example: as decimals the three candidates tie; on the floats given,
    # F(.4)·5 − 1.5 = 0.5 + 2^-53 beats F(.1)·5 = 0.5 + 2^-55 and F(.3)·5 − 1 < 0.5,
    # so the exact answer is 1.5 (not a tie)
    x, p = [0.0, 1.0, 1.5], [0.1, 0.3, 0.4]
    assert exact_argmax(x, p, 5.0) == 1.5
    assert hull.best(hull.build(x, p), 5.0)[0] == 1.5
    # and an exact tie (dyadic inputs) goes to the smaller τ
    x, p = [0.0, 1.0, 1.5], [0.125, 0.375, 0.5]
    assert hull.best(hull.build(x, p), 4.0)[0] == 0.0


def test_twenty_thousand_decimal_grids_agree_with_the_exact_argmax() -> None:
    rng = random.Random(11)
    wrong = []
    for _ in range(20_000):
        x, p = decimal_grid(rng, rng.randint(1, 12))
        got = hull.best(hull.build(x, p), 5.0)[0]
        want = exact_argmax(x, p, 5.0)
        if got != want:
            wrong.append((x, p, got, want))
    assert not wrong, f"{len(wrong)} of 20,000 grids differ, e.g. {wrong[0]}"


units = st.sampled_from([(0.5, 0.1), (0.25, 0.05), (1.0, 0.1), (0.3, 0.1), (0.5, 0.125)])


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), unit=units)
def test_tie_grids_exact(seed: int, n: int, unit: tuple[float, float]) -> None:
    dx, dp = unit
    x, p = decimal_grid(random.Random(seed), n, dx, dp)
    h = hull.build(x, p)
    assert list(h.x) == exact_vertices(x, p)
    for benefit in (dx / dp, (dx * 3) / (dp * 3), 1.0 / (dp / dx), dx / dp * (1 + 2**-52)):
        assert hull.best(h, benefit)[0] == exact_argmax(x, p, benefit), benefit


durations = st.lists(
    st.one_of(
        st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0, 1.5, 2.0, 10.0]),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(
    samples=durations,
    pick=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
    other=st.floats(-10.0, 1e5, allow_nan=False, allow_infinity=False),
)
def test_random_cdfs_exact(samples: list[float], pick: tuple[int, int], other: float) -> None:
    cdf = cdf_mod.empirical(samples)
    x, p = cdf.x, cdf.p
    h = hull.build(x, p)
    if len(x) <= 60:
        assert list(h.x) == exact_vertices(x, p)
    # B at the floating slope between two candidates: a near-tie by construction
    cands = [(0.0, p[0] if x[0] == 0.0 else 0.0), *zip(x, p, strict=True)]
    (xa, pa), (xb, pb) = cands[pick[0] % len(cands)], cands[pick[1] % len(cands)]
    tied = [(xb - xa) / (pb - pa)] if pb != pa else []
    for benefit in (*tied, other, 0.0, 1e-300):
        assert hull.best(h, benefit)[0] == exact_argmax(x, p, benefit), benefit


def test_value_is_the_floating_value_of_the_exact_argmax() -> None:
    x, p = [0.0, 1.0, 2.5, 3.5, 4.0], [0.2, 0.4, 0.7, 0.9, 1.0]
    tau, value = hull.best(hull.build(x, p), 5.0)
    assert (tau, value) == (1.0, 0.4 * 5.0 - 1.0)


def test_extreme_benefits() -> None:
    # 1/B overflows or a slope does: the exact path decides (cases hypothesis found)
    for samples, benefit in [
        ([0.0, 0.0, 7.395250782311102e-186], 2.2185752346933304e-185),
        ([0.0, 5e-324, 0.25, 0.5, 1.0, 2.0], 7e-323),
        ([0.0, 5e-324, 0.25, 0.5, 1.0, 2.0], 5e-324),
        ([1e-300, 2e-300, 1.0], 1e300),
        ([0.5, 1.0, 2.0], 1.7e308),
    ]:
        cdf = cdf_mod.empirical(samples)
        got = hull.best(hull.build(cdf.x, cdf.p), benefit)[0]
        assert got == exact_argmax(cdf.x, cdf.p, benefit), (samples, benefit)
    h = hull.build((0.5, 1.0), (0.5, 1.0))
    assert hull.best(h, float("nan"))[0] == 0.0  # a broken benefit never pins
    assert hull.best(h, float("inf"))[0] == 1.0


def test_floats_decide_away_from_near_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    cdf = cdf_mod.empirical([rng.lognormvariate(0.0, 1.2) for _ in range(4096)])
    h = hull.build(cdf.x, cdf.p)
    calls = [0]
    exact = hull._exact_index

    def counted(h: hull.Hull, benefit: float, guess: int) -> int:
        calls[0] += 1
        return exact(h, benefit, guess)

    monkeypatch.setattr(hull, "_exact_index", counted)
    for _ in range(20_000):
        hull.best(h, 10 ** rng.uniform(-1, 3))
    assert calls[0] == 0
    # B = 1/slope of each hull edge, in floats: every one is a near-tie, settled exactly
    for j in range(len(h.x) - 1):
        benefit = (h.x[j + 1] - h.x[j]) / (h.p[j + 1] - h.p[j])
        assert hull.best(h, benefit)[0] == exact_argmax(cdf.x, cdf.p, benefit)
    assert calls[0] == len(h.x) - 1


#: sorted distinct samples: random, arithmetic (every point collinear), nearly arithmetic
#: (gaps equal but for one rounding), from zero, decimals (rounding in every gap)
def _samples(kind: str, n: int, rng: random.Random) -> list[float]:
    if kind == "random":
        xs = {rng.lognormvariate(0.0, 1.5) for _ in range(n)}
    elif kind == "arithmetic":
        xs = {0.5 * i + 0.25 for i in range(1, n + 1)}
    elif kind == "near":
        xs = {0.1 * i + rng.choice([0.0, 1e-16, -1e-16]) * i for i in range(1, n + 1)}
    elif kind == "zero":
        xs = {0.0} | {round(rng.uniform(0, 3), 1) for _ in range(n)}
    else:
        xs = {round(rng.expovariate(1.0), 2) for _ in range(n)}
    return sorted(x for x in xs if x >= 0.0)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 300),
    kind=st.sampled_from(["random", "arithmetic", "near", "zero", "decimal"]),
)
def test_the_equal_weight_shortcut_builds_the_same_hull(seed: int, n: int, kind: str) -> None:
    """``build_equal_weights`` drops points below their neighbours' chord before the chain;
    the hull (vertices, slopes, guard bands) is :func:`hull.build`'s on p_i = i/n."""
    xs = _samples(kind, n, random.Random(seed))
    ps = [i / float(len(xs)) for i in range(1, len(xs) + 1)]
    assert hull.build_equal_weights(xs) == hull.build(xs, ps)


def test_a_hull_keeps_its_vertices_and_one_guard_band_per_edge() -> None:
    """What a query reads and nothing else (the engine holds one hull per CDF): the
    vertices and, per edge, a guard band; every exact −slope lies inside a band (its own,
    or its neighbour's where near-equal slopes made the bands overlap), so the floats
    never decide a near-tie. The rounded −slopes were kept as well, read only for their
    count."""
    import dataclasses

    rng = random.Random(7)
    cdf = cdf_mod.empirical([round(rng.lognormvariate(0.0, 1.0), 2) for _ in range(2000)])
    h = hull.build(cdf.x, cdf.p)
    assert [f.name for f in dataclasses.fields(hull.Hull)] == ["x", "p", "guards"]
    edges = len(h.x) - 1
    assert edges > 3 and len(h.guards) == 1 + 2 * edges
    assert list(h.guards) == sorted(h.guards)
    for j in range(edges):
        neg = -(Fraction(h.p[j + 1]) - Fraction(h.p[j])) / (Fraction(h.x[j + 1]) - Fraction(h.x[j]))
        assert any(h.guards[1 + 2 * i] <= neg <= h.guards[2 + 2 * i] for i in range(edges))


def test_an_infinite_benefit_takes_the_last_vertex_inside_a_guard_band() -> None:
    """B = inf: only the largest P counts, so τ* is the last vertex. With an edge's slope
    so small that its guard band straddles 0, −1/B = −0.0 falls inside the band and the
    exact search answers (as B = 1e308, finite, does)."""
    h = hull.build([1.0, 1e300], [0.5, 1.0])
    assert h.guards[-2] < 0.0 < h.guards[-1]  # the last edge's band holds −1/inf
    assert hull.best(h, math.inf)[0] == 1e300
    assert hull.best(h, 1e308)[0] == 1e300
