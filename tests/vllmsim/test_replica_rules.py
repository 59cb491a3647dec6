"""One vLLM fleet replica (``replay.vllmsim.engine.VllmEngine``) driven by hand, as the
fleet's loop drives it: what its router's KV events say of a call before it is routed,
against what vLLM's own lookup then finds, and what it records of each call."""

from __future__ import annotations

from typing import Any

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, arriving
from replay.sim_outcome import ProgramRun
from replay.vllmsim.build import build, quiet_vllm
from replay.vllmsim.engine import VllmEngine
from replay.vllmsim.prompts import TokenBook
from replay.workload import AgentProgram, Call, Workload

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])
BS = 16


def _replica(work: Workload, *, async_scheduling: bool = False) -> VllmEngine:
    config = SimSchedulerConfig(kv_tokens=BS * 100, block_size=BS)
    cfg = ReplayConfig(engine=config)
    with quiet_vllm():
        built = build(config, async_scheduling=async_scheduling, bundle=None)
    book = TokenBook(work, cfg, built.hasher)
    return VllmEngine(built, config, COST, book, False, async_scheduling)


def _serve(eng: VllmEngine, run: ProgramRun, rid: int, at: float, sent: float) -> Any:
    """The program's next call sent at ``sent``, reaching the replica at ``at``, run to
    its finish; returns its request."""
    call = run.program.calls[run.next_turn]
    req = arriving(run, call, rid, at, sent, call.reused_tokens, BS, "full")
    eng.add(req, at)
    arrival_time = eng.built.scheduler.requests[str(rid)].arrival_time
    now = at
    while req.finish is None:
        took, _ = eng.step(now, float("inf"))
        now += took
    run.next_turn += 1
    return req, arrival_time


def test_kv_events_say_the_blocks_vllms_lookup_then_finds() -> None:
    """``KvEvents.prefix_hit``: the leading blocks of the program's next call that the
    replica's block pool holds, as vLLM's own lookup finds them when the call is
    scheduled (never the prompt's last token: vLLM recomputes it). The next call is the
    first call's whole stream (3 full blocks cached), so vLLM finds 2."""
    calls = (Call(2 * BS, BS + 1, 0, "bash", 0.0), Call(3 * BS, 4, 3 * BS, None, 0.0))
    work = Workload((AgentProgram("p", 0.0, calls),))
    eng = _replica(work)
    run = ProgramRun(work.programs[0], 0.0)
    first, _ = _serve(eng, run, 0, 0.0, 0.0)
    said = eng.pool.prefix_hit("p", (), 3, cap=100)  # reusable: in blocks
    second, _ = _serve(eng, run, 1, first.finish, first.finish)
    assert second.hit_tokens == 2 * BS
    assert said == second.hit_tokens // BS


def test_a_call_counts_from_its_send() -> None:
    """vLLM's ``arrival_time`` of a call is when the client sent it (latencies count from
    the send), not when it reached the replica; its record keeps its first token and
    finish, its prompt's tokens counted once."""
    calls = (Call(40, 6, 0, None, 0.0),)
    work = Workload((AgentProgram("p", 0.0, calls),))
    eng = _replica(work)
    run = ProgramRun(work.programs[0], 0.0)
    req, arrival_time = _serve(eng, run, 0, 0.5, 0.25)
    assert arrival_time == 0.25
    assert 0.5 == req.admitted < req.first_token < req.finish
    assert req.generated == 6 and eng.stats.prompt_tokens == 40


def test_a_fleets_record_sums_each_plugins_counters() -> None:
    """``fleet.record``: the plugin's counters summed over the replicas (each its own
    plugin), the backend and its scheduler named."""
    from replay.fleet.routers import RouterSettings
    from replay.fleet.run import FleetSpec
    from replay.policies import PolicySpec
    from replay.policy_runs import Load
    from replay.vllmsim.fleet import record, simulate
    from tests.replay.test_equivalence import workload

    engine = SimSchedulerConfig(kv_tokens=BS * 200, max_num_batched_tokens=256, max_num_seqs=8)
    fleet = FleetSpec(2, RouterSettings("round-robin"), backend="vllm")
    spec = PolicySpec("static-ttl", ttl_s=1.0)
    ran = simulate(workload(0), spec, COST, ReplayConfig(engine=engine), Load(concurrency=6), fleet)
    result = record(ran, spec.name, fleet, timed=False)
    each = [e.plugin_counters for e in ran.engines]
    assert all(c["made"] > 0 for c in each) and each[0] != each[1]
    assert result["plugin_counters"] == {k: each[0][k] + each[1][k] for k in each[0]}
    assert (result["backend"], result["scheduler"]) == ("vllm", "TTLScheduler")


def test_a_vllm_fleets_random_router_draws_from_the_loads_seed() -> None:
    """The router is the fast fleet's, seeded by the load's ``--seed`` (``fleet_router``):
    a random router sends each call to the replica the fast fleet sends it to."""
    from replay.fleet.routers import RouterSettings
    from replay.fleet.run import FleetSpec, simulate_fleet_one
    from replay.policies import PolicySpec
    from replay.policy_runs import Load
    from replay.vllmsim.fleet import simulate
    from tests.replay.test_equivalence import workload

    engine = SimSchedulerConfig(kv_tokens=BS * 400, max_num_batched_tokens=256, max_num_seqs=8)
    config, spec = ReplayConfig(engine=engine), PolicySpec("vllm")
    fleet = FleetSpec(3, RouterSettings("random"))
    placed = {}
    for seed in (5, 6):
        load = Load(concurrency=6, seed=seed)
        fast, _, _ = simulate_fleet_one(workload(0), spec, COST, config, load, fleet)
        ours = simulate(workload(0), spec, COST, config, load, fleet).outcome

        def where(outcome: Any) -> dict[tuple[str, int], int]:
            pairs = zip(outcome.calls, outcome.call_replicas, strict=True)
            return {(c.program, c.turn): i for c, i in pairs}

        placed[seed] = where(ours)
        assert placed[seed] == where(fast)
    assert placed[5] != placed[6]
