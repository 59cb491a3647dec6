"""``--valve`` and ``--pin-cap`` reach the policies that read them, over each one's own
default (docs/replay.md, "Policies"): ``static-ttl`` (unset: ``head``, the paper's
baseline), ``continuum`` (over the bundle's; without a bundle ``stall-only`` and no cap) and
``oracle`` (unset: ``stall-only``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles import profile_read
from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec, make
from replay.policies.continuum import Continuum
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, Workload
from tests.bundles import write_bundle
from ttlctl import bundle as bundle_mod

#: A pins its 63 blocks of an 80-block cache while B decodes; C arrives at 150 ms needing
#: 38 blocks: the head valve releases A's pin for C though B runs, stall-only lets it
#: expire first (A comes back at 5 s); a cap of a quarter of the cache refuses the pin
WORK = Workload(
    (
        AgentProgram("A", 0.0, (Call(1000, 1, 0, "t", 5.0), Call(1100, 1, 1001, None, 0.0))),
        AgentProgram("B", 0.0, (Call(16, 100, 0, None, 0.0),)),
        AgentProgram("C", 0.15, (Call(600, 1, 0, None, 0.0),)),
    )
)
MADE_RELEASED_EXPIRED = (1, 1, 0)  # the head valve
MADE_EXPIRED = (1, 0, 1)  # stall-only
REFUSED = (0, 0, 0)


@pytest.mark.parametrize(
    ("spec", "pins"),
    [
        (PolicySpec("static-ttl", ttl_s=1.0), MADE_RELEASED_EXPIRED),
        (PolicySpec("static-ttl", ttl_s=1.0, valve="stall-only"), MADE_EXPIRED),
        (PolicySpec("static-ttl", ttl_s=1.0, pin_cap=0.25), REFUSED),
        (PolicySpec("continuum"), MADE_EXPIRED),
        (PolicySpec("continuum", valve="head"), MADE_RELEASED_EXPIRED),
        (PolicySpec("continuum", pin_cap=0.25), REFUSED),
        (PolicySpec("oracle"), MADE_EXPIRED),
        (PolicySpec("oracle", valve="head"), MADE_RELEASED_EXPIRED),
        (PolicySpec("oracle", pin_cap=0.25), REFUSED),
    ],
    ids=lambda v: (
        "-".join(str(x) for x in (v.name, v.valve, v.pin_cap)) if isinstance(v, PolicySpec) else ""
    ),
)
def test_valve_and_pin_cap_reach_the_policy_over_its_default(
    spec: PolicySpec, pins: tuple[int, int, int]
) -> None:
    # a cold-start continuum pins for ln B: B = 2 s of rebuild gives τ ≈ 0.7 s; the
    # oracle, told A's pause is 10 ms, pins for that and the longest step (0.12 s)
    policy = make(spec, {("A", 0): 0.01}, lambda tokens, offload: 2.0)
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 80, block_size=16), check=True)
    stats = simulate(WORK, policy, ConstantCostModel(), cfg).engine.stats
    assert (stats.pins_made, stats.pins_released, stats.pins_expired) == pins
    assert stats.pins_refused == (1 if pins == REFUSED else 0)


@pytest.mark.parametrize(("pause", "hit"), [(0.045, True), (0.075, False)])
def test_static_ttl_pins_for_the_ttl_seconds_given(pause: float, hit: bool) -> None:
    """``--ttl-seconds 0.06``: A back 45 ms after its call finds its pin, 75 ms after
    finds it expired (an idle engine expires it at the arrival)."""
    a = AgentProgram("A", 0.0, (Call(1000, 1, 0, "t", pause), Call(1100, 1, 1001, None, 0.0)))
    policy = make(PolicySpec("static-ttl", ttl_s=0.06), {}, lambda tokens, offload: 0.0)
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 80, block_size=16), check=True)
    stats = simulate(Workload((a,)), policy, ConstantCostModel(), cfg).engine.stats
    assert (stats.pins_made, stats.pins_hit, stats.pins_expired) == (1, int(hit), int(not hit))


@pytest.mark.parametrize(("pause", "hit"), [(1.9, True), (2.1, False)])
def test_static_ttls_ttl_is_two_seconds_by_default(pause: float, hit: bool) -> None:
    a = AgentProgram("A", 0.0, (Call(1000, 1, 0, "t", pause), Call(1100, 1, 1001, None, 0.0)))
    policy = make(PolicySpec("static-ttl"), {}, lambda tokens, offload: 0.0)
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 80, block_size=16), check=True)
    stats = simulate(Workload((a,)), policy, ConstantCostModel(), cfg).engine.stats
    assert (stats.pins_hit, stats.pins_expired) == (int(hit), int(not hit))


def test_continuum_prices_a_miss_as_a_reload_with_an_offload_tier() -> None:
    """A cold-start continuum pins A's context for ln B: B = 20 s to rebuild without a host
    tier (a pin), 0.5 s to reload with one (ln B < 0: none)."""
    work = Workload(WORK.programs[:1])
    made = []
    for offload_tokens in (0, 100_000):
        policy = make(PolicySpec("continuum"), {}, lambda tokens, offload: 0.5 if offload else 20.0)
        cfg = ReplayConfig(
            engine=SimSchedulerConfig(kv_tokens=16 * 80, block_size=16),
            offload_tokens=offload_tokens,
            check=True,
        )
        made.append(simulate(work, policy, ConstantCostModel(), cfg).engine.stats.pins_made)
    assert made == [1, 0]


def test_continuum_prices_a_miss_in_the_engines_steps(tmp_path: Path) -> None:
    """With a bundle, a miss is priced by the bundle's profile in steps of the engine's
    ``max_num_batched_tokens`` (``chunk``), as the plugin prices it."""
    doc = bundle_mod.read(write_bundle(tmp_path / "b.json"))
    profile = profile_read.from_json(doc["profile"])
    priced = []
    for chunk in (64, None):
        policy = make(PolicySpec("continuum", bundle=doc), {}, lambda t, o: 0.0, chunk)
        assert isinstance(policy, Continuum)
        priced.append(policy.ttl.rebuild_s(4096, False))
    assert priced[0] == profile.rebuild_s(4096, False, chunk=64) != priced[1]
