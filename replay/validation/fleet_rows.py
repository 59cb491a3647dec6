"""Each live fleet run of ``validate --replicas`` beside its simulation: its row.

:func:`simulate_runs` simulates every live run (:class:`LiveRun`) on replicas in the live
router's own worker order, with the live URLs, and makes each run's row
(:func:`simulated_row`): the live figures (:func:`fleet_row`), the simulated ones
compared with them, the simulation with each call on the replica it reached live, and
each replica's own account beside it (:mod:`~replay.validation.engine_side`).

How a run is priced: by the profile given, or by the one measured in its own repeat when
there is one in each of several (:mod:`~replay.validation.fleet_profile`): a shared
machine's speed drifts over a window of live runs, and the measurement taken at the end of
a repeat is the one nearest its runs in time. The profile pooled over every repeat prices
each run beside it (``compare_pooled``), so that both are on record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from profiles.schema import Profile
from replay.figures import PolicyResult
from replay.progress import RunsDone, each_told
from replay.validation import engine_side
from replay.validation.fleet_sim import (
    compare_fleet,
    jct_goal,
    live_placement,
    simulate_as_routed,
    simulate_fleets,
    simulate_timings,
)
from replay.validation.sim_side import SimSide
from replay.validation.timings import Timings
from replay.workload import Workload
from ttlctl.server import arrivals


@dataclass(frozen=True, slots=True)
class LiveRun:
    """One live run of ``policy`` behind ``router`` in repeat ``repeat`` (0-based): its
    result, each session's replicas in arrival order, and the fleet it ran on."""

    repeat: int
    policy: str
    router: str
    result: dict[str, Any]
    order: dict[str, list[str]]
    fleet: dict[str, Any]


def fleet_row(
    live: dict[str, Any], order: dict[str, list[str]], replicas: Iterable[str] = ()
) -> dict[str, Any]:
    """One router's figures: the live run's means and the replicas' arrivals (every one
    of ``replicas`` counted, 0 where no call arrived, as the simulated counts are)."""
    return {
        "jct_mean_s": live.get("jct_mean_s"),
        "ttft_mean_s": live.get("ttft_mean_s"),
        "hit_rate": (live.get("server") or {}).get("client_hit_rate"),
        "returned_share": arrivals.returned_share(order),
        "calls_per_replica": dict.fromkeys(replicas, 0) | arrivals.per_replica(order),
        "returned_from": "replica arrivals (ttlctl.server.arrivals)",
    }


@dataclass(slots=True)
class SimulatedRuns:
    """Every live run simulated, by (policy, router), runs in order: the rows, the live
    and simulated documents, the fleets, and why a router was not simulated."""

    #: each profile measured in a repeat priced that repeat's runs
    per_repeat: bool
    rows: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    live: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    sim: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    fleets: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def simulate_runs(
    runs: Sequence[LiveRun],
    work: Workload,
    side: SimSide,
    own: Mapping[int, Profile],
    timings: Timings,
    runs_done: RunsDone | None = None,
) -> SimulatedRuns:
    """Every run simulated on ``side``, priced by its repeat's own profile in ``own``
    ({repeat: profile}, 0-based: :func:`~replay.validation.fleet_profile.by_repeat`) when
    there are several, and then by ``side``'s (the pooled one) beside it (each row's
    ``compare_pooled``); with one or none, by ``side``'s alone. A run whose repeat has no
    profile among several is refused (:class:`ValueError`), not priced by another's.
    ``runs_done`` is told the runs simulated of all."""
    per_repeat = len(own) > 1
    missing = sorted({run.repeat for run in runs if per_repeat and run.repeat not in own})
    if missing:
        raise ValueError(f"no profile for repeat(s) {missing} (0-based) among {sorted(own)}")
    out = SimulatedRuns(per_repeat)
    for run in each_told(runs, runs_done):
        priced = replace(side, profile=own[run.repeat]) if per_repeat else side
        row, simulated = simulated_row(run, work, priced, timings, notes=out.notes)
        if per_repeat:
            row["compare_pooled"] = compared(run, row, work, side, timings, out.notes)[0]
        key = (run.policy, run.router)
        _add(out.rows, key, row)
        _add(out.live, key, run.result)
        _add(out.sim, key, simulated)
        _add(out.fleets, key, run.fleet)
    return out


def _add(by: dict[str, dict[str, list[Any]]], key: tuple[str, str], value: Any) -> None:
    by.setdefault(key[0], {}).setdefault(key[1], []).append(value)


def simulated_row(
    run: LiveRun,
    work: Workload,
    side: SimSide,
    timings: Timings,
    *,
    notes: dict[str, str],
) -> tuple[dict[str, Any], PolicyResult | None]:
    """One live run's row, with its simulated side: the same programs on replicas in the
    live router's own worker order (simulated replica i is its i-th worker, so
    ``round_robin`` starts where it did and ties break as there), with the live URLs
    (the hashing routers place by them), compared by its mean over ``timings`` (perturbed
    arrival timings; with no draws, by the trace's own timing), and on the trace's own
    timing; and, with each call on the replica it reached live, the engines' share of the
    error. ``notes``: why a router was not simulated."""
    fleet_doc = run.fleet
    by_url = {r["url"]: name for name, r in fleet_doc["replicas"].items()}
    row = fleet_row(run.result, run.order, sorted(fleet_doc["replicas"]))
    figures, result, drawn, urls = compared(run, row, work, side, timings, notes)
    #: the simulated figures: their mean over the perturbed timings when drawn
    row["compare"] = figures
    #: the simulator on the trace's own timing alone (one draw of the spread)
    row["compare_one_timing"] = compare_fleet(result, row)
    row["sim_timings"] = None if drawn is None else drawn["timings"]
    row["jct_within_10pct"] = jct_goal(row["compare"])
    row["sim_note"] = notes.get(run.router)
    #: the simulated calls per live replica (simulated replica i: the router's i-th worker),
    #: on the trace's own timing (the one simulation ``sim`` keeps; ``compare`` is the mean
    #: over the perturbed timings)
    row["sim_calls_per_replica"] = (
        None
        if result is None
        else {by_url[urls[p["replica"]]]: p["llm_calls"] for p in result.get("per_replica", [])}
    )
    placed = live_placement(work, run.order)
    routed = None
    if placed is not None:
        routed = simulate_as_routed(work, side, policy=run.policy, logged=placed)
    #: the simulator with each call on the replica it reached live (None: the replicas'
    #: arrivals do not name every call's program)
    row["compare_as_routed"] = None if routed is None else compare_fleet(routed, row)
    #: each replica's steps and engine TTFT, live (its /metrics) and simulated on the live
    #: placement: whether the schedule or the price of a step is off
    budget = side.engine.max_num_batched_tokens
    row["engines_as_routed"] = engine_side.beside_routed(
        {name: r.get("engine") for name, r in fleet_doc["replicas"].items()},
        routed,
        placed,
        # vLLM counts only steps with an output: a chunked prefill's other steps are not
        steps_comparable=all(c.input_tokens <= budget for p in work.programs for c in p.calls),
    )
    return row, result


def compared(
    run: LiveRun,
    live: Mapping[str, Any],
    work: Workload,
    side: SimSide,
    timings: Timings,
    notes: dict[str, str],
) -> tuple[list[dict[str, Any]], PolicyResult | None, dict[str, Any] | None, list[str]]:
    """One live run simulated on ``side``: its comparison with ``live`` (its
    :func:`fleet_row`; the simulated figures the mean over ``timings`` when drawn), the
    simulation on the trace's own timing, the draws' mean (None: none drawn) and the
    worker URLs in the live router's order (simulated replica i is its i-th worker).
    ``notes``: why a router was not simulated."""
    fleet_doc = run.fleet
    urls = fleet_doc["worker_order"] or [r["url"] for r in fleet_doc["replicas"].values()]
    simulated, why = simulate_fleets(
        work,
        side,
        policies=[run.policy],
        routers=[run.router],
        worker_urls={run.policy: {run.router: urls}},
    )
    notes.update(why)
    result = simulated[run.policy][run.router]
    drawn = None
    if timings.draws > 0 and result is not None:
        drawn = simulate_timings(
            work, side, timings, policy=run.policy, router=run.router, worker_urls=urls
        )
    return compare_fleet(result if drawn is None else drawn, live), result, drawn, urls
