"""The online TTL policy: cold start, fallbacks, learning, bounded state."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fitting import hull
from fitting.durations import Prior
from fitting.policy import SOURCE_COLD, SOURCE_GLOBAL, SOURCE_TOOL, TTLPolicy
from fitting.policy_params import PolicyParams


def rebuild(tokens: float, offload: bool) -> float:
    """1 ms per 1k tokens prefilled, a tenth of that reloaded."""
    return tokens / 1e6 / (10 if offload else 1)


def prior(samples: list[float]) -> Prior:
    from fitting.cdf import empirical

    c = empirical(samples)
    return Prior(c.x, c.p, c.n)


def test_cold_start_uses_ln_b_with_eta_one() -> None:
    policy = TTLPolicy.create(PolicyParams(eta=-0.5, k=100), rebuild)
    policy.observe_queue_delay(4.0)
    d = policy.decide("grep", 20_000)
    assert d.source == SOURCE_COLD
    assert d.benefit_s == pytest.approx(4.0 * 1.0 + 0.02)  # η = 1 in cold start
    assert d.ttl_s == pytest.approx(math.log(4.02))
    fixed = TTLPolicy.create(PolicyParams(k=100, cold_start_ttl_s=0.25), rebuild)
    assert fixed.decide("x", 1000).ttl_s == 0.25


def test_tool_then_global_fallback() -> None:
    rng = np.random.default_rng(0)
    tools = {"grep": prior(list(rng.uniform(0.1, 0.3, 500))), "rare": prior([100.0] * 5)}
    everything = prior(list(rng.uniform(0.1, 0.3, 500)) + [100.0] * 5)
    policy = TTLPolicy.create(PolicyParams(k=100), rebuild, tools, everything)
    assert policy.decide("grep", 1e6).source == SOURCE_TOOL
    assert policy.decide("rare", 1e6).source == SOURCE_GLOBAL  # 5 records ≤ K
    assert policy.decide(None, 1e6).source == SOURCE_GLOBAL
    assert policy.decide("never-seen", 1e6).source == SOURCE_GLOBAL
    # B = 1 s: grep returns within 0.3 s, so keep it about that long
    assert 0.25 < policy.decide("grep", 1e6).ttl_s <= 0.3
    assert policy.decide("grep", 1e3).ttl_s == 0.0  # B = 1 ms: never worth it


def test_online_samples_move_the_decision() -> None:
    params = PolicyParams(k=10, refresh_every=8, prior_weight_cap=50)
    policy = TTLPolicy.create(params, rebuild, {"t": prior([30.0] * 200)}, prior([30.0] * 200))
    assert policy.decide("t", 5e6).ttl_s == 0.0  # 30 s pauses, B = 5 s
    for _ in range(400):
        policy.observe_pause("t", 0.4)
    policy.refresh_all()
    assert policy.decide("t", 5e6).ttl_s == pytest.approx(0.4)


def test_decision_equals_brute_force_on_prior_plus_history() -> None:
    rng = np.random.default_rng(5)
    base = list(np.round(rng.lognormal(0, 1, 300), 2))
    params = PolicyParams(k=10, refresh_every=1, prior_weight_cap=300, history_cap=64)
    policy = TTLPolicy.create(params, rebuild, {"t": prior(base)}, prior(base))
    seen = list(np.round(rng.lognormal(1, 0.5, 200), 2))
    for s in seen:
        policy.observe_pause("t", float(s))
    policy.refresh_all()
    # independent reference: weighted CDF of the prior (300) and the last 64 samples
    weights: dict[float, float] = {}
    for v in base:
        weights[float(v)] = weights.get(float(v), 0) + 1.0
    for v in seen[-64:]:
        weights[float(v)] = weights.get(float(v), 0) + 1.0
    xs = sorted(weights)
    ps = list(np.cumsum([weights[x] for x in xs]) / sum(weights.values()))
    for tokens in (1e5, 1e6, 3e6, 1e7):
        benefit = rebuild(tokens, False)
        _, ref_value = hull.brute_force(xs, ps, benefit)
        d = policy.decide("t", tokens)
        got = ps[xs.index(d.ttl_s)] * benefit - d.ttl_s if d.ttl_s else 0.0
        assert got == pytest.approx(ref_value, abs=1e-9)


def test_state_stays_bounded() -> None:
    params = PolicyParams(k=5, history_cap=100, refresh_every=1, t_window=10)
    policy = TTLPolicy.create(params, rebuild)
    rng = np.random.default_rng(1)
    for i in range(20_000):
        policy.observe_pause(f"tool{i % 50}", float(rng.exponential(2.0)))
        policy.observe_queue_delay(float(i))
    assert all(len(d.recent) <= 100 for d in policy.tools.values())
    assert policy.everything is not None and len(policy.everything.recent) <= 100
    # refresh_every = 1: every trusted hull is built from every record it holds
    trusted = [d for d in (*policy.tools.values(), policy.everything) if d.records > 5]
    assert trusted and all(d.built == d.records for d in trusted)
    assert len(policy.delays) == 10
    assert policy.queue_delay_s == pytest.approx(np.mean(np.arange(19_990, 20_000)))


def test_what_it_refuses_to_learn() -> None:
    policy = TTLPolicy.create(PolicyParams(abandon_s=600), rebuild)
    assert not policy.observe_pause("t", 4000.0)  # an abandoned program
    assert not policy.observe_pause("t", -1.0)
    assert not policy.observe_pause("t", float("nan"))
    assert not policy.observe_pause(None, 1.0)
    assert policy.records == 0
    policy.observe_queue_delay(float("inf"))
    assert policy.queue_delay_s == 0.0


def test_eta_learned_online_when_asked() -> None:
    fixed = TTLPolicy.create(PolicyParams(eta=0.3), rebuild)
    learn = TTLPolicy.create(PolicyParams(eta=0.3, learn_eta=True), rebuild)
    for p in (fixed, learn):
        for _ in range(50):
            p.observe_program_end(8)
    assert fixed.eta == 0.3
    assert learn.eta == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({"eta": 2.0}, "eta must be in [-1, 1], got 2.0"),
        ({"valve": "sometimes"}, "got 'sometimes'"),
        ({"pin_cap": 0.0}, "pin_cap must be in (0, 1], got 0.0"),
        ({"k": -1}, "k must be >= 0, got -1"),
        ({"t_window": 0}, "t_window must be >= 1, got 0"),
        # a window is a deque of that many samples: 2**63 overflowed Python's size
        ({"t_window": 2**63}, "t_window must be at most 10,000,000, got 9223372036854775808"),
        ({"history_cap": 10_000_001}, "history_cap must be at most 10,000,000, got 10000001"),
        ({"cold_start_ttl_s": -1.5}, "cold_start_ttl_s must be >= 0, got -1.5"),
        ({"refresh_every": 0}, "history_cap and refresh_every must be >= 1, got 1024 and 0"),
        ({"abandon_s": 0.0}, "prior_weight_cap must be >= 0 and abandon_s > 0, got 1024 and 0.0"),
    ],
)
def test_params_validate(bad: dict[str, object], said: str) -> None:
    """Each refusal names the value given (the flag's message is made from it)."""
    with pytest.raises(ValueError) as caught:
        PolicyParams(**bad)  # type: ignore[arg-type]
    assert said in str(caught.value)


def test_params_round_trip_and_reject_unknown() -> None:
    p = PolicyParams(eta=0.2, valve="stall-only", pin_cap=0.5)
    assert PolicyParams.from_json(p.to_json()) == p
    with pytest.raises(ValueError, match="unknown policy parameter"):
        PolicyParams.from_json({**p.to_json(), "secret": 1})


def test_disabled_policy_never_pins() -> None:
    policy = TTLPolicy.create(PolicyParams(pins=False), rebuild, {"t": prior([0.1] * 500)})
    d = policy.decide("t", 1e7)
    assert d.ttl_s == 0.0 and d.source == "disabled" and d.benefit_s > 0


def test_the_prior_counts_as_at_most_prior_weight_cap_samples() -> None:
    """A large fit is counted as ``prior_weight_cap`` samples so that new data can move it
    (docs/method.md: "counted as at most 1,024 samples"): 100 pauses of 0.4 s against a
    prior of 2,000 pauses of 30 s weighed as 50 give P(0.4) = 100/150, worth a pin at B = 5 s
    (uncapped, 100/2,100 would not be)."""
    params = PolicyParams(k=10, refresh_every=1, prior_weight_cap=50)
    policy = TTLPolicy.create(params, rebuild, {"t": prior([30.0] * 2000)}, prior([30.0] * 2000))
    for _ in range(100):
        policy.observe_pause("t", 0.4)
    assert policy.decide("t", 5e6).ttl_s == pytest.approx(0.4)


def test_a_prior_of_exactly_k_records_is_built_on_the_first_observation() -> None:
    """A CDF becomes trusted with more than K records: a prior of exactly K is not (it is
    not built at creation), so the observation that takes it past K builds its hull with
    that observation in it."""
    params = PolicyParams(k=4)
    policy = TTLPolicy.create(params, rebuild, {"t": prior([10.0] * 4)}, prior([10.0] * 4))
    assert policy.tools["t"].built == 0
    policy.observe_pause("t", 0.5)
    # P(0.5) = 1/5 at B = 5 s: 1 − 0.5 > 0, while τ = 10 s never pays
    d = policy.decide("t", 5e6)
    assert (d.source, d.ttl_s) == (SOURCE_TOOL, 0.5)


def test_a_pause_of_exactly_abandon_s_is_learned() -> None:
    """Only a pause *longer* than ``abandon_s`` is an abandoned program."""
    policy = TTLPolicy.create(PolicyParams(abandon_s=600), rebuild)
    assert policy.observe_pause("t", 600.0)
    assert not policy.observe_pause("t", 600.0 + 1e-9)
    assert policy.records == 1


def test_the_benefit_weighs_t_by_eta_whether_or_not_pins_are_on() -> None:
    """B = T·η + PrefillReload(context), as ``bundle query``/``inspect`` report it, also
    for a policy with pins off."""
    for pins in (True, False):
        policy = TTLPolicy.create(PolicyParams(eta=0.25, pins=pins, k=0), rebuild)
        policy.observe_queue_delay(4.0)
        assert policy.benefit(2e6) == pytest.approx(4.0 * 0.25 + 2.0)
        assert policy.benefit(2e6, eta=-0.5) == pytest.approx(4.0 * -0.5 + 2.0)
    off = TTLPolicy.create(PolicyParams(eta=0.25, pins=False), rebuild)
    off.observe_queue_delay(4.0)
    assert off.decide("t", 2e6).benefit_s == pytest.approx(4.0 * 0.25 + 2.0)


@pytest.mark.parametrize("with_prior", [False, True])
def test_repeated_zero_pauses_count_at_tau_zero(with_prior: bool) -> None:
    """A pause of 0 s is a sample like any other, and repeats of one value weigh together:
    four of 0 s and one of 5 s make P(0) = 0.8, so at B = 10 s not pinning (value 8) beats
    τ = 5 s (value 5). Counted once, P(0) would be 0.2 and τ = 5 s would win."""
    z = Prior((0.0, 5.0), (0.5, 1.0), 4)
    priors = ({"t": z}, z) if with_prior else ({}, None)
    policy = TTLPolicy.create(PolicyParams(k=3, refresh_every=1), rebuild, *priors)
    for s in (0.0, 0.0, 0.0, 0.0, 5.0):
        policy.observe_pause("t", s)
    d = policy.decide("t", 10e6)
    assert (d.source, d.ttl_s) == (SOURCE_TOOL, 0.0)


def test_params_accept_every_value_at_their_documented_bounds() -> None:
    """The other side of test_params_validate: each bound its refusal states is itself
    allowed (k >= 0, t_window >= 1, at most 10,000,000, pin_cap in (0, 1], eta in [-1, 1],
    cold_start_ttl_s >= 0, prior_weight_cap >= 0, history_cap and refresh_every >= 1)."""
    from fitting.policy_params import WINDOW_MAX

    for ok in (
        {"k": 0},
        {"t_window": 1},
        {"t_window": WINDOW_MAX, "history_cap": WINDOW_MAX},
        {"pin_cap": 1.0},
        {"eta": -1.0},
        {"eta": 1.0},
        {"cold_start_ttl_s": 0.0},
        {"prior_weight_cap": 0},
        {"history_cap": 1, "refresh_every": 1},
    ):
        assert PolicyParams(**ok).to_json().items() >= ok.items(), ok  # type: ignore[arg-type]


def test_a_decision_is_the_frozen_dataclass_its_fields_say() -> None:
    """decide builds its Decision without the dataclass's __init__: the same value, equal,
    hashing alike, frozen, its repr and JSON the constructor's."""
    import dataclasses

    from fitting import policy as policy_mod

    made = policy_mod._decision(0.5, SOURCE_TOOL, 5.0)
    built = policy_mod.Decision(0.5, SOURCE_TOOL, 5.0)
    assert type(made) is policy_mod.Decision
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    assert made.to_json() == built.to_json() == dataclasses.asdict(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.ttl_s = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("with_prior", [False, True])
def test_records_count_the_prior_and_every_pause_learned(with_prior: bool) -> None:
    """Durations.records is kept as pauses are learned (decide reads it, not a sum)."""
    p = prior([0.5, 1.0, 2.0]) if with_prior else None
    policy = TTLPolicy.create(PolicyParams(k=2, history_cap=2), rebuild, {"t": p} if p else {}, p)
    base = p.n if p else 0
    for i, seconds in enumerate([1.0, -1.0, 2.0, math.inf, 3.0, 1e9]):
        policy.observe_pause("t", seconds)
        learned = [1, 1, 2, 2, 3, 3][i]
        d = policy.tools["t"]
        assert d.records == base + d.observed == base + learned
        assert policy.records == base + learned
