"""``validate --replicas N --repeats K``: K live runs of each router as one row.

Each live run of a (policy, router) has its own fresh fleet, so its own ports (the
hashing routers place sessions by them) and its own worker order (the router draws it at
each start): each run is simulated with its own URLs, and gets its own row
(:func:`~replay.validation.fleet_rows.fleet_row` with its errors). :func:`merge_fleet_runs`
makes the K rows one: the live figures' mean over the runs and their range, the
simulated figures' mean (for a router that reads neither the URLs nor their order the K
simulated figures are one figure), the errors of that mean against the live mean, and the
runs themselves. :func:`run_rankings` ranks the routers run by run (run k of every
router), for the goal on each single run beside the goal on the means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replay.validation.engine_side import pooled_engines
from replay.validation.fleet_sim import FLEET_COMPARED, compare_fleet, jct_goal, router_ranking


def _mean(values: Sequence[Any]) -> float | None:
    """The mean, None when any value is missing (or none is given)."""
    if not values or any(v is None for v in values):
        return None
    return sum(float(v) for v in values) / len(values)


def _span(values: Sequence[Any]) -> list[float] | None:
    if not values or any(v is None for v in values):
        return None
    nums = [float(v) for v in values]
    return [min(nums), max(nums)]


def mean_sim(runs: Sequence[Mapping[str, Any]], key: str = "compare") -> dict[str, Any] | None:
    """The mean simulated figure of each compared metric over the runs' ``key``
    comparisons, keyed as a simulated result is (None: a run was not simulated)."""
    figures = [sim_figures(r, key) for r in runs]
    if not figures or any(f is None for f in figures):
        return None
    return {
        sim_key: _mean([f[sim_key] for f in figures if f is not None])
        for _, sim_key, _, _ in FLEET_COMPARED
    }


def merge_fleet_runs(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """K runs' rows of one (policy, router) as one row: the live figures' means,
    ``live_range`` ({figure: [min, max]}), ``compare`` (the mean simulated figure against
    the live mean, each entry with its live range), ``jct_within_10pct`` on the means,
    ``runs_within_10pct`` (how many single runs are), ``compare_as_routed`` (the mean of
    the runs' simulations on the live placement, where every run has one),
    ``compare_one_timing`` (the mean of their simulations on the trace's own timing alone,
    where every run has one), ``compare_pooled`` (the mean of their simulations priced by
    the pooled profile, where every run has one), ``engines_pooled`` (the replicas' steps
    and engine TTFT over every run, live and on the live placement:
    :func:`~replay.validation.engine_side.pooled_engines`) and ``runs``.
    One run is returned as it is, with its ``engines_pooled``."""
    if not runs:
        raise ValueError("no runs to merge")
    if len(runs) == 1:
        return {**runs[0], "engines_pooled": pooled_engines([runs[0].get("engines_as_routed")])}
    merged: dict[str, Any] = {}
    spread: dict[str, list[float] | None] = {}
    for live_key, _, _, _ in FLEET_COMPARED:
        values = [r.get(live_key) for r in runs]
        merged[live_key] = _mean(values)
        spread[live_key] = _span(values)
    merged["live_range"] = spread
    sim = mean_sim(runs)
    merged["compare"] = [
        {**c, "live_range": spread[c["metric"]]} for c in compare_fleet(sim, merged)
    ]
    merged["jct_within_10pct"] = jct_goal(merged["compare"])
    within = [r.get("jct_within_10pct") for r in runs]
    merged["runs_within_10pct"] = None if None in within else sum(bool(w) for w in within)
    routed = mean_sim(runs, "compare_as_routed")
    merged["compare_as_routed"] = None if routed is None else compare_fleet(routed, merged)
    merged["engines_pooled"] = pooled_engines([r.get("engines_as_routed") for r in runs])
    one = mean_sim(runs, "compare_one_timing")
    merged["compare_one_timing"] = None if one is None else compare_fleet(one, merged)
    if all(r.get("compare_pooled") for r in runs):
        pooled = mean_sim(runs, "compare_pooled")
        merged["compare_pooled"] = None if pooled is None else compare_fleet(pooled, merged)
    drawn = runs[0].get("sim_timings")
    #: the draws' settings (each run keeps its figures' ranges over its draws)
    merged["sim_timings"] = (
        None if drawn is None else {k: v for k, v in drawn.items() if k != "range"}
    )
    merged["sim_note"] = runs[0].get("sim_note")
    merged["returned_from"] = runs[0].get("returned_from")
    merged["repeats"] = len(runs)
    merged["runs"] = [dict(r) for r in runs]
    return merged


def sim_figures(row: Mapping[str, Any], key: str = "compare") -> dict[str, Any] | None:
    """A row's simulated figures in its ``key`` comparison, keyed as a simulated result
    is (None: not simulated)."""
    compared = row.get(key)
    if not compared or all(c["sim"] is None for c in compared):
        return None
    by = {c["metric"]: c["sim"] for c in compared}
    return {sim_key: by.get(live_key) for live_key, sim_key, _, _ in FLEET_COMPARED}


def run_rankings(rows: Mapping[str, Mapping[str, Any]], repeats: int) -> list[dict[str, Any]]:
    """One policy's routers ranked by mean JCT in each single run: run k of every router,
    simulated (that run's simulation) against live."""
    out = []
    for k in range(repeats):
        single = {r: (row["runs"][k] if "runs" in row else row) for r, row in rows.items()}
        out.append(router_ranking({r: sim_figures(row) for r, row in single.items()}, single))
    return out


def goal(rows: Mapping[str, Mapping[str, Any]], ranking: Mapping[str, Any]) -> bool | None:
    """Issue 19's goal on these rows: every router's mean JCT within 10% of the simulator
    and the same ranking (None: a router or the ranking not compared)."""
    within = [row.get("jct_within_10pct") for row in rows.values()]
    same = ranking.get("same") if len(rows) > 1 else True
    if None in within or same is None:
        return None
    return all(within) and bool(same)


def judged(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], bool | None]:
    """One policy's routers judged on the means: each router's runs made one row
    (:func:`merge_fleet_runs`), the routers ranked by mean JCT, simulated and live, and
    the goal on those rows. ``runs``: {router: its runs' rows}."""
    rows = {router: merge_fleet_runs(each) for router, each in runs.items()}
    ranking = router_ranking({r: mean_sim(each) for r, each in runs.items()}, rows)
    return rows, ranking, goal(rows, ranking)


def goal_repriced(runs: Mapping[str, Sequence[Mapping[str, Any]]], key: str) -> dict[str, Any]:
    """The goal on the means with each run's ``key`` comparison (another pricing of the
    same runs) taken as its simulated side (:func:`judged`): ``met``, each router's
    mean-JCT ``errors`` and the ``ranking``. ``runs``: {router: its runs' rows}."""
    rows, ranking, met = judged(
        {
            router: [{**r, "compare": r[key], "jct_within_10pct": jct_goal(r[key])} for r in each]
            for router, each in runs.items()
        }
    )
    return {
        "met": met,
        "errors": {
            router: next(c["error"] for c in row["compare"] if c["metric"] == "jct_mean_s")
            for router, row in rows.items()
        },
        "ranking": ranking,
    }
