"""When a CDF is trusted, and that a trusted CDF's hull reflects its samples.

The method: at most K records in all, Exp(1) (cold start); more than K records for a
tool, that tool's CDF; otherwise the CDF of all tools. These tests use the default
``refresh_every`` (64) throughout, with K on both sides of it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitting import cdf as cdf_mod
from fitting import hull as hull_mod
from fitting import policy as policy_mod
from fitting.durations import Prior
from fitting.policy import SOURCE_COLD, SOURCE_GLOBAL, SOURCE_TOOL, TTLPolicy
from fitting.policy_params import PolicyParams

#: context tokens whose rebuild costs B = 5 s under ``rebuild`` (and T = 0)
B5 = 5e6


def rebuild(tokens: float, offload: bool) -> float:
    return tokens / 1e6


def prior(samples: list[float]) -> Prior:
    c = cdf_mod.empirical(samples)
    return Prior(c.x, c.p, c.n)


def exact_argmax(samples: list[float], benefit: float) -> float:
    """τ* on the empirical CDF of ``samples``, in rational arithmetic, ties to the smaller τ."""
    c = cdf_mod.empirical(samples)
    b = Fraction(benefit)
    best_tau, best = 0.0, (Fraction(c.p[0]) if c.x[0] == 0.0 else Fraction(0)) * b
    for tau, prob in zip(c.x, c.p, strict=True):
        value = Fraction(prob) * b - Fraction(tau)
        if value > best:
            best_tau, best = tau, value
    return best_tau


def test_the_issue_example() -> None:
    # PolicyParams(k=10), no prior, 11 pauses of 0.5 s, B = 5 s: pin for 0.5 s at once
    policy = TTLPolicy.create(PolicyParams(k=10), rebuild)
    for _ in range(10):
        policy.observe_pause("t", 0.5)
    assert policy.decide("t", B5).source == SOURCE_COLD
    policy.observe_pause("t", 0.5)
    assert policy.decide("t", B5) == policy_mod.Decision(0.5, SOURCE_TOOL, 5.0)
    assert policy.decide("other", B5) == policy_mod.Decision(0.5, SOURCE_GLOBAL, 5.0)


@pytest.mark.parametrize("k", [0, 1, 10, 63, 64, 65, 100, 130])
def test_cold_start_boundary_without_a_prior(k: int) -> None:
    policy = TTLPolicy.create(PolicyParams(k=k), rebuild)
    for _ in range(k):
        policy.observe_pause("t", 0.5)
    assert policy.records == k
    assert policy.decide("t", B5).source == SOURCE_COLD  # at most K records in all
    assert policy.decide("u", B5).source == SOURCE_COLD
    policy.observe_pause("t", 0.5)  # K + 1: both CDFs trusted, and built from every sample
    assert policy.decide("t", B5) == policy_mod.Decision(0.5, SOURCE_TOOL, 5.0)
    assert policy.decide("u", B5) == policy_mod.Decision(0.5, SOURCE_GLOBAL, 5.0)


@pytest.mark.parametrize("k", [0, 10, 63, 64, 100, 300])
def test_cold_start_boundary_with_a_global_prior(k: int) -> None:
    # the prior stands for records; the first observations decide when K is crossed
    everything = prior([30.0] * max(k - 2, 1))
    start = everything.n
    policy = TTLPolicy.create(PolicyParams(k=k), rebuild, global_prior=everything)
    while policy.records < k:
        policy.observe_pause("t", 0.5)
    if start <= k:
        assert policy.decide("u", B5).source == SOURCE_COLD
    policy.observe_pause("t", 0.5)
    seen = [30.0] * start + [0.5] * (policy.records - start)
    d = policy.decide("u", B5)
    assert d.source == SOURCE_GLOBAL
    assert d.ttl_s == exact_argmax(seen, 5.0)


@pytest.mark.parametrize("k", [1, 10, 63, 64, 100, 300])
def test_tool_ladder_boundary(k: int) -> None:
    # all tools: long pauses, trusted from the start (never worth a pin at B = 5 s)
    everything = prior([30.0] * (k + 1000))
    tools = {"t": prior([30.0] * max(k - 3, 1))}
    policy = TTLPolicy.create(PolicyParams(k=k), rebuild, tools, everything)
    own = tools["t"].n
    while policy.tools["t"].records < k:
        policy.observe_pause("t", 0.5)
    d = policy.decide("t", B5)
    assert (d.source, d.ttl_s) == (SOURCE_GLOBAL, 0.0)  # K records for t: all tools' CDF
    policy.observe_pause("t", 0.5)  # K + 1: t's own CDF, with every one of its records
    seen = [30.0] * own + [0.5] * (policy.tools["t"].records - own)
    d = policy.decide("t", B5)
    assert d.source == SOURCE_TOOL
    assert d.ttl_s == exact_argmax(seen, 5.0)
    assert k > 20 or d.ttl_s == 0.5  # few records: the 0.5 s pauses make the pin pay


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(0, 150),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([0.1, 1.0, 5.0]),
)
def test_a_cdf_is_exact_the_moment_it_is_trusted(k: int, seed: int, scale: float) -> None:
    rng = random.Random(seed)
    policy = TTLPolicy.create(PolicyParams(k=k), rebuild)
    seen: dict[str, list[float]] = {"a": [], "b": []}
    everything: list[float] = []
    for _ in range(2 * k + 3):
        tool = rng.choice("ab")
        pause = round(rng.expovariate(1 / scale), 2)
        before = policy.records
        policy.observe_pause(tool, pause)
        seen[tool].append(pause)
        everything.append(pause)
        benefit = rng.choice([0.5, 2.0, 5.0, 20.0])
        if before == k:  # all tools just became trusted
            got = policy.decide("neither", benefit * 1e6)
            assert (got.source, got.ttl_s) == (SOURCE_GLOBAL, exact_argmax(everything, benefit))
        if len(seen[tool]) == k + 1:  # this tool just became trusted
            got = policy.decide(tool, benefit * 1e6)
            assert (got.source, got.ttl_s) == (SOURCE_TOOL, exact_argmax(seen[tool], benefit))


@contextmanager
def counted_builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    calls = [0]
    real = hull_mod.build

    def build(x: Sequence[float], p: Sequence[float]) -> hull_mod.Hull:
        calls[0] += 1
        return real(x, p)

    monkeypatch.setattr(hull_mod, "build", build)  # the module fitting.durations calls
    yield calls


def test_work_per_event_and_staleness_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    params = PolicyParams(k=20)
    policy = TTLPolicy.create(params, rebuild, {"t0": prior([1.0] * 5)})
    rng = random.Random(3)
    with counted_builds(monkeypatch) as calls:
        for i in range(6_000):
            before = calls[0]
            policy.observe_pause(f"t{rng.randrange(7) if i % 3 else 0}", rng.expovariate(1.0))
            assert calls[0] - before <= 2  # the tool's hull and all tools' hull, at most
            for d in (*policy.tools.values(), policy.everything):
                assert d is not None
                if d.records > params.k:  # trusted: built, and behind by < min(R, built)
                    assert 0 < d.built <= d.records
                    assert d.records - d.built < min(params.refresh_every, d.built)
    # amortised: about one rebuild per refresh_every samples per CDF, plus a few early ones
    assert calls[0] <= 2 * 6_000 / params.refresh_every + 8 * 8
