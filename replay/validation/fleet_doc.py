"""A fleet validation's judged part: its live runs simulated, priced and judged, as the
document keeps them.

``validate --replicas N`` (:func:`~replay.validation.fleet.validate_fleet`) and
``validate --resimulate`` (:mod:`~replay.validation.resimulate`) both end here: every
live run simulated (:func:`~replay.validation.fleet_rows.simulate_runs`, each repeat's
runs by that repeat's own profile when several were measured, the one ``side`` prices
beside it), each router's runs made one row and the routers ranked and judged on the
means (:func:`~replay.validation.fleet_runs.judged`) and run by run, and the profile
block that says how. One code path: a re-simulation with the same code and the same
inputs gives the same rows, ranking and goal, to the last digit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from replay.progress import RunsDone
from replay.validation.fleet_profile import Measured
from replay.validation.fleet_rows import LiveRun, simulate_runs
from replay.validation.fleet_runs import goal, goal_repriced, judged, run_rankings
from replay.validation.sim_record import profile_record, simulation_record
from replay.validation.sim_side import SimSide
from replay.validation.timings import Timings
from replay.workload import Workload

#: the keys of a fleet document :func:`judged_runs` makes (a re-simulation replaces these
#: and keeps the rest as recorded)
JUDGED_KEYS = ("rows", "live", "sim", "sim_notes", "ranking", "goal", "fleets", "profile")


def judged_runs(
    runs: Sequence[LiveRun],
    work: Workload,
    side: SimSide,
    own: Mapping[int, Any],
    timings: Timings,
    *,
    policies: Sequence[str],
    routers: Sequence[str],
    repeats: int,
    profile_source: str | None,
    measurements: Sequence[Mapping[str, Any]],
    runs_done: RunsDone | None = None,
) -> dict[str, Any]:
    """The document's :data:`JUDGED_KEYS`: ``runs`` simulated on ``side`` (each repeat's
    by its profile in ``own`` when there are several: :func:`simulate_runs`), judged per
    policy on the means and run by run, and the profile block (``side``'s profile, said
    to come from ``profile_source``, and the ``measurements`` as the document keeps
    them). ``runs_done`` is told the runs simulated of all (``validate --resimulate``'s
    bar; validate's counts its live runs)."""
    priced = simulate_runs(runs, work, side, own, timings, runs_done)
    per_run, per_repeat = priced.rows, priced.per_repeat
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    rankings: dict[str, dict[str, Any]] = {}
    goals: dict[str, dict[str, Any]] = {}
    for name in policies:
        rows[name], rankings[name], met = judged({r: per_run[name][r] for r in routers})
        by_run = run_rankings(rows[name], repeats)
        goals[name] = {
            #: every router's mean JCT within 10% and the same ranking (on the means over
            #: the runs when --repeats > 1)
            "met": met,
            #: the same goal on each single run (run k of every router)
            "runs": [
                goal({r: per_run[name][r][k] for r in routers}, by_run[k]) for k in range(repeats)
            ],
            "run_rankings": by_run,
            #: the goal with every run priced by the pooled profile (None: one profile
            #: priced every run)
            "pooled_profile": goal_repriced(per_run[name], "compare_pooled")
            if per_repeat
            else None,
        }
    return {
        "rows": rows,
        # one run: its document as it is; several: a list, one per run
        "live": _single(priced.live, repeats),
        # each run simulated on the trace's own timing (the rows' ``compare`` is the mean
        # over the perturbed timings, ``compare_one_timing`` this one)
        "sim": _single(priced.sim, repeats),
        "sim_notes": priced.notes,
        "ranking": rankings,
        "goal": goals,
        "fleets": _single(priced.fleets, repeats),
        # how the runs were priced: "per repeat" (each run by its repeat's own
        # measurement; the block's profile is the pooled one, compared beside it), else "one"
        "profile": profile_record(
            side.profile, profile_source, measurements, "per repeat" if per_repeat else "one"
        ),
    }


def _single(by: dict[str, dict[str, list[Any]]], repeats: int) -> dict[str, dict[str, Any]]:
    """{policy: {router: the run's document}} for one run, else the list of them."""
    return {n: {r: (v[0] if repeats == 1 else v) for r, v in d.items()} for n, d in by.items()}


def fleet_document(
    runs: Sequence[LiveRun],
    work: Workload,
    side: SimSide,
    own: Mapping[int, Any],
    timings: Timings,
    *,
    policies: Sequence[str],
    routers: Sequence[str],
    repeats: int,
    profile_source: str | None,
    measured: Sequence[Measured],
    server_info: dict[str, Any],
    bundle: Path | None,
    cpu_sets: Sequence[Sequence[int]] | None,
    gpu_sets: Sequence[Sequence[str]] | None = None,
    work_dir: Path,
    idle_gap_cap_s: float | None,
) -> dict[str, Any]:
    """A fleet validation's whole document: the runs judged (:func:`judged_runs`), the
    settings they ran with, and what the simulated side was built from
    (:func:`~replay.validation.sim_record.simulation_record`, with the perturbed timings and
    the routers' simulated settings: ``validate --resimulate`` reads it back)."""
    engine = side.engine
    return {
        "replicas": side.replicas,
        "routers": list(routers),
        "policies": list(policies),
        "repeats": repeats,
        #: perturbed arrival timings each run's simulated figures are the mean over (0: the
        #: trace's own timing alone; each row's ``sim_timings`` has their settings)
        "timing_draws": timings.draws,
        "programs": len(work.programs),
        "calls": work.calls,
        **judged_runs(
            runs,
            work,
            side,
            own,
            timings,
            policies=policies,
            routers=routers,
            repeats=repeats,
            profile_source=profile_source,
            measurements=[m.to_json() for m in measured],
        ),
        "engine": engine.to_json(),
        #: the servers started with vLLM's async scheduling, and the simulated replicas
        #: scheduling as it does
        "async_scheduling": side.async_scheduling,
        #: what the live client and the simulated ones tagged each call with
        "client_tags": side.client_tags,
        "server_info": server_info,
        "bundle": None if bundle is None else str(bundle.resolve()),
        #: each replica's CPUs (None: unpinned, every replica on every CPU)
        "cpu_sets": None if cpu_sets is None else [list(s) for s in cpu_sets],
        #: each replica's GPUs, as CUDA_VISIBLE_DEVICES names them (None: not placed)
        "gpu_sets": None if gpu_sets is None else [list(s) for s in gpu_sets],
        "work_dir": str(work_dir),
        #: what the simulated side needs beyond the above, for ``validate --resimulate``
        "simulation": {
            **simulation_record(work, side.timing, idle_gap_cap_s, bundle),
            # a fleet's own: the perturbed timings, each router's simulated settings
            # (those not its model's defaults)
            "timings": timings.to_json(),
            "router_settings": {
                router: {k: v for k, v in asdict(s).items() if v is not None}
                for router, s in side.settings.items()
            },
        },
    }
