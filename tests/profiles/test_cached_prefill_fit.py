"""A prefill on a cached prefix, fitted from a server's timings
(:func:`profiles.fitmath.fit_cached_prefill`, through :func:`~profiles.engine_fit.fit_samples`).

Each such TTFT beyond the fresh-prompt fit's price of its new tokens alone is fitted as a
cost per cached token and per (new, cached) pair. Checked on hand-made timings around a
known cost (tests/profiles/engine_samples.py): found exactly without noise, pooled like
every other point, read back from a measurement's JSON, and not set (with the reason)
where nothing was timed.
"""

from __future__ import annotations

import json

import pytest

from profiles.engine_fit import NOT_TIMED, fit_samples
from profiles.engine_timings import samples_from_json
from profiles.fitmath import FitMathError, QuadraticFit, fit_cached_prefill
from profiles.server_cached import NEW_TOKENS, NO_ROOM, NOT_REPORTED, cached_plan
from tests.profiles.engine_samples import CACHED_POINTS, CONTEXTS, samples

COST = (6e-6, 3e-8)  # per cached token, per (new, cached) pair
WHEN = "2026-12-04T00:00:00+00:00"


def test_both_terms_are_found_exactly_from_exact_timings() -> None:
    profile = fit_samples([samples(1, WHEN, spread=0.0, cached_cost=COST)])
    assert profile.prefill.per_cached_token_s == pytest.approx(COST[0], rel=1e-6)
    assert profile.prefill.per_context_pair_s == pytest.approx(COST[1], rel=1e-6)
    fit = profile.source["fit"]["cached_prefill"]
    assert [(p, c) for p, c, _ in fit["points"]] == sorted(CACHED_POINTS)
    assert fit["max_rel_error"] == pytest.approx(0.0, abs=1e-9)
    assert profile.source["cached_prefill_timing"].startswith("client-side TTFT")
    # and the profile prices each point as timed: the new tokens' own square, the pairs
    # with the cached ones, the cached tokens themselves
    p = profile.prefill
    for prompt, cached, seconds in fit["points"]:
        new = prompt - cached
        price = p.a + p.tokens_s(cached, new) + p.per_cached_token_s * cached
        assert price == pytest.approx(seconds, rel=1e-6)


def test_noisy_timings_land_near_them() -> None:
    profile = fit_samples([samples(2, WHEN, spread=0.01, repeats=5, cached_cost=COST)])
    assert profile.prefill.per_cached_token_s == pytest.approx(COST[0], rel=0.5)
    assert profile.prefill.per_context_pair_s == pytest.approx(COST[1], rel=0.5)


def test_measurements_pool_their_timings_point_by_point() -> None:
    one = samples(3, WHEN, cached_cost=COST)
    two = samples(4, "2026-12-04T01:00:00+00:00", cached_cost=COST, scale=1.2)
    pooled = fit_samples([two, one])  # order given does not matter
    assert pooled == fit_samples([one, two])
    got = {(p, c): t for p, c, t in pooled.source["fit"]["cached_prefill"]["points"]}
    for (p, c, a), (_, _, b) in zip(one.cached_prefill, two.cached_prefill, strict=True):
        both = sorted(a + b)
        assert got[p, c] == pytest.approx((both[1] + both[2]) / 2)


def test_without_timings_the_profile_prices_as_before_and_says_why() -> None:
    plain = fit_samples([samples(5, WHEN)])
    assert plain.prefill.per_cached_token_s == 0.0
    assert plain.prefill.per_context_pair_s is None
    assert plain.source["cached_prefill_timing"] == NOT_TIMED
    assert not {"per_cached_token_s", "per_context_pair_s"} & set(plain.to_json()["prefill"])
    told = samples_from_json({**samples(6, WHEN).to_json(), "cached_prefill_note": NOT_REPORTED})
    assert fit_samples([told]).source["cached_prefill_timing"] == NOT_REPORTED
    # one number of new tokens cannot tell the two terms apart: neither is set
    one_new = samples(7, WHEN, cached_cost=COST)
    kept = tuple(x for x in one_new.cached_prefill if x[0] - x[1] == 256)
    alone = samples_from_json({**one_new.to_json(), "cached_prefill": [
        [p, c, list(t)] for p, c, t in kept
    ]})  # fmt: skip
    assert fit_samples([alone]).prefill.per_context_pair_s is None


def test_a_cache_hit_never_prices_work_below_nothing() -> None:
    fresh = QuadraticFit(0.01, 1e-4, 0.0, 0.0, 0.0)
    # faster than the new tokens alone: both terms 0, not negative
    fit = fit_cached_prefill([896, 896], [64, 256], [0.01 + 64e-4 - 0.002, 0.0356 - 0.003], fresh)
    assert (fit.per_cached_token_s, fit.per_context_pair_s) == (0.0, 0.0)
    with pytest.raises(FitMathError, match="at least 2"):
        fit_cached_prefill([896], [64], [0.02], fresh)


def test_a_measurement_with_its_cached_timings_reads_back() -> None:
    s = samples(8, WHEN, cached_cost=COST)
    assert samples_from_json(json.loads(json.dumps(s.to_json()))) == s
    old = s.to_json()
    del old["cached_prefill"], old["cached_prefill_note"]  # written before they were timed
    assert samples_from_json(old).cached_prefill == ()


def test_the_plan_times_shares_of_the_longest_prompt_with_two_numbers_of_new_tokens() -> None:
    assert NEW_TOKENS == (64, 256)
    planned = [(c + n, c) for c in cached_plan(CONTEXTS) for n in NEW_TOKENS]
    assert sorted(planned) == sorted(CACHED_POINTS)
    assert cached_plan([64, 128, 256, 319]) == []
    assert cached_plan([64, 320]) == [64]
    assert NO_ROOM.startswith("not measured")
