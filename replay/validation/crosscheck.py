"""``ttlctl validate``: each policy in the simulator and live, the same trace, compared.

:func:`validate` runs each policy live (a server per policy, given or started:
:mod:`replay.validation.servers`; ``repeats`` runs each in a fresh server), measures
the profile that prices the simulator unless one is given, sizes the simulator like
the servers (:mod:`replay.validation.sizing`), simulates each policy, and compares
(:mod:`replay.validation.stats`). The live runs, one server at a time, are
:class:`~replay.validation.live_session.LiveSession`'s.

The profile, when none is given, is measured on the first policy's server after each of
its live runs (:func:`measured_after`: on the servers validate starts, one per run, no
live run follows a measurement's warm-up of its server, as in the fleet validation; a
server given with ``--url`` serves every run, so its runs after the first follow one)
and each measurement is fitted at once; after
its last run the K measurements are pooled into the one profile that prices every
simulated run (:func:`~replay.validation.fleet_profile.pooled`), before the next
policy's server starts (continuum's cold-start bundle carries that profile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiles.schema import Profile
from replay.client_tags import FULL
from replay.live import cap_pauses, first_programs
from replay.policy_runs import Load
from replay.progress import RunsDone, each_told
from replay.scheduler_config import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS
from replay.validation import work_dir as work_dirs
from replay.validation.error import ValidateError
from replay.validation.kv_memory import check_kv_memory
from replay.validation.live_session import LiveSession, Progress
from replay.validation.server_doc import server_document
from replay.validation.servers import LIVE_POLICIES, Sources
from replay.validation.sim_side import SimSide
from replay.validation.sizing import check_kv_tokens, same_servers, sim_engine_config
from replay.validation.stats import merge_runs
from replay.validation.warmup import warmed_engine
from replay.workload import Workload
from ttlctl import bundle as bundle_mod


def _quiet(message: str) -> None:
    pass


def _policies(policies: Sequence[str], repeats: int, sources: Sources) -> list[str]:
    """The policies to compare, in :data:`LIVE_POLICIES` order (:class:`ValidateError`:
    an unknown one, or one with no server)."""
    names = list(dict.fromkeys(policies))
    unknown = [p for p in names if p not in LIVE_POLICIES]
    if unknown or not names:
        raise ValidateError(
            f"validate compares {' and '.join(LIVE_POLICIES)} (the policies a server runs); "
            f"got {', '.join(unknown) or 'none'}"
        )
    names.sort(key=LIVE_POLICIES.index)
    if repeats < 1:
        raise ValidateError(f"repeats must be at least 1, not {repeats}")
    missing = [p for p in names if p not in sources.urls]
    if missing and sources.base_cmd is None:
        raise ValidateError(
            f"no server for {', '.join(missing)}: give --url {missing[0]}=URL, "
            "or --engine-cmd/--model so validate starts it"
        )
    return names


def live_runs(names: Sequence[str], repeats: int) -> list[tuple[str, int]]:
    """The live runs ``(policy, run)`` in the order they are made: every run of a policy
    before the next policy's first (continuum's cold-start bundle needs the profile)."""
    return [(name, rep) for name in names for rep in range(repeats)]


def measured_after(names: Sequence[str], repeats: int) -> dict[tuple[str, int], bool]:
    """The live runs ``(policy, run)`` a profile is measured after when none is given:
    every run of the first policy (each on a server of its own when validate starts them;
    a given server serves them all); True at its last, where the measurements are pooled,
    before any other policy's server starts."""
    return {(names[0], rep): rep == repeats - 1 for rep in range(repeats)}


def validate(
    workload: Workload,
    sources: Sources,
    *,
    policies: Sequence[str] = LIVE_POLICIES,
    bundle: Path | None = None,
    profile: Profile | None = None,
    kv_tokens: int | None = None,
    max_num_seqs: int = MAX_NUM_SEQS,
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
    prefill_cap: tuple[int, bool] = (0, False),
    watermark: float = 0.0,
    timing: Load | None = None,
    seed: int = 0,
    max_programs: int | None = 8,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 1800.0,
    work_dir: Path | None = None,
    repeats: int = 1,
    model_config: dict[str, Any] | None = None,
    profile_repeats: int = 2,
    save_result: bool = False,
    result_dir: Path | None = None,
    label: str | None = None,
    progress: Progress | None = None,
    runs_done: RunsDone | None = None,
    warn: Callable[[str], None] | None = None,
    backend: str = "fast",
    async_scheduling: bool = False,
    client_tags: str = FULL,
) -> dict[str, Any]:
    """Run ``workload`` (its first ``max_programs``) in the simulator and live, per policy.

    ``backend``: the simulator (``fast``, or ``vllm``: vLLM's own scheduler in
    process, see :mod:`replay.vllmsim`), with ``async_scheduling`` on either;
    ``client_tags``: what the live client and the simulated ones tag each call with
    (:mod:`replay.client_tags`).
    ``progress`` is told each step as it starts, ``runs_done`` the live runs done of all.

    Returns ``{"rows": {policy: [...]}, "sim": {...}, "live": {...}, "ranking":
    {...}, "goals": {...}, "profile": ..., "engine": ..., "servers": ...}``.
    ``model_config`` (the served model's config.json, when known) gives the profile
    its KV bytes per token and the profile and the live runs the vocabulary of their
    random prompts. Raises :class:`ValidateError` (bad arguments, servers that
    differ, a server that cannot be profiled) or a
    :class:`~ttlctl.server.client.ServerError` (a server that does not start or
    cannot be used).
    """
    names = _policies(policies, repeats, sources)
    check_kv_tokens(kv_tokens, sources.vllm_args())  # before any server starts
    check_kv_memory(sources.vllm_args(), model_config)
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValidateError("no programs to validate with")
    # absolute: the document names its files (the bundle, the servers' logs) wherever it
    # is read from (``validate --resimulate``); a refusal from here on (a damaged bundle, a
    # server that does not answer) leaves no empty temporary folder behind
    with work_dirs.work_dir(work_dir, "ttlctl-validate-") as work_dir:
        work_dir.mkdir(parents=True, exist_ok=True)
        session = LiveSession(
            work=work,
            sources=sources,
            work_dir=work_dir,
            timing=timing or Load(),
            seed=seed,
            timeout_s=timeout_s,
            repeats=repeats,
            bundle_path=bundle,
            bundle_doc=bundle_mod.read(bundle) if bundle is not None else None,
            kv_tokens=kv_tokens,
            profile=profile,
            profile_source="given" if profile is not None else None,
            measure={} if profile is not None else measured_after(names, repeats),
            model_config=model_config,
            profile_repeats=profile_repeats,
            save_result=save_result,
            result_dir=result_dir,
            label=label,
            say=progress or _quiet,
            warn=warn,
            client_tags=client_tags,
        )
        for name, rep in each_told(live_runs(names, repeats), runs_done):
            session.run(name, rep)
        live = {name: merge_runs(session.runs[name]) for name in names}
        info = same_servers(session.infos)
        engine = sim_engine_config(
            info,
            kv_tokens=kv_tokens,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            prefill_cap=prefill_cap,
            watermark=watermark,
        )
        if not sources.urls:  # every server started fresh and warmed (not one given)
            engine = warmed_engine(engine, info.max_model_len)
        assert session.profile is not None  # pooled after the first policy's last run
        side = SimSide(
            replicas=1,
            profile=session.profile,
            engine=engine,
            timing=session.timing,
            bundle=session.bundle_doc,
            async_scheduling=async_scheduling,
            client_tags=client_tags,
        )
        return server_document(
            work,
            side,
            live,
            policies=names,
            backend=backend,
            profile_source=session.profile_source,
            measured=session.measured,
            bundle=session.bundle_path,
            servers=session.servers,
            server_info={n: i.to_json() for n, i in session.infos.items()},
            work_dir=session.work_dir,
            config={
                "jps": session.timing.jps,
                "concurrency": session.timing.concurrency,
                "seed": session.seed,
                "max_programs": max_programs,
                "idle_gap_cap_s": idle_gap_cap_s,
                "repeats": repeats,
                "backend": backend,
                "async_scheduling": async_scheduling,
                "client_tags": client_tags,
            },
            say=session.say,
        )
