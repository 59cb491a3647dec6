"""Each replica's own account of a live fleet run, beside the simulator's.

A fleet's mean JCT mixes two things the simulator can get wrong: the schedule (which
calls each engine batches into which steps) and the price of each step (the profile). A
replica's ``/metrics`` (:mod:`~replay.validation.engine_metrics`, which says what each
series is) helps tell them apart. :func:`beside_routed` puts each replica's steps and
time to first token next to the simulation with each call on the replica it reached live
(the router's choices taken as given), replica by replica; :func:`pooled_engines` sums
them over a router's runs. The same step count with a lower simulated TTFT says the
simulator batched the calls as the engines did and the time to a first token is longer
live; the engine-core queue and prefill times kept beside it say how much of that is
queueing.

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


def _relative(sim: float | None, live: float | None) -> float | None:
    return None if sim is None or not live else (sim - live) / live


def beside_routed(
    live: Mapping[str, Mapping[str, Any] | None],
    routed: PolicyResult | None,
    logged: Mapping[tuple[str, int], str] | None,
    *,
    steps_comparable: bool = True,
) -> dict[str, dict[str, Any]] | None:
    """``{replica: its live and simulated calls, steps and TTFT}`` for one run: ``live``
    each replica's :func:`~replay.validation.engine_metrics.engine_delta`, ``routed`` the
    simulation with every call on its ``logged`` replica (the as-logged router numbers
    the replicas that calls reached in sorted order; a replica no call reached took no
    simulated step). None where either side is missing."""
    if routed is None or logged is None or any(v is None for v in live.values()):
        return None
    names = sorted(set(logged.values()))
    sims = {
        names[p["replica"]]: p for p in routed.get("per_replica", []) if p["replica"] < len(names)
    }
    idle: dict[str, Any] = {"llm_calls": 0, "engine_steps": 0, "ttft_mean_s": None}
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(live):
        mine = live[name]
        assert mine is not None
        sim = sims.get(name, idle)
        sim_steps = int(sim["engine_steps"])
        sim_ttft = sim.get("ttft_mean_s")
        out[name] = {
            "llm_calls": {"live": mine["requests"], "sim": sim["llm_calls"]},
            "engine_steps": {
                "live": mine["engine_steps"],
                "sim": sim_steps,
                "error": _relative(sim_steps, mine["engine_steps"]) if steps_comparable else None,
            },
            "steps_comparable": steps_comparable,
            "ttft_mean_s": {
                "live": mine["ttft_mean_s"],
                "sim": sim_ttft,
                "error": _relative(sim_ttft, mine["ttft_mean_s"]),
            },
            #: live only, on the engine core's clock (not simulated as such)
            "queue_mean_s": mine.get("queue_mean_s"),
            "prefill_mean_s": mine.get("prefill_mean_s"),
        }
    return out


def pooled_engines(runs: Sequence[Mapping[str, Mapping[str, Any]] | None]) -> dict[str, Any] | None:
    """One router's runs' replicas together: steps summed, TTFT (and the live queue and
    prefill times) as a mean over every request (each replica's mean weighted by its
    requests), live and simulated, with their errors (None: a run without figures)."""
    if not runs or any(r is None for r in runs):
        return None
    live_steps = sim_steps = live_calls = sim_calls = 0
    live_ttft = sim_ttft = 0.0
    parts: dict[str, list[float]] = {"queue_mean_s": [0.0, 0.0], "prefill_mean_s": [0.0, 0.0]}
    comparable = True
    for run in runs:
        assert run is not None
        for rep in run.values():
            steps, ttft, calls = rep["engine_steps"], rep["ttft_mean_s"], rep["llm_calls"]
            if (calls["live"] and ttft["live"] is None) or (calls["sim"] and ttft["sim"] is None):
                return None
            comparable = comparable and bool(rep.get("steps_comparable", True))
            live_steps += steps["live"]
            sim_steps += steps["sim"]
            live_calls += calls["live"]
            sim_calls += calls["sim"]
            live_ttft += (ttft["live"] or 0.0) * calls["live"]
            sim_ttft += (ttft["sim"] or 0.0) * calls["sim"]
            for key, acc in parts.items():
                if rep.get(key) is not None:
                    acc[0] += rep[key] * calls["live"]
                    acc[1] += calls["live"]
    live_mean = live_ttft / live_calls if live_calls else None
    sim_mean = sim_ttft / sim_calls if sim_calls else None
    return {
        "runs": len(runs),
        "engine_steps": {
            "live": live_steps,
            "sim": sim_steps,
            "error": _relative(sim_steps, live_steps) if comparable else None,
        },
        "steps_comparable": comparable,
        "ttft_mean_s": {
            "live": live_mean,
            "sim": sim_mean,
            "error": _relative(sim_mean, live_mean),
        },
        "live_queue_mean_s": parts["queue_mean_s"][0] / parts["queue_mean_s"][1]
        if parts["queue_mean_s"][1]
        else None,
        "live_prefill_mean_s": parts["prefill_mean_s"][0] / parts["prefill_mean_s"][1]
        if parts["prefill_mean_s"][1]
        else None,
    }
