"""What a cached prompt token costs, fitted from a server's timings
(:func:`profiles.engine_fit.fit_cached`, through :func:`~profiles.engine_fit.fit_samples`).

Each prefill on a cached prefix is priced by the fresh-prompt fit for its new tokens on top
of the cached ones; what it takes beyond that, per cached token, is the term. Checked on
hand-made timings around a known cost (tests/profiles/engine_samples.py): found exactly
without noise, pooled like every other point, read back from a measurement's JSON, and 0
(with the reason) where nothing was timed.
"""

from __future__ import annotations

import json

import pytest

from profiles.engine_fit import NOT_TIMED, fit_cached, fit_samples
from profiles.engine_timings import samples_from_json
from profiles.fitmath import QuadraticFit
from profiles.server_cached import NO_ROOM, NOT_REPORTED, cached_plan
from tests.profiles.engine_samples import CACHED_POINTS, CONTEXTS, samples

PER_CACHED = 6e-6


def test_the_term_is_found_exactly_from_exact_timings() -> None:
    profile = fit_samples(
        [samples(1, "2026-12-04T00:00:00+00:00", spread=0.0, per_cached=PER_CACHED)]
    )
    assert profile.prefill.per_cached_token_s == pytest.approx(PER_CACHED, rel=1e-6)
    points = profile.source["fit"]["cached_prefill"]["points"]
    assert [(p, c) for p, c, _ in points] == list(CACHED_POINTS)
    assert profile.source["cached_prefill_timing"].startswith("client-side TTFT")


def test_noisy_timings_land_near_it() -> None:
    profile = fit_samples(
        [samples(2, "2026-12-04T00:00:00+00:00", spread=0.01, repeats=5, per_cached=PER_CACHED)]
    )
    assert profile.prefill.per_cached_token_s == pytest.approx(PER_CACHED, rel=0.5)


def test_measurements_pool_their_timings_point_by_point() -> None:
    one = samples(3, "2026-12-04T00:00:00+00:00", per_cached=PER_CACHED)
    two = samples(4, "2026-12-04T01:00:00+00:00", per_cached=PER_CACHED, scale=1.2)
    pooled = fit_samples([two, one])  # order given does not matter
    assert pooled == fit_samples([one, two])
    got = {(p, c): t for p, c, t in pooled.source["fit"]["cached_prefill"]["points"]}
    for (p, c, a), (_, _, b) in zip(one.cached_prefill, two.cached_prefill, strict=True):
        both = sorted(a + b)
        assert got[p, c] == pytest.approx((both[1] + both[2]) / 2)


def test_no_points_no_term_and_the_reason_kept() -> None:
    plain = fit_samples([samples(5, "2026-12-04T00:00:00+00:00")])
    assert plain.prefill.per_cached_token_s == 0.0
    assert plain.source["cached_prefill_timing"] == NOT_TIMED
    assert "per_cached_token_s" not in plain.to_json()["prefill"]
    told = samples(6, "2026-12-04T00:00:00+00:00")
    told = samples_from_json({**told.to_json(), "cached_prefill_note": NOT_REPORTED})
    assert fit_samples([told]).source["cached_prefill_timing"] == NOT_REPORTED


def test_a_cache_hit_never_prices_work_below_nothing() -> None:
    quad = QuadraticFit(0.01, 1e-4, 0.0, 0.0, 0.0)
    # faster than the new tokens alone: clipped at 0, not a negative price
    assert fit_cached(quad, [(1000, 736, 0.01 + 1e-4 * 264 - 0.002)]) == 0.0
    assert fit_cached(quad, []) == 0.0
    assert fit_cached(quad, [(1000, 736, 0.01 + 1e-4 * 264 + 736 * 2e-6)]) == pytest.approx(2e-6)


def test_a_measurement_with_its_cached_timings_reads_back() -> None:
    s = samples(7, "2026-12-04T00:00:00+00:00", per_cached=PER_CACHED)
    back = samples_from_json(json.loads(json.dumps(s.to_json())))
    assert back == s
    old = s.to_json()
    del old["cached_prefill"], old["cached_prefill_note"]  # written before they were timed
    assert samples_from_json(old).cached_prefill == ()


def test_the_plan_times_shares_of_the_longest_prompt() -> None:
    assert [c + 256 for c in cached_plan(CONTEXTS)] == [p for p, _ in CACHED_POINTS]
    assert cached_plan([64, 128, 256, 319]) == []
    assert cached_plan([64, 320]) == [64]
    assert NO_ROOM.startswith("not measured")
