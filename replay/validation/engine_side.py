"""Each replica's own account of a live fleet run, beside the simulator's.

A fleet's mean JCT mixes two things the simulator can get wrong: the schedule (which
calls each engine batches into which steps) and the price of each step (the profile). A
replica's ``/metrics`` (:mod:`~replay.validation.engine_metrics`, which says what each
series is) helps tell them apart. :func:`beside_routed` puts each replica's steps and
time to first token next to the simulation with each call on the replica it reached live
(the router's choices taken as given), replica by replica; :func:`pooled_engines` sums
them over a router's runs. The same step count with a lower simulated TTFT says the
simulator batched the calls as the engines did and the time to a first token is longer
live; its two parts, on the engine core's clock live (``vllm:request_queue_time_seconds``
and ``vllm:request_prefill_time_seconds``) and from the simulated calls' admission beside
them, say whether the calls waited longer for their first step or took longer from there
to a first token; the decode time (first token to last) is the rest of a call's time at
its replica.

Steps are compared only where every simulated step is one vLLM counts: vLLM observes its
step histogram only for steps that return an output, so when a prompt is longer than the
step budget (``max_num_batched_tokens``) its chunked prefill takes steps the live count
leaves out (``steps_comparable`` False: the counts are kept, the error is not given).

Nothing here judges a goal: these are the figures that say where an error comes from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replay.figures import PolicyResult
from replay.fleet.routers import replica_order


def _relative(sim: float | None, live: float | None) -> float | None:
    return None if sim is None or not live else (sim - live) / live


#: the per-request mean times set side by side: the TTFT at the replica (live on its API
#: server's clock), its two parts and the decode after it (live on the engine core's clock)
TIMES = ("ttft_mean_s", "queue_mean_s", "prefill_mean_s", "decode_mean_s")


#: where a replica's simulated figure has another name than the live one (a replay's
#: ``queue_mean_s`` counts from the send; vLLM's queue time from reaching the scheduler)
SIM_NAMES = {"queue_mean_s": "scheduler_queue_mean_s"}


def _pair(live: float | None, sim: float | None) -> dict[str, float | None]:
    return {"live": live, "sim": sim, "error": _relative(sim, live)}


def beside_routed(
    live: Mapping[str, Mapping[str, Any] | None],
    routed: PolicyResult | None,
    logged: Mapping[tuple[str, int], str] | None,
    *,
    steps_comparable: bool = True,
) -> dict[str, dict[str, Any]] | None:
    """``{replica: its live and simulated calls, steps, TTFT, the TTFT's two parts and the
    decode time}`` for one run: ``live``
    each replica's :func:`~replay.validation.engine_metrics.engine_delta`, ``routed`` the
    simulation with every call on its ``logged`` replica (the as-logged router numbers
    the replicas that calls reached in :func:`~replay.fleet.routers.replica_order`; a
    replica no call reached took no simulated step). None where either side is missing."""
    if routed is None or logged is None or any(v is None for v in live.values()):
        return None
    names = replica_order(logged.values())
    sims = {
        names[p["replica"]]: p for p in routed.get("per_replica", []) if p["replica"] < len(names)
    }
    idle: dict[str, Any] = {"llm_calls": 0, "engine_steps": 0}
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(live):
        mine = live[name]
        assert mine is not None
        sim: Mapping[str, Any] = sims.get(name, idle)
        sim_steps = int(sim["engine_steps"])
        out[name] = {
            "llm_calls": {"live": mine["requests"], "sim": sim["llm_calls"]},
            "engine_steps": {
                "live": mine["engine_steps"],
                "sim": sim_steps,
                "error": _relative(sim_steps, mine["engine_steps"]) if steps_comparable else None,
            },
            "steps_comparable": steps_comparable,
        } | {key: _pair(mine.get(key), sim.get(SIM_NAMES.get(key, key))) for key in TIMES}
    return out


def pooled_engines(runs: Sequence[Mapping[str, Mapping[str, Any]] | None]) -> dict[str, Any] | None:
    """One router's runs' replicas together: steps summed; the TTFT, its two parts and the
    decode time as means over every request (each replica's mean weighted by its requests,
    the TTFT histogram's count live: a request that never finished would weigh its
    replica's queue, prefill and decode means a little too much), live and
    simulated, with their errors. None: a run without figures, or a replica that served
    calls on one side without a TTFT there (a part missing on either side is None)."""
    if not runs or any(r is None for r in runs):
        return None
    live_steps = sim_steps = 0
    comparable = True
    #: key -> side -> [weighted sum, requests]; None once a replica with calls lacks it
    sums: dict[str, dict[str, list[float] | None]] = {
        key: {"live": [0.0, 0.0], "sim": [0.0, 0.0]} for key in TIMES
    }
    for run in runs:
        assert run is not None
        for rep in run.values():
            steps, calls = rep["engine_steps"], rep["llm_calls"]
            comparable = comparable and bool(rep.get("steps_comparable", True))
            live_steps += steps["live"]
            sim_steps += steps["sim"]
            for key in TIMES:
                for side in ("live", "sim"):
                    # a part not read (a run from before it was) is missing
                    acc, value = sums[key][side], (rep.get(key) or {}).get(side)
                    if acc is None or not calls[side]:
                        continue
                    if value is None:
                        sums[key][side] = None
                        continue
                    acc[0] += value * calls[side]
                    acc[1] += calls[side]
    if any(sums["ttft_mean_s"][side] is None for side in ("live", "sim")):
        return None
    means = {
        key: {side: acc[0] / acc[1] if acc and acc[1] else None for side, acc in by.items()}
        for key, by in sums.items()
    }
    return {
        "runs": len(runs),
        "engine_steps": {
            "live": live_steps,
            "sim": sim_steps,
            "error": _relative(sim_steps, live_steps) if comparable else None,
        },
        "steps_comparable": comparable,
    } | {key: _pair(m["live"], m["sim"]) for key, m in means.items()}
