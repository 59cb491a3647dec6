"""``ttlctl validate --replicas N --router R``: the trace live through vLLM's router.

For each policy (the replicas' scheduler: stock ``vllm``, or ``continuum``, the TTL
scheduler with its bundle) and each router policy asked, a fresh fleet is started
(:func:`~replay.validation.servers.policy_fleet`: N replicas and ``vllm-router`` in
front, all stopped after the run and on any exit), the replicas' prefix caches are
emptied, and the programs are replayed through the router's URL
(:func:`replay.live.run_live`). Each row gives the mean JCT and TTFT, the prefix-hit
rate (the cached prompt tokens the replicas reported per call, over all prompt
tokens: the router's ``/metrics`` is not the fleet's) and the share of calls that
returned to the replica their program's previous call ran on — read from each
replica's arrivals file (:mod:`ttlctl.server.arrivals`), not from the router's log,
which names the chosen worker only for some policies.

The simulated column needs the fleet replay (``replay --replicas N --router R``); until
it is there the document says so under ``"sim"`` and the table shows none.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiles.router_calibration import RouterCalibration
from replay.live import cap_pauses, first_programs, run_live
from replay.policy_runs import Load
from replay.validation.error import ValidateError
from replay.validation.servers import LIVE_POLICIES, Sources, policy_fleet
from replay.workload import Workload
from ttlctl import bundle as bundle_mod
from ttlctl.server import arrivals, router
from ttlctl.server.cache import reset_prefix_cache

#: ``--router`` for vllm-router's own Program scheduling: ``consistent_hash`` underneath
#: (its documented pairing), Program scheduling on for every call with an ``X-Session-ID``
#: (``program_scheduling_enable_key: auto``), calibrated from the profile when one is given
PROGRAM_SCHEDULING = "program_scheduling"
#: the request-level policy under Program scheduling
PROGRAM_SCHEDULING_POLICY = "consistent_hash"

#: what the document says while the simulated fleet is not built
SIM_PENDING = (
    "not compared: the simulated fleet (ttlctl replay --replicas N --router R) is not in "
    "this ttlctl yet"
)


def router_setup(
    router: str, calibration: RouterCalibration | None, program_scheduling_json: str | None
) -> tuple[str, str | None]:
    """The router's ``--policy`` and ``--program-scheduling-config-json`` for ``router``."""
    if router != PROGRAM_SCHEDULING:
        return router, program_scheduling_json
    auto = {"program_scheduling_enable_key": "auto"}
    value = calibration.flag_value(auto) if calibration is not None else json.dumps(auto)
    return PROGRAM_SCHEDULING_POLICY, value


def fleet_row(live: dict[str, Any], order: dict[str, list[str]]) -> dict[str, Any]:
    """One router's figures: the live run's means and the replicas' arrivals."""
    return {
        "jct_mean_s": live.get("jct_mean_s"),
        "ttft_mean_s": live.get("ttft_mean_s"),
        "hit_rate": (live.get("server") or {}).get("client_hit_rate"),
        "returned_share": arrivals.returned_share(order),
        "calls_per_replica": arrivals.per_replica(order),
        "returned_from": "replica arrivals (ttlctl.server.arrivals)",
    }


def validate_fleet(
    workload: Workload,
    sources: Sources,
    *,
    replicas: int,
    routers: Sequence[str],
    policies: Sequence[str] = ("vllm",),
    bundle: Path | None = None,
    program_scheduling_json: str | None = None,
    calibration: RouterCalibration | None = None,
    router_extra: Sequence[str] = (),
    timing: Load | None = None,
    seed: int = 0,
    max_programs: int | None = 8,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 1800.0,
    work_dir: Path | None = None,
    vocab_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay ``workload`` live through a fresh fleet per (policy, router).

    ``program_scheduling_json`` turns the router's Program scheduling on for every router;
    the router :data:`PROGRAM_SCHEDULING` turns it on for its calls (``calibration``: the
    profile's coefficients, else the router's reference ones).

    Raises :class:`ValidateError` (bad arguments), a
    :class:`~ttlctl.server.router.RouterError` (no ``vllm-router``, or a policy it
    lacks) or a :class:`~ttlctl.server.client.ServerError` (a replica or the router
    that does not start: nothing is left running).
    """
    say = progress or (lambda message: None)
    names = list(dict.fromkeys(policies))
    unknown = [p for p in names if p not in LIVE_POLICIES]
    if unknown or not names:
        raise ValidateError(f"a fleet runs {' or '.join(LIVE_POLICIES)}; got {unknown or 'none'}")
    if sources.base_cmd is None or sources.urls:
        raise ValidateError(
            "--replicas starts the fleet itself: give --model or --engine-cmd, not --url"
        )
    if not routers:
        raise ValidateError("--replicas needs at least one --router")
    for policy in routers:  # every one, before the first fleet's minutes of work
        router.check_policy(router_setup(policy, None, None)[0])
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValidateError("no programs to validate with")
    if "continuum" in names and bundle is None:
        raise ValidateError("continuum in a fleet needs --bundle")
    if bundle is not None:
        bundle_mod.read(bundle)  # a damaged bundle: refused before anything starts
    # made only once the arguments are known good: bad input leaves no folder behind
    work_dir = Path(work_dir or tempfile.mkdtemp(prefix="ttlctl-validate-fleet-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    live: dict[str, dict[str, Any]] = {}
    fleets: dict[str, dict[str, Any]] = {}
    for name in names:
        for policy in routers:
            tag = f"-{policy}"
            request_policy, scheduling = router_setup(policy, calibration, program_scheduling_json)
            made = policy_fleet(
                sources,
                name,
                bundle,
                work_dir,
                tag,
                replicas=replicas,
                router_policy=request_policy,
                program_scheduling_json=scheduling,
                router_extra=router_extra,
            )
            fleet = made.fleet
            say(f"{name} behind {policy}: starting {replicas} replicas and vllm-router")
            with fleet:
                groups = [s.pid for s in (*fleet.replicas, fleet.router) if s.pid is not None]
                for url in made.urls.values():
                    reset_prefix_cache(url)
                say(f"{name} behind {policy}: live replay of {len(work.programs)} programs")
                result = run_live(
                    fleet.url,
                    work,
                    name,
                    timing=timing,
                    seed=seed,
                    timeout_s=timeout_s,
                    vocab_size=vocab_size,
                    warn=warn,
                )
                say(f"{name} behind {policy}: stopping the fleet")
            order = arrivals.read(made.arrivals)
            rows.setdefault(name, {})[policy] = fleet_row(result, order)
            live.setdefault(name, {})[policy] = result
            fleets.setdefault(name, {})[policy] = {
                "url": fleet.url,
                "router_command": shlex.join(fleet.router.command),
                "router_log": str(fleet.router.log_path),
                #: the process groups it ran (each one's leader pid), all stopped now
                "process_groups": groups,
                "replicas": {
                    r: {"url": made.urls[r], "arrivals": str(made.arrivals[r])} for r in made.urls
                },
            }
    return {
        "replicas": replicas,
        "routers": list(routers),
        "policies": names,
        "programs": len(work.programs),
        "calls": work.calls,
        "rows": rows,
        "live": live,
        "sim": None,
        "sim_note": SIM_PENDING,
        "fleets": fleets,
        "bundle": None if bundle is None else str(bundle),
        "work_dir": str(work_dir),
    }
