"""A single-server validation's judged part: each policy simulated, set beside its live
runs and judged, as the document keeps them.

``validate`` without ``--replicas`` (:func:`~replay.validation.crosscheck.validate`) and
``validate --resimulate`` (:mod:`~replay.validation.resimulate`) both end here: each policy
simulated on ``side`` (one engine sized like the servers, priced by one profile, under the
live load, continuum with its bundle) by the backend validate was told, compared metric by
metric with its live runs' mean (:func:`~replay.validation.stats.compare`), the policies
ranked on both sides and each one's goals judged. One code path: a re-simulation with the
same code and the same inputs gives the same rows, ranking and goals, to the last digit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from replay.figures import PolicyResult
from replay.progress import RunsDone, each_told
from replay.validation.fleet_profile import Measured
from replay.validation.sim_record import profile_record, simulation_record
from replay.validation.sim_side import SimSide
from replay.validation.stats import TIE, compare, goals, ranking, same_ranking
from replay.vllmsim.backend import runner
from replay.workload import Workload

#: the keys of a single-server document :func:`judged_policies` makes (a re-simulation
#: replaces these and keeps the rest as recorded)
JUDGED_KEYS = ("rows", "sim", "ranking", "goals", "profile")


def measured_on(policy: str) -> str:
    """Where a single-server validation's measurements are taken (its first policy's
    server), in :func:`~replay.validation.fleet_profile.pooled`'s words."""
    return f"on {policy}'s server"


def judged_policies(
    work: Workload,
    side: SimSide,
    live: Mapping[str, Mapping[str, Any]],
    *,
    policies: Sequence[str],
    backend: str,
    profile_source: str | None,
    measurements: Sequence[Mapping[str, Any]],
    say: Callable[[str], None],
    runs_done: RunsDone | None = None,
) -> dict[str, Any]:
    """The document's :data:`JUDGED_KEYS`: each of ``policies`` simulated on ``side`` by
    ``backend`` (untimed: a wall time is no figure of the run), compared with its ``live``
    runs (merged: :func:`~replay.validation.stats.merge_runs`), ranked and judged, and the
    profile block (``side``'s profile, said to come from ``profile_source``, and the
    ``measurements`` as the document keeps them). ``runs_done`` is told the policies
    simulated of all (``validate --resimulate``'s bar; validate's counts its live runs)."""
    run_one = runner(backend, async_scheduling=side.async_scheduling)
    sim: dict[str, PolicyResult] = {}
    for name in each_told(policies, runs_done):
        say(f"{name}: simulating")
        sim[name] = run_one(
            work, side.spec(name), side.cost(), side.config(), side.timing, timed=False
        )
    rows = {name: compare(sim[name], live[name]) for name in policies}
    rank_sim, rank_live = ranking(sim), ranking(live)
    return {
        "rows": rows,
        "sim": sim,
        "ranking": {
            "by": "jct_mean_s",
            "sim": rank_sim,
            "live": rank_live,
            "tie_within": TIE,
            "same": same_ranking(rank_sim, rank_live),
        },
        "goals": {name: goals(rows[name]) for name in policies},
        "profile": profile_record(side.profile, profile_source, measurements),
    }


def server_document(
    work: Workload,
    side: SimSide,
    live: Mapping[str, Mapping[str, Any]],
    *,
    policies: Sequence[str],
    backend: str,
    profile_source: str | None,
    measured: Sequence[Measured],
    bundle: Path | None,
    servers: Mapping[str, Any],
    server_info: Mapping[str, Any],
    work_dir: Path,
    config: Mapping[str, Any],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """A single-server validation's whole document: the policies judged
    (:func:`judged_policies`), the settings they ran with (``config``: as asked, its
    ``idle_gap_cap_s`` the pause cap), and what the simulated side was built from
    (:func:`~replay.validation.sim_record.simulation_record`: ``validate --resimulate``
    reads it back)."""
    judged = judged_policies(
        work,
        side,
        live,
        policies=policies,
        backend=backend,
        profile_source=profile_source,
        measurements=[m.to_json() for m in measured],
        say=say,
    )
    engine = side.engine
    return {
        "programs": len(work.programs),
        "calls": work.calls,
        "policies": list(policies),
        **judged,
        "live": dict(live),
        "bundle": None if bundle is None else str(bundle.resolve()),
        "engine": engine.to_json(),
        "servers": dict(servers),
        "server_info": dict(server_info),
        "work_dir": str(work_dir),
        "config": dict(config),
        #: what the simulated side needs beyond the above, for ``validate --resimulate``
        "simulation": simulation_record(work, side.timing, config["idle_gap_cap_s"], bundle),
    }
