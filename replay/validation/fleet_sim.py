"""The simulated side of ``validate --replicas N --router R``, and its errors against live.

Each live fleet (one policy behind one vllm-router ``--policy``) is replayed by the fleet
simulator (:mod:`replay.fleet`) on the same programs (the same first N, the same pauses
cap), with as many replicas, each engine sized like the live replicas and priced by the
same profile, behind ttlctl's model of the same router with its default settings (the
live router runs with its defaults too) and the live replicas' URLs, in the order the
live router was given them (the hashing routers place sessions by them). vllm-router's
policy names map to ttlctl's by :func:`~replay.fleet.routers.router_name`; vllm-router's
Program scheduling is simulated only where a ``program-scheduling`` router model exists
(:func:`sim_router`). What every simulation of one validation shares (the replicas'
count, sizing and profile, the load, the bundle, the routers' settings) is one
:class:`~replay.validation.sim_side.SimSide`; the policy, the router and the live
fleet's URLs are each simulation's own arguments. Behind ``kv_aware`` the simulated router
credits the calls with their cached prefix only where the live one would credit the live
client's requests (:func:`live_prefix_credit`: only a client tagging by its header alone).

The compared figures (:data:`FLEET_COMPARED`): mean JCT and TTFT, errors relative,
``(simulated − live) / live``; prefix-hit rate and the share of follow-up calls that
returned to their program's previous replica, errors in points. Routers rank by mean JCT
per policy, ties within :data:`~replay.validation.stats.TIE`, as the single-engine
validation ranks policies.

With :class:`~replay.validation.timings.Timings` (:func:`simulate_timings`), the simulated
figures are the mean over that many seeded perturbations of the arrival timing, as the live
side of several runs is a mean over their timings; the trace's own timing stays beside it.

A second simulated figure per row takes the routing out of the comparison: the same
programs with each call sent to the replica it reached live (:func:`live_placement`, from
the replicas' arrivals files, through the fleet simulator's ``as-logged`` router). What
error is left there is the engines', not the router model's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replay.figures import PolicyResult
from replay.fleet.routers import AS_LOGGED, ROUTERS, RouterSettings, router_name
from replay.fleet.routers.kv_credit import completion_credited
from replay.fleet.run import FleetSpec, runner
from replay.live.driver import live_body
from replay.validation.sim_side import SimSide
from replay.validation.stats import JCT_GOAL, TIE, ranking, same_ranking
from replay.validation.timings import Timings, perturbed
from replay.workload import Workload
from ttlctl.server.router import LIVE_ROUTERS

#: (key in a fleet row, key in the simulated result, label, how the error is expressed)
FLEET_COMPARED = (
    ("jct_mean_s", "jct_mean_s", "mean JCT", "relative"),
    ("ttft_mean_s", "ttft_mean_s", "mean TTFT", "relative"),
    ("hit_rate", "prefix_hit_rate", "prefix hit rate", "points"),
    ("returned_share", "returned_share", "returned share", "points"),
)


def live_prefix_credit(client_tags: str) -> bool:
    """Whether vllm-router's ``kv_aware`` credits the live client's calls (tagged as
    ``client_tags`` says) with their cached prefix: the live client's request body
    (:func:`replay.live.driver.live_body`) judged by the router's rule
    (:mod:`replay.fleet.routers.kv_credit`): only under ``session`` (the header alone).
    The simulated router prices the calls as the live one does."""
    return completion_credited(live_body("model", [0], 1, ("program", "tool", False), client_tags))


def sim_router(router: str, models: Sequence[str] = ROUTERS) -> tuple[str | None, str | None]:
    """ttlctl's model of vllm-router's ``router`` and, when there is none, why not."""
    if router not in LIVE_ROUTERS:
        return None, f"not simulated: ttlctl has no model of vllm-router's {router!r}"
    name = router_name(router)
    if name not in models:
        return None, f"not simulated: no {name!r} router model in this ttlctl"
    return name, None


def fleet_error(kind: str, sim: float | None, live: float | None) -> float | None:
    """``(sim − live) / live`` (relative) or ``(sim − live) × 100`` (points); None when
    a side is missing or a relative error has a zero base."""
    if sim is None or live is None:
        return None
    if kind == "relative":
        return (sim - live) / live if live else None
    return (sim - live) * 100.0


def compare_fleet(sim: Mapping[str, Any] | None, live: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per compared figure: simulated, live, error (``sim`` None: no simulated
    side, every error None)."""
    rows = []
    for live_key, sim_key, label, kind in FLEET_COMPARED:
        s = None if sim is None else sim.get(sim_key)
        v = live.get(live_key)
        rows.append(
            {
                "metric": live_key,
                "label": label,
                "kind": kind,
                "sim": s,
                "live": v,
                "error": fleet_error(kind, s, v),
            }
        )
    return rows


def router_ranking(
    sim: Mapping[str, Mapping[str, Any] | None], live: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """One policy's routers ranked by mean JCT, simulated and live, over the routers
    both sides have; ``same``: whether they agree on every pair both order (None with
    fewer than two such routers)."""
    both = [r for r in live if sim.get(r) is not None]
    rank_sim = ranking({r: sim[r] or {} for r in both})
    rank_live = ranking({r: live[r] for r in both})
    return {
        "by": "jct_mean_s",
        "routers": both,
        "sim": rank_sim,
        "live": rank_live,
        "tie_within": TIE,
        "same": same_ranking(rank_sim, rank_live) if len(both) > 1 else None,
    }


def jct_goal(rows: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether the mean JCT is within :data:`~replay.validation.stats.JCT_GOAL`."""
    err = next(r["error"] for r in rows if r["metric"] == "jct_mean_s")
    return None if err is None else abs(err) <= JCT_GOAL


def live_placement(
    work: Workload, order: Mapping[str, Sequence[str]]
) -> dict[tuple[str, int], str] | None:
    """(program, turn) -> the replica its call reached live, from ``{session: [replica of
    each call in arrival order]}`` (the live replay's session is the program); None unless
    every call of every program was seen (the router may drop the session header)."""
    logged: dict[tuple[str, int], str] = {}
    for program in work.programs:
        seen = order.get(program.program_id, ())
        if len(seen) != len(program.calls):
            return None
        for turn, replica in enumerate(seen):
            logged[(program.program_id, turn)] = replica
    return logged


def simulate_as_routed(
    work: Workload,
    side: SimSide,
    *,
    policy: str,
    logged: Mapping[tuple[str, int], str],
) -> PolicyResult:
    """``policy`` in the fleet simulator with every call on its ``logged`` replica."""
    run = runner(FleetSpec(side.replicas, RouterSettings(AS_LOGGED), logged=logged))
    return run(work, side.spec(policy), side.cost(), side.config(), side.timing, timed=False)


def simulate_fleets(
    work: Workload,
    side: SimSide,
    *,
    policies: Sequence[str],
    routers: Sequence[str],
    worker_urls: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> tuple[dict[str, dict[str, PolicyResult | None]], dict[str, str]]:
    """Each (policy, router) in the fleet simulator: ``({policy: {router: result or
    None}}, {router: why it was not simulated})``. ``worker_urls``: ``{policy: {router:
    the live fleet's replica URLs, in replica order}}``, so that the routers that hash
    them place each session on the replica the live router chose (each live fleet has
    ports of its own)."""
    cost = side.cost()
    config = side.config()
    out: dict[str, dict[str, PolicyResult | None]] = {}
    notes: dict[str, str] = {}
    credit = live_prefix_credit(config.client_tags)  # one live client for every fleet
    for router in routers:
        given = side.settings.get(router)
        # a router set by its settings (the bundle's) is simulated by its own model
        name, why = (given.name, None) if given is not None else sim_router(router)
        if why is not None:
            notes[router] = why
        for policy in policies:
            if name is None:
                out.setdefault(policy, {})[router] = None
                continue
            urls = (worker_urls or {}).get(policy, {}).get(router)
            run = runner(
                FleetSpec(
                    side.replicas,
                    side.router_settings(router, name),
                    worker_urls=None if urls is None else tuple(urls),
                    prefix_credit=credit,
                )
            )
            out.setdefault(policy, {})[router] = run(
                work, side.spec(policy), cost, config, side.timing, timed=False
            )
    return out, notes


def simulate_timings(
    work: Workload,
    side: SimSide,
    timings: Timings,
    *,
    policy: str,
    router: str,
    worker_urls: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """``policy`` behind ``router`` simulated on ``timings.draws`` perturbed arrival
    timings (:func:`~replay.validation.timings.perturbed`): the compared figures' mean
    over the draws, keyed as a simulated result is, with ``timings`` (the draws' settings
    and each figure's range). None: the router is not simulated, or no draw asked."""
    results: list[PolicyResult] = []
    for draw in range(1, timings.draws + 1):
        simulated, _ = simulate_fleets(
            perturbed(work, timings, draw),
            side,
            policies=[policy],
            routers=[router],
            worker_urls=None if worker_urls is None else {policy: {router: worker_urls}},
        )
        result = simulated[policy][router]
        if result is None:
            return None
        results.append(result)
    if not results:
        return None
    out: dict[str, Any] = {}
    spread: dict[str, list[float] | None] = {}
    for _, sim_key, _, _ in FLEET_COMPARED:
        values: list[Any] = [r.get(sim_key) for r in results]
        nums = [float(v) for v in values if v is not None]
        whole = len(nums) == len(values)
        out[sim_key] = sum(nums) / len(nums) if whole else None
        spread[sim_key] = [min(nums), max(nums)] if whole else None
    out["timings"] = {**timings.to_json(), "range": spread}
    return out
