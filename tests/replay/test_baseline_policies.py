"""The baselines' own rules (docs/method.md, "Baselines" and "Bounds and the score";
docs/replay.md, "Policies"): InferCept's TTL Tfwd(C) · (C + C_other) / (2C) with the head
valve and no pin cap whatever the flags say, Autellix's least-attained-service queues with
anti-starvation, and the oracle's pin when the pause is shorter than rebuild plus the mean
queueing delay."""

from __future__ import annotations

from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec, make
from replay.policies.baselines import Autellix
from replay.request import SimRequest
from replay.scheduler import SimScheduler, SimSchedulerConfig, Stats
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, Workload

COST = ConstantCostModel()
#: A's 1,000-token context (prompt 1,000, one output token) rebuilt in one step of 8,192
REBUILD_A = COST.rebuild_s(1000, 8192)  # 0.1 s of prefill + one 20 ms step


def _a(pause: float) -> AgentProgram:
    return AgentProgram("A", 0.0, (Call(1000, 1, 0, "t", pause), Call(1100, 1, 1001, None, 0.0)))


def _stats(
    work: Workload,
    spec: PolicySpec,
    *,
    kv_blocks: int = 400,
    offload_tokens: int = 0,
    pauses: dict[tuple[str, int], float] | None = None,
) -> Stats:
    cfg = ReplayConfig(
        engine=SimSchedulerConfig(kv_tokens=16 * kv_blocks, block_size=16),
        offload_tokens=offload_tokens,
        check=True,
    )
    policy = make(spec, pauses or {}, lambda t, o: 0.0)
    return simulate(work, policy, COST, cfg).engine.stats


def _made_hit_expired(stats: Stats) -> tuple[int, int, int]:
    return stats.pins_made, stats.pins_hit, stats.pins_expired


# ------------------------------------------------------------------ InferCept


def test_infercepts_ttl_is_half_the_rebuild_of_a_context_alone() -> None:
    """Alone (C_other = 0), τ = Tfwd(C) · C / (2C) = Tfwd(C) / 2 = 60 ms for A's 1,000
    tokens: a pause of 45 ms finds its pin, one of 75 ms finds it expired (an idle engine
    expires it at the arrival)."""
    infercept = PolicySpec("infercept")
    assert _made_hit_expired(_stats(Workload((_a(0.045),)), infercept)) == (1, 1, 0)
    assert _made_hit_expired(_stats(Workload((_a(0.075),)), infercept)) == (1, 0, 1)


def test_infercepts_ttl_grows_with_the_other_running_contexts() -> None:
    """B's 1,000-token context runs through A's pause: τ = Tfwd(C) · (C + C_other) / (2C)
    is about Tfwd(C), so a 90 ms pause, past τ alone, finds its pin."""
    b = AgentProgram("B", 0.0, (Call(1000, 100, 0, None, 0.0),))
    stats = _stats(Workload((_a(0.09), b)), PolicySpec("infercept"))
    assert _made_hit_expired(stats) == (1, 1, 0)


def test_infercept_with_an_offload_tier_prices_a_discard_as_a_reload() -> None:
    """With a host tier the KV survives a discard (write-through), so Tfwd is the reload:
    τ = 0.5 ms for A's context, and a 45 ms pause finds the pin expired."""
    stats = _stats(Workload((_a(0.045),)), PolicySpec("infercept"), offload_tokens=100_000)
    assert _made_hit_expired(stats) == (1, 0, 1)


def test_infercept_has_no_pin_cap_whatever_the_flags_say() -> None:
    """A's 63 blocks, pinned in a 100-block cache: InferCept keeps no cap, and neither
    ``--pin-cap`` nor ``--valve`` reaches it (docs/replay.md)."""
    work = Workload((_a(0.03),))
    for spec in (
        PolicySpec("infercept"),
        PolicySpec("infercept", valve="stall-only", pin_cap=0.25),
    ):
        stats = _stats(work, spec, kv_blocks=100)
        assert (stats.pins_made, stats.pins_hit, stats.pins_refused) == (1, 1, 0)


def test_infercepts_head_valve_releases_a_pin_for_the_head_while_another_runs() -> None:
    """A pins its 63 blocks for 60 ms in an 80-block cache while B decodes; C arrives at
    150 ms needing 38 blocks. The head valve releases A's pin at once for C though B runs
    (stall-only would wait for its expiry); C is admitted at the next step."""
    a = AgentProgram("A", 0.0, (Call(1000, 1, 0, "t", 5.0), Call(1100, 1, 1001, None, 0.0)))
    b = AgentProgram("B", 0.0, (Call(16, 100, 0, None, 0.0),))
    c = AgentProgram("C", 0.15, (Call(600, 1, 0, None, 0.0),))
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 80, block_size=16), check=True)
    out = simulate(
        Workload((a, b, c)), make(PolicySpec("infercept"), {}, lambda t, o: 0.0), COST, cfg
    )
    stats = out.engine.stats
    assert (stats.pins_made, stats.pins_released, stats.pins_expired) == (1, 1, 0)
    a0 = next(r for r in out.calls if (r.program, r.turn) == ("A", 0))
    c0 = next(r for r in out.calls if r.program == "C")
    assert c0.admitted < a0.finish + 0.06


# ------------------------------------------------------------------ Autellix


def _req(rid: int, program: str, *, arrival: float = 0.0, prompt: int = 100) -> SimRequest:
    return SimRequest(rid, program, 0, arrival, arrival, prompt, 10, 0, None, False)


def _autellix() -> tuple[Autellix, SimScheduler]:
    pol = Autellix()
    return pol, SimScheduler(SimSchedulerConfig(), COST, pol)


def _served(pol: Autellix, engine: SimScheduler, program: str, tokens: int) -> None:
    """``program`` finishes a call of ``tokens`` uncached prompt tokens and no output."""
    req = SimRequest(99, program, 0, 0.0, 0.0, tokens, 0, 0, None, False)
    pol.on_finish(req, engine, 0.0)


def test_autellix_levels_double_from_the_base_service() -> None:
    """Level 0 below 8,192 tokens served; level 1 from 8,192, 2 from 16,384, … up to the
    last of its 8 levels."""
    levels = []
    for served in (8191, 8192, 16383, 16384, 8192 * 2**7, 8192 * 2**20):
        pol, engine = _autellix()
        _served(pol, engine, "P", served)
        levels.append(pol.key(_req(1, "P"), engine)[1])
    assert levels == [0.0, 1.0, 1.0, 2.0, 7.0, 7.0]


def test_autellix_counts_the_service_a_call_computed_not_its_cached_prefix() -> None:
    """Service is the prompt tokens not hit plus the output: 8,000 of a 10,000-token prompt
    hit and 200 out is 2,200 tokens, still level 0."""
    pol, engine = _autellix()
    req = SimRequest(1, "P", 0, 0.0, 0.0, 10_000, 200, 0, None, False, hit_tokens=8000)
    pol.on_finish(req, engine, 0.0)
    assert pol.key(_req(2, "P"), engine)[1] == 0.0


def test_autellix_forgets_a_program_at_its_last_call() -> None:
    pol, engine = _autellix()
    last = SimRequest(1, "P", 0, 0.0, 0.0, 20_000, 0, 0, None, True)
    pol.on_finish(last, engine, 0.0)
    assert pol.key(_req(2, "P"), engine)[1] == 0.0


def test_autellix_orders_preempted_then_level_then_program_start() -> None:
    """A preempted request first; then the least served program before an older one that
    was served more; a request waiting past 60 s goes to the top level (anti-starvation)."""
    pol, engine = _autellix()
    _served(pol, engine, "OLD", 20_000)
    old, new = _req(1, "OLD", arrival=0.0), _req(2, "NEW", arrival=1.0)
    pol.on_arrival(new, engine, 1.0)
    assert pol.key(new, engine) < pol.key(old, engine)
    new.preempted = True
    old_key = pol.key(old, engine)
    assert pol.key(new, engine) < old_key
    new.preempted = False
    pol.on_arrival(_req(3, "X", arrival=61.0), engine, 61.0)  # the clock passes 60 s
    assert pol.key(old, engine) < pol.key(new, engine)


def test_autellix_promotes_a_starved_request_when_another_is_admitted() -> None:
    """An admission moves Autellix's clock on: OLD (level 2) has waited past 60 s by then,
    so it goes to the top level and, having started first, before NEW."""
    pol, engine = _autellix()
    _served(pol, engine, "OLD", 20_000)
    engine.add(_req(1, "OLD", arrival=0.0), 0.0)
    engine.add(_req(2, "NEW", arrival=1.0), 1.0)
    assert [r.program for r in engine._sorted_waiting()] == ["NEW", "OLD"]
    pol.on_admit(_req(3, "X", arrival=61.0), engine, 61.0)
    assert [r.program for r in engine._sorted_waiting()] == ["OLD", "NEW"]


# ------------------------------------------------------------------ the oracle


def _oracle_stats(pause: float, delays: tuple[float, ...] = (), offload_tokens: int = 0) -> Stats:
    work = Workload((_a(pause),))
    policy = make(PolicySpec("oracle"), {("A", 0): pause}, lambda t, o: 0.0)
    for seconds in delays:  # returning programs that waited so long without a pin
        policy.observe_queue_delay(seconds)  # type: ignore[attr-defined]
    cfg = ReplayConfig(
        engine=SimSchedulerConfig(kv_tokens=16 * 400, block_size=16),
        offload_tokens=offload_tokens,
        check=True,
    )
    return simulate(work, policy, COST, cfg).engine.stats


def test_the_oracle_pins_only_a_pause_shorter_than_the_rebuild() -> None:
    """A pause as long as the rebuild (nobody has queued yet) is not worth a pin; a
    shorter one is."""
    assert _oracle_stats(REBUILD_A).pins_made == 0
    assert _made_hit_expired(_oracle_stats(REBUILD_A * 0.99)) == (1, 1, 0)


def test_the_oracle_adds_the_mean_queueing_delay_to_the_rebuild() -> None:
    """Returning programs without a pin queued 0.2 s and 0.4 s: a pause 0.2 s past the
    rebuild is still shorter than rebuild + their mean (0.3 s), so it is pinned."""
    assert _oracle_stats(REBUILD_A + 0.2).pins_made == 0
    assert _made_hit_expired(_oracle_stats(REBUILD_A + 0.2, (0.2, 0.4))) == (1, 1, 0)


def test_the_oracles_mean_queueing_is_of_the_last_100_delays() -> None:
    """10 delays of none, then 100 of 10 s: the mean of the last 100 is 10 s (of all 110,
    9.09 s; of the first 100, 9 s; of the last 101, 9.9 s), so a pause 9.95 s past the
    rebuild is pinned; with 99 of 10 s the last 100 hold one of none (9.9 s), and it is not."""
    last_100 = (0.0,) * 10 + (10.0,) * 100
    assert _made_hit_expired(_oracle_stats(REBUILD_A + 9.95, last_100)) == (1, 1, 0)
    one_short = (0.0,) * 10 + (10.0,) * 99
    assert _oracle_stats(REBUILD_A + 9.95, one_short).pins_made == 0


def test_the_oracle_with_an_offload_tier_prices_a_lost_context_as_a_reload() -> None:
    """A host tier gives the context back for a reload (1 ms for A's), cheaper than its
    rebuild: a 50 ms pause, pinned without the tier, is not worth a pin with it."""
    assert _oracle_stats(0.05).pins_made == 1
    assert _oracle_stats(0.05, offload_tokens=100_000).pins_made == 0
