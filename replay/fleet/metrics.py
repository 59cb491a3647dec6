"""What a fleet replay reports beyond the single-engine figures.

The fleet's own record is :func:`replay.figures.summarize` over every replica together
(their counters summed, their pinned memory added up), so every key keeps its meaning.
It adds, per replica, the same figures for the calls it served, and for the fleet:

- ``load_balance``: the busiest replica's engine-busy seconds over the mean (1 = even);
- ``pins_wasted``: pins whose program's next call went to another replica (and their
  share of the pins made);
- ``returned_share``: the share of follow-up calls sent to their previous call's replica;
- ``miss_reasons``: follow-up calls whose prefix hit fell short of what they repeat of
  their program's previous call, by why: ``routed_elsewhere`` (another replica),
  ``never_pinned`` (the engine did not pin the previous call: its blocks were evicted
  from the free list), ``expired`` (the call came after the pin's τ ran out, whether or
  not the valve released it sooner: the miss did not need the valve, so these are not the
  pins counted expired), ``released_by_valve`` (the pressure valve released it and the
  call came within τ: the miss the valve caused),
  ``evicted`` (the pin was still held when the call came, yet the blocks were gone when
  it was admitted: released by the valve while it waited).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, cast

import numpy as np

from replay.figures import PolicyResult, summarize
from replay.fleet.engine import Engine
from replay.fleet.loop import FleetOutcome
from replay.fleet.records import FleetRouter, MissReasons, ReplicaResult
from replay.scheduler import SimSchedulerConfig, Stats
from replay.sim_outcome import ProgramRun, SimCallRecord
from replay.workload import Workload

MISS_REASONS = (
    "routed_elsewhere",
    "never_pinned",
    "expired",
    "released_by_valve",
    "evicted",
)


@dataclass(slots=True)
class _Together:
    """The replicas' engines read as one (what :func:`replay.figures.summarize` reads)."""

    config: SimSchedulerConfig
    stats: Stats
    timeline: list[tuple[float, int]]


@dataclass(slots=True)
class _Merged:
    calls: list[SimCallRecord]
    programs: list[ProgramRun]
    rejected_calls: int
    truncated_calls: int
    end: float
    engine: Any = field(default=None)


def together(engines: list[Engine]) -> Engine | _Together:
    """One engine as is; several as one: counters summed, pinned blocks added up."""
    if len(engines) == 1:
        return engines[0]
    stats = Stats()
    for f in fields(Stats):
        values = [getattr(e.stats, f.name) for e in engines]
        setattr(stats, f.name, max(values) if f.name == "longest_step_s" else sum(values))
    changes = sorted((t, i, blocks) for i, e in enumerate(engines) for t, blocks in e.timeline)
    current = [0] * len(engines)
    timeline: list[tuple[float, int]] = []
    for t, i, blocks in changes:
        current[i] = blocks
        total = sum(current)
        if timeline and timeline[-1][0] == t:
            timeline[-1] = (t, total)
        else:
            timeline.append((t, total))
    return _Together(engines[0].config, stats, timeline)


def miss_reasons(outcome: FleetOutcome, workload: Workload) -> MissReasons:
    by_id = {p.program_id: p for p in workload.programs}
    bs = outcome.engines[0].config.block_size
    counts = dict.fromkeys(MISS_REASONS, 0)
    for rec in outcome.calls:
        if rec.turn == 0:
            continue
        calls = by_id[rec.program].calls
        call, before = calls[rec.turn], calls[rec.turn - 1]
        # what a hit can be at most: the full blocks the previous call computed (its
        # last sampled token is never computed) that this prompt repeats, short of the
        # prompt's last token
        kept = (before.input_tokens + before.output_tokens - 1) // bs
        expected = min(call.reused_tokens // bs, (rec.prompt - 1) // bs, kept) * bs
        if expected <= 0 or rec.hit_tokens >= expected:
            continue
        route = outcome.routes[(rec.program, rec.turn)]
        if route.previous != route.replica:
            reason = "routed_elsewhere"
        elif route.previous_pin_expiry is None:
            reason = "never_pinned"
        elif route.pin_held:
            reason = "evicted"
        elif route.delivered >= route.previous_pin_expiry:
            reason = "expired"
        else:
            reason = "released_by_valve"
        counts[reason] += 1
    return cast(MissReasons, counts)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def replica_results(outcome: FleetOutcome) -> list[ReplicaResult]:
    first_replica = {key[0]: route.replica for key, route in outcome.routes.items() if key[1] == 0}
    out: list[ReplicaResult] = []
    for r, engine in enumerate(outcome.engines):
        calls = [c for c, at in zip(outcome.calls, outcome.call_replicas, strict=True) if at == r]
        jct = np.array(
            [
                p.last_finish - p.first_arrival
                for p in outcome.programs
                if p.done
                and not p.cut_short
                and p.last_finish is not None
                and p.first_arrival is not None
                and first_replica.get(p.program.program_id) == r
            ]
        )
        s = engine.stats
        out.append(
            {
                "replica": r,
                "llm_calls": len(calls),
                "programs_started": sum(1 for v in first_replica.values() if v == r),
                "jct_mean_s": float(jct.mean()) if jct.size else None,
                "ttft_mean_s": _mean([c.first_token - c.arrival for c in calls]),
                # from reaching the replica's scheduler, as vLLM's queue time (not the send)
                "scheduler_queue_mean_s": _mean(
                    [c.admitted - outcome.routes[(c.program, c.turn)].delivered for c in calls]
                ),
                "prefill_mean_s": _mean([c.first_token - c.admitted for c in calls]),
                "decode_mean_s": _mean([c.finish - c.first_token for c in calls]),
                "prefix_hit_rate": s.hit_tokens / s.prompt_tokens if s.prompt_tokens else None,
                "preemptions": s.preemptions,
                "engine_busy_s": s.busy_s,
                "engine_steps": s.steps,
                "pins_made": s.pins_made,
                "pinned_token_seconds": s.pinned_block_seconds * engine.config.block_size,
            }
        )
    return out


def fleet_result(
    outcome: FleetOutcome,
    workload: Workload,
    policy: str,
    *,
    evaluation_only: bool,
    wall_s: float | None,
    router: FleetRouter,
) -> PolicyResult:
    """The fleet's record: the single-engine keys over the whole fleet, and the fleet's."""
    merged = _Merged(
        outcome.calls,
        outcome.programs,
        outcome.rejected_calls,
        outcome.truncated_calls,
        outcome.end,
        together(outcome.engines),
    )
    result = summarize(merged, policy, evaluation_only=evaluation_only, wall_s=wall_s)
    replicas = replica_results(outcome)
    names = router.get("replica_names")
    if names is not None:  # as-logged: every replica says its name, null for one beyond them
        for rep in replicas:
            rep["name"] = names[rep["replica"]] if rep["replica"] < len(names) else None
    busy = [r["engine_busy_s"] for r in replicas]
    mean_busy = sum(busy) / len(busy)
    made = sum(e.stats.pins_made for e in outcome.engines)
    follow_ups = [route for (_, turn), route in outcome.routes.items() if turn > 0]
    result.update(
        {
            "router": router,
            "replicas": len(outcome.engines),
            "per_replica": replicas,
            "load_balance": max(busy) / mean_busy if mean_busy > 0 else None,
            "pins_wasted": outcome.pins_wasted,
            "pins_wasted_share": outcome.pins_wasted / made if made else None,
            "returned_share": sum(r.previous == r.replica for r in follow_ups) / len(follow_ups)
            if follow_ups
            else None,
            "miss_reasons": miss_reasons(outcome, workload),
        }
    )
    return result
