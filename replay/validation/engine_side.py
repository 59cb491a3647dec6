"""Each replica's own account of a live fleet run, beside the simulator's.

A fleet's mean JCT mixes two things the simulator can get wrong: the schedule (which
calls each engine batches into which steps) and the price of each step (the profile). A
replica's ``/metrics`` tells them apart. :func:`scrape` reads, before and after a live
run, each replica's step count (``vllm:iteration_tokens_total``, a histogram observed
once per engine step) and its time to first token as the engine saw it
(``vllm:time_to_first_token_seconds``, from the request's arrival at that replica, so
the router and the client are not in it); :func:`engine_delta` is the run's share.
:func:`beside_routed` puts them next to the simulation with each call on the replica it
reached live (the router's choices taken as given), replica by replica: the same step
count and a lower engine TTFT say the schedule is right and each step is dearer live
than the profile prices it. :func:`pooled_engines` sums them over a router's runs.

Nothing here judges a goal: these are the figures that say where an error comes from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replay.figures import PolicyResult
from ttlctl.server import client, prom

#: one observation per engine step (vLLM's scheduler stats)
STEPS = "vllm:iteration_tokens_total_count"
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
TTFT_COUNT = "vllm:time_to_first_token_seconds_count"
_KEYS = (STEPS, TTFT_SUM, TTFT_COUNT)


def scrape(url: str) -> dict[str, float] | None:
    """The series :func:`engine_delta` reads from the replica at ``url`` (None: its
    ``/metrics`` could not be read or lacks them: then nothing is compared for it)."""
    try:
        values = prom.parse_metrics(client.text(url, "/metrics"))
    except client.ServerError:
        return None
    if any(k not in values for k in _KEYS):
        return None
    return {k: values[k] for k in _KEYS}


def engine_delta(
    before: Mapping[str, float] | None, after: Mapping[str, float] | None
) -> dict[str, Any] | None:
    """A replica's steps, requests and mean engine TTFT over a run (None: not read)."""
    if before is None or after is None:
        return None
    steps = after[STEPS] - before[STEPS]
    count = after[TTFT_COUNT] - before[TTFT_COUNT]
    total = after[TTFT_SUM] - before[TTFT_SUM]
    return {
        "engine_steps": round(steps),
        "requests": round(count),
        "ttft_sum_s": total,
        "ttft_mean_s": total / count if count > 0 else None,
    }


def _relative(sim: float | None, live: float | None) -> float | None:
    return None if sim is None or not live else (sim - live) / live


def beside_routed(
    live: Mapping[str, Mapping[str, Any] | None],
    routed: PolicyResult | None,
    logged: Mapping[tuple[str, int], str] | None,
) -> dict[str, dict[str, Any]] | None:
    """``{replica: its live and simulated calls, steps and engine TTFT}`` for one run:
    ``live`` each replica's :func:`engine_delta`, ``routed`` the simulation with every
    call on its ``logged`` replica (the as-logged router numbers the replicas it was
    given in sorted order). None where either side is missing."""
    if routed is None or logged is None or any(v is None for v in live.values()):
        return None
    names = sorted(set(logged.values()))
    sims = {
        names[p["replica"]]: p for p in routed.get("per_replica", []) if p["replica"] < len(names)
    }
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(live):
        mine = live[name]
        assert mine is not None
        sim = sims.get(name)
        sim_steps = None if sim is None else int(sim["engine_steps"])
        sim_ttft = None if sim is None else sim.get("ttft_mean_s")
        out[name] = {
            "llm_calls": {"live": mine["requests"], "sim": 0 if sim is None else sim["llm_calls"]},
            "engine_steps": {
                "live": mine["engine_steps"],
                "sim": sim_steps,
                "error": _relative(sim_steps, mine["engine_steps"]),
            },
            "ttft_mean_s": {
                "live": mine["ttft_mean_s"],
                "sim": sim_ttft,
                "error": _relative(sim_ttft, mine["ttft_mean_s"]),
            },
        }
    return out


def pooled_engines(runs: Sequence[Mapping[str, Mapping[str, Any]] | None]) -> dict[str, Any] | None:
    """One router's runs' replicas together: steps summed, engine TTFT as a mean over
    every request (each replica's mean weighted by its requests), live and simulated,
    with their errors (None: a run or a replica without figures)."""
    if not runs or any(r is None for r in runs):
        return None
    live_steps = sim_steps = live_calls = sim_calls = 0
    live_ttft = sim_ttft = 0.0
    for run in runs:
        assert run is not None
        for rep in run.values():
            steps, ttft, calls = rep["engine_steps"], rep["ttft_mean_s"], rep["llm_calls"]
            if steps["sim"] is None or (calls["live"] and ttft["live"] is None):
                return None
            if calls["sim"] and ttft["sim"] is None:
                return None
            live_steps += steps["live"]
            sim_steps += steps["sim"]
            live_calls += calls["live"]
            sim_calls += calls["sim"]
            live_ttft += (ttft["live"] or 0.0) * calls["live"]
            sim_ttft += (ttft["sim"] or 0.0) * calls["sim"]
    live_mean = live_ttft / live_calls if live_calls else None
    sim_mean = sim_ttft / sim_calls if sim_calls else None
    return {
        "runs": len(runs),
        "engine_steps": {
            "live": live_steps,
            "sim": sim_steps,
            "error": _relative(sim_steps, live_steps),
        },
        "ttft_mean_s": {
            "live": live_mean,
            "sim": sim_mean,
            "error": _relative(sim_mean, live_mean),
        },
    }
