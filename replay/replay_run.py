"""One ``ttlctl replay`` run: its settings (:class:`ReplayRequest`) → its document.

:func:`replay_doc` checks the settings, reads the trace, the bundle and the profile,
replays every policy (in the simulator, or against a live server) and returns the
:class:`~replay.figures.ReplayDoc` that ``--json`` writes. Every refusal is a
:class:`~ttlctl.errors.TtlctlError` with a one-line message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from fitting.policy_params import VALVES
from profiles.cost import ProfileCostModel
from profiles.router_calibration import calibrate
from profiles.shipped import resolve
from replay.client_tags import FULL
from replay.client_tags import check as check_tags
from replay.figures import PolicyResult, ReplayDoc
from replay.fleet.asked import credit_note, default_urls_note, fleet_for, tuned_elsewhere
from replay.fleet.routers import AS_LOGGED, RouterSettings
from replay.fleet.run import replicas_named
from replay.fleet.run import runner as fleet_runner
from replay.live import cap_pauses, check_result_flags, live_results
from replay.policies import PolicySpec
from replay.policy_flags import listed, unread
from replay.policy_runs import Load, expand, run_all
from replay.progress import CallsDone
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_error import SimulationError
from replay.vllmsim.backend import UNMAPPED, check_request, runner
from replay.workload import load
from ttlctl import __version__
from ttlctl import bundle as bundle_mod
from ttlctl.errors import ConfigError, TtlctlError
from ttlctl.jsonio import file_sha256
from ttlctl.trace import io as trace_io


class ReplayFailed(TtlctlError):
    """The simulator broke one of its invariants (``--check``): said in one line."""


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """What ``ttlctl replay`` was asked: the inputs, the policies, the engine, the load."""

    trace: Path
    #: policy names, comma lists allowed; ["all"] for every one
    policies: Sequence[str]
    load: Load
    engine: SimSchedulerConfig
    profile: str = "llama-3.1-8b-h100"
    bundle: Path | None = None
    offload_tokens: int = 0
    truncate: bool = False
    check: bool = False
    per_token: bool = False
    valve: str | None = None
    pin_cap: float | None = None
    ttl_s: float = 2.0
    #: measure wall_s and sim_calls_per_s (False: null, byte-identical JSON)
    timed: bool = True
    live: str | None = None
    idle_gap_cap_s: float | None = None
    save_result: bool = False
    result_dir: Path | None = None
    label: str | None = None
    backend: str = "fast"
    async_scheduling: bool = False
    #: what the replayed clients tag each call with (``--client-tags``)
    client_tags: str = FULL
    #: a fleet: this many engines behind ``router`` (None: one engine)
    replicas: int | None = None
    router: RouterSettings | None = None
    #: each replica's URL as the real router is given it (None: the default names)
    worker_urls: tuple[str, ...] | None = None
    #: whether ``kv-aware`` credits the calls with their cached prefix
    #: (``--no-prefix-credit``: :attr:`replay.fleet.run.FleetSpec.prefix_credit`)
    prefix_credit: bool = True
    #: the policy options given (``--bundle``, ``--valve``, ``--pin-cap``, ``--ttl-seconds``):
    #: one that no asked policy reads is warned of (:mod:`replay.policy_flags`)
    policy_options: frozenset[str] = frozenset()


def policy_names(given: Sequence[str], backend: str) -> list[str]:
    """The policies asked for (comma lists split); ``all`` on the vllm backend: those
    vLLM's scheduler runs."""
    names = listed(given)
    every = names == ["all"]
    names = expand(names)
    if every and backend == "vllm":
        names = [n for n in names if n not in UNMAPPED]
    return names


def left_out(given: Sequence[str], backend: str) -> str | None:
    """The line saying which of ``all``'s policies ``backend`` does not run, and why
    (None when it runs every one asked)."""
    names = listed(given)
    if names != ["all"] or backend != "vllm":
        return None
    left = [n for n in expand(names) if n in UNMAPPED]
    if not left:
        return None
    why = "; ".join(f"{n}: {UNMAPPED[n]}" for n in left)
    return (
        f"--policy all on --backend vllm: {', '.join(left)} not run, as no vLLM scheduler "
        f"runs them ({why}); --backend fast runs them"
    )


def replay_doc(
    req: ReplayRequest,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    calls_done: CallsDone | None = None,
    live_progress: Callable[[str, int, int], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> ReplayDoc:
    """Replay ``req`` and return its document (the results, and what made them).

    ``progress``: told (policy, its index, policies) as each policy's replay starts;
    ``calls_done``: told (calls done, calls) within each simulated replay, now and then
    (:mod:`replay.progress`); ``live_progress``: told (the policy, calls done, calls) in a
    live one; ``warn``: told each warning, once every check has passed (a refused run says
    only its error)."""
    names = policy_names(req.policies, req.backend)
    check_tags(req.client_tags)
    if req.valve is not None and req.valve not in VALVES:
        raise ConfigError(f"--valve must be one of {', '.join(VALVES)}, got {req.valve!r}")
    if req.pin_cap is not None and not 0 < req.pin_cap <= 1:
        raise ConfigError("--pin-cap must be in (0, 1]")
    check_result_flags(req.save_result, req.result_dir, req.label)
    if req.save_result and req.live is None:
        raise ConfigError("--save-result needs --live (it saves a live run's benchmark result)")
    vllm_version = check_request(
        req.backend,
        names,
        async_scheduling=req.async_scheduling,
        offload_tokens=req.offload_tokens,
        fast_only={
            "--live": req.live is not None,
            "--check": req.check,
            "--per-token": req.per_token,
        },
    )
    # the warnings, said once every check has passed; no unread option where live (the
    # server runs its own policy)
    notes = [] if req.live is not None else unread(names, req.policy_options)
    skipped = left_out(req.policies, req.backend)
    if skipped is not None:
        notes.append(skipped)
    fleet = fleet_for(
        req.trace,
        req.replicas,
        req.router,
        backend=req.backend,
        live=req.live is not None,
        async_scheduling=req.async_scheduling,
        worker_urls=req.worker_urls,
        prefix_credit=req.prefix_credit,
    )
    if fleet is not None:
        notes.extend(
            note
            for note in (
                default_urls_note((fleet.router,), fleet.replicas, fleet.worker_urls),
                credit_note((fleet.router,), fleet),
            )
            if note is not None
        )
    if fleet is not None and fleet.router.name == AS_LOGGED:
        # a replica restarted at another size has two records: count the replicas
        sized = {e.get("replica") for e in trace_io.engines(req.trace) if e.get("kv_tokens")}
        if sized:
            notes.append(
                f"--router as-logged: the trace's engine records size {len(sized)} "
                "replica(s); replay sizes every replica by the flags (else the defaults), "
                "not by the logs: `ttlctl refit` replays them as logged, each its own size"
            )
    bundle_doc = bundle_mod.read(req.bundle) if req.bundle is not None else None
    # --live: the URL may be a router in front of a fleet, which this replay cannot see
    if bundle_doc is not None and "continuum" in names and (fleet is not None or req.live is None):
        other = tuned_elsewhere(bundle_doc, fleet)
        if other is not None:
            notes.append(f"--bundle {req.bundle}: {other}")
    prof, prof_path = resolve(req.profile)
    if (
        fleet is not None
        and fleet.router.name == "program-scheduling"
        and fleet.router.resolved()["calibration"] == "profile"
    ):
        # a profile the router cannot take: refused here, naming its file, not mid-replay
        calibrate(prof, source=prof_path)
    workload = cap_pauses(load(req.trace), req.idle_gap_cap_s)
    if not workload.programs:
        raise ConfigError(f"{req.trace}: no programs to replay")
    # a fleet's trace without --replicas is replayed on one engine: said, as tune says it
    # (read once load has checked the trace)
    ran_on = replicas_named(req.trace) if fleet is None and req.live is None else 0
    if ran_on > 1:
        notes.append(
            f"the trace's calls ran on {ran_on} replicas: replay replays one engine; "
            f"--replicas {ran_on} --router as-logged replays each call where it ran"
        )
    config = ReplayConfig(
        engine=req.engine,
        offload_tokens=req.offload_tokens,
        truncate=req.truncate,
        check=req.check,
        client_tags=req.client_tags,
    )
    specs = [
        PolicySpec(n, bundle=bundle_doc, ttl_s=req.ttl_s, valve=req.valve, pin_cap=req.pin_cap)
        for n in names
    ]
    if warn is not None:  # every check passed: the run goes ahead
        for line in notes:
            warn(line)
    results: list[PolicyResult]
    try:
        if req.live is not None:
            # the live side (replay.live) writes the same keys as a dict of its own
            results = cast(
                "list[PolicyResult]",
                live_results(
                    req.live,
                    workload,
                    names,
                    jps=req.load.jps,
                    concurrency=req.load.concurrency,
                    seed=req.load.seed,
                    save_result=req.save_result,
                    result_dir=req.result_dir,
                    label=req.label,
                    progress=live_progress,
                    warn=warn,
                    client_tags=req.client_tags,
                ),
            )
        else:
            results = run_all(
                workload,
                specs,
                ProfileCostModel(prof),
                config,
                req.load,
                timed=req.timed,
                progress=progress,
                calls_done=calls_done,
                runner=fleet_runner(fleet)
                if fleet is not None
                else runner(req.backend, async_scheduling=req.async_scheduling),
            )
    except SimulationError as exc:  # an invariant broke: say so, in one line
        raise ReplayFailed(f"simulation failed: {exc}") from None
    engine = req.engine
    doc: ReplayDoc = {
        "ttlctl_version": __version__,
        "backend": None if req.live is not None else req.backend,
        "vllm_version": vllm_version,
        "async_scheduling": req.async_scheduling,
        "trace": {
            "path": str(req.trace),
            "sha256": file_sha256(req.trace),
            "programs": len(workload.programs),
            "calls": workload.calls,
        },
        "profile": {"name": prof.name, "path": str(prof_path), "sha256": file_sha256(prof_path)},
        "bundle": None
        if req.bundle is None or bundle_doc is None
        else {"path": str(req.bundle), "sha256": bundle_doc["sha256"]},
        "config": {
            "engine": engine.to_json(),
            "offload_tokens": req.offload_tokens,
            "jps": req.load.jps,
            "concurrency": req.load.concurrency,
            "seed": req.load.seed,
            "truncate": req.truncate,
            "valve": req.valve,
            "pin_cap": req.pin_cap,
            "static_ttl_s": req.ttl_s,
            "live": req.live,
            "trace_idle_gap_cap_seconds": req.idle_gap_cap_s,
            "client_tags": req.client_tags,
        },
        "results": results,
    }
    if fleet is not None:
        doc["fleet"] = fleet.describe()
    return doc
