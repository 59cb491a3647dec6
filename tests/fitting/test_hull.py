"""The O(log n) decision equals a brute-force argmax over all candidates."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fitting import cdf as cdf_mod
from fitting import hull

durations = st.lists(
    st.one_of(
        st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, 0.5, 1.0, 2.0, 10.0]),  # ties and exact zeros
    ),
    min_size=0,
    max_size=300,
)
benefits = st.one_of(
    st.floats(-100.0, 1e5, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1.0, 1e-9, 2.0]),
)


@settings(max_examples=400, deadline=None)
@given(samples=durations, benefit=benefits)
def test_fast_query_equals_brute_force(samples: list[float], benefit: float) -> None:
    cdf = cdf_mod.empirical(samples)
    h = hull.build(cdf.x, cdf.p)
    tau, value = hull.best(h, benefit)
    _, ref_value = hull.brute_force(cdf.x, cdf.p, benefit)
    assert math.isclose(value, ref_value, rel_tol=1e-9, abs_tol=1e-9)
    # τ must be a candidate and worth exactly what it says
    assert tau == 0.0 or tau in cdf.x
    assert math.isclose(cdf.at(tau) * benefit - tau, value, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=200, deadline=None)
@given(samples=durations.filter(lambda s: len(s) > 0), benefit=benefits)
def test_ties_go_to_the_smaller_ttl(samples: list[float], benefit: float) -> None:
    cdf = cdf_mod.empirical(samples)
    tau, _ = hull.best(hull.build(cdf.x, cdf.p), benefit)
    candidates = [0.0, *cdf.x]
    values = [cdf.at(c) * benefit - c for c in candidates]
    best = max(values)
    winners = [
        c for c, v in zip(candidates, values, strict=True) if v >= best - 1e-9 * max(1, abs(best))
    ]
    # when the maximum is unique by a clear margin, the query finds exactly it
    clear = [
        c for c, v in zip(candidates, values, strict=True) if v >= best - 1e-6 * max(1, abs(best))
    ]
    if len(clear) == 1:
        assert tau == clear[0]
    assert tau <= max(winners)


def test_empty_and_single_sample() -> None:
    assert hull.best(hull.build((), ()), 5.0) == (0.0, 0.0)
    one = cdf_mod.empirical([2.0])
    h = hull.build(one.x, one.p)
    assert hull.best(h, 3.0) == (2.0, 1.0)  # 1·3 − 2 > 0
    assert hull.best(h, 1.5)[0] == 0.0  # 1.5 − 2 < 0: do not pin
    assert hull.best(h, 2.0)[0] == 0.0  # tie at 0: the smaller τ


def test_cold_start_is_ln_b() -> None:
    assert hull.cold_start(0.5) == 0.0
    assert hull.cold_start(1.0) == 0.0
    b = 20.0
    tau = hull.cold_start(b)
    grid = np.linspace(0, 20, 200_001)
    assert abs(tau - grid[np.argmax((1 - np.exp(-grid)) * b - grid)]) < 1e-3


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1_100, 30_000),
    sigma=st.floats(0.2, 3.0),
    levels=st.integers(0, 3),
)
def test_compression_moves_no_decision_beyond_the_bound(
    seed: int, n: int, sigma: float, levels: int
) -> None:
    rng = np.random.default_rng(seed)
    samples = rng.lognormal(0.0, sigma, n)
    if levels:  # rounded clocks make ties, as real logs do
        samples = np.round(samples, levels)
    full = cdf_mod.empirical(samples)
    small = cdf_mod.compress(full)
    assume(len(full.x) > cdf_mod.MAX_POINTS)
    assert len(small.x) <= cdf_mod.MAX_POINTS
    ks = cdf_mod.ks_distance(full, small)
    assert ks <= cdf_mod.compression_bound() + 1e-12
    h_full = hull.build(full.x, full.p)
    h_small = hull.build(small.x, small.p)
    for benefit in rng.uniform(0.0, 50 * float(np.median(samples)), 25):
        _, best = hull.best(h_full, benefit)
        tau_small, _ = hull.best(h_small, benefit)
        achieved = full.at(tau_small) * benefit - tau_small
        assert best - achieved <= 2 * ks * benefit + 1e-9


def test_small_cdfs_are_kept_exactly() -> None:
    full = cdf_mod.empirical(np.arange(1000.0))
    assert cdf_mod.compress(full) == full


def test_exact_tie_picks_the_smaller_ttl() -> None:
    cdf = cdf_mod.empirical([1.0, 3.0])  # (1, 0.5), (3, 1.0)
    # B = 4: τ=1 is worth 0.5·4 − 1 = 1, τ=3 is worth 4 − 3 = 1
    assert hull.best(hull.build(cdf.x, cdf.p), 4.0) == (1.0, 1.0)
    assert hull.brute_force(cdf.x, cdf.p, 4.0) == (1.0, 1.0)
