"""``ttlctl validate``: each policy in the simulator and live, the same trace, compared.

:func:`validate` runs each policy live (a server per policy, given or started:
:mod:`replay.validation.servers`; ``repeats`` runs each in a fresh server), measures
the profile that prices the simulator unless one is given, sizes the simulator like
the servers (:mod:`replay.validation.sizing`), simulates each policy, and compares
(:mod:`replay.validation.stats`).

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

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.schema import Profile
from replay.live import cap_pauses, first_programs, run_live
from replay.policy_runs import Load
from replay.scheduler_config import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS
from replay.validation import work_dir as work_dirs
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured, measurable, measure_policy_server, pooled
from replay.validation.kv_memory import check_kv_memory
from replay.validation.server_doc import measured_on, server_document
from replay.validation.servers import LIVE_POLICIES, Sources, policy_server
from replay.validation.sim_side import SimSide
from replay.validation.sizing import (
    check_kv_tokens,
    kv_tokens_of,
    same_servers,
    sim_engine_config,
)
from replay.validation.stats import merge_runs
from replay.validation.warmup import Warmed, warmed
from replay.workload import Workload
from ttlctl import bundle as bundle_mod
from ttlctl.nouns import counted
from ttlctl.server.facts import ServerInfo, probe
from ttlctl.server.owned import OwnedServer

Progress = Callable[[str], None]


def _quiet(message: str) -> None:
    pass


@dataclass
class _Session:
    """What one validation holds while it runs the policies live, one server at a time."""

    work: Workload
    sources: Sources
    work_dir: Path
    timing: Load
    seed: int
    timeout_s: float
    repeats: int
    bundle_path: Path | None
    profile: Profile | None
    model_config: dict[str, Any] | None
    profile_repeats: int
    save_result: bool
    result_dir: Path | None
    label: str | None
    say: Progress
    warn: Callable[[str], None] | None
    bundle_doc: bundle_mod.Bundle | None = None
    #: ``--kv-tokens`` (None: each server's own)
    kv_tokens: int | None = None
    profile_source: str | None = None
    #: the live runs a profile is measured after, True where they are pooled (empty: a
    #: profile was given)
    measure: dict[tuple[str, int], bool] = field(default_factory=dict)
    measured: list[Measured] = field(default_factory=list)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    infos: dict[str, ServerInfo] = field(default_factory=dict)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, name: str, rep: int) -> None:
        """Run ``name`` live once (run ``rep``), in a server started for it if needs be."""
        tag = f"-{rep + 1}" if self.repeats > 1 else ""
        which = f"{name} (run {rep + 1} of {self.repeats})" if self.repeats > 1 else name
        server: OwnedServer | None = None
        try:
            if name in self.sources.urls:
                url = self._given(name, rep)
            else:
                server = self._start(name, rep, tag, which)
                url = server.url
            info = probe(url)
            kv_tokens_of(info, self.kv_tokens)  # a KV that holds no block: refused now
            self.infos[name] = info
            if server is not None:  # fresh: warmed first (replay.validation.warmup)
                self.say(f"{which}: warming the server up")
                started = self.servers[name]
                doc = started if rep == 0 else started["more_runs"][-1]
                #: what it served before its live run, so that it starts warm
                doc["warmup"] = self._warm(info).to_json()
            if rep == 0 and (name, rep) in self.measure:
                # what the measurement after the run needs, asked before it
                measurable(info.url, f"{name}'s server", self.model_config)
            self.say(
                f"{which}: live replay of {counted(len(self.work.programs), 'program')} "
                f"({counted(self.work.calls, 'call')})"
            )
            self.runs.setdefault(name, []).append(self._live(name, tag, info))
            self._measure_profile(name, rep, which, info)
        finally:
            if server is not None:
                self.say(f"{which}: stopping the server")
                server.stop()

    def _vocab(self) -> int | None:
        vocab = (self.model_config or {}).get("vocab_size")
        return int(vocab) if isinstance(vocab, int) and vocab > 0 else None

    def _warm(self, info: ServerInfo) -> Warmed:
        return warmed(
            [info.url],
            info.model,
            max_model_len=info.max_model_len,
            vocab_size=self._vocab(),
            seed=self.seed,
        )

    def _given(self, name: str, rep: int) -> str:
        url = self.sources.urls[name]
        self.servers[name] = {"url": url, "started_by_validate": False}
        if rep == 1 and name == "continuum" and self.warn is not None:
            self.warn(
                "continuum: repeated runs on a server validate did not start: its "
                "TTL scheduler keeps what it learned in the earlier runs"
            )
        return url

    def _start(self, name: str, rep: int, tag: str, which: str) -> OwnedServer:
        if name == "continuum" and self.bundle_path is None:
            self._cold_start_bundle()
        server = policy_server(self.sources, name, self.bundle_path, self.work_dir, tag)
        self.say(f"{which}: starting a server ({shlex.join(server.command[:6])} …)")
        server.start()
        started = {
            "url": server.url,
            "started_by_validate": True,
            "command": server.command,
            "log": str(server.log_path),
            "ready_s": server.ready_s,
        }
        if rep == 0:
            self.servers[name] = started
        else:
            self.servers[name].setdefault("more_runs", []).append(started)
        return server

    def _cold_start_bundle(self) -> None:
        if self.profile is None:
            raise ValidateError(
                "continuum alone needs --bundle or --profile (the cold-start "
                "bundle carries a profile, measured on the vllm server otherwise)"
            )
        self.bundle_path = self.work_dir / "cold-start-bundle.json"
        self.bundle_doc = bundle_mod.cold_start(
            self.profile.to_json(), "ttlctl validate (cold start: no fit)"
        )
        bundle_mod.write(self.bundle_doc, self.bundle_path)

    def _measure_profile(self, name: str, rep: int, which: str, info: ServerInfo) -> None:
        """After run ``rep`` of ``name``, on its server: a measurement if one is due, and
        the profile pooled over them after the last."""
        if (name, rep) not in self.measure:
            return
        self.say(f"{which}: measuring the server's profile")
        self.measured.append(
            measure_policy_server(
                info.url,
                policy=name,
                repeat=rep + 1,
                model_config=self.model_config,
                repeats=self.profile_repeats,
            )
        )
        if self.measure[(name, rep)]:
            self.profile, self.profile_source = pooled(self.measured, measured_on(name))

    def _live(self, name: str, tag: str, info: ServerInfo) -> dict[str, Any]:
        return run_live(
            info.url,
            self.work,
            name,
            timing=self.timing,
            seed=self.seed,
            timeout_s=self.timeout_s,
            save_result=self.save_result,
            result_dir=self.result_dir or self.work_dir,
            label=f"{self.label}-{name}{tag}" if self.label else None,
            vocab_size=self._vocab(),
            warn=self.warn,
        )


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
    warn: Callable[[str], None] | None = None,
    backend: str = "fast",
    async_scheduling: bool = False,
) -> dict[str, Any]:
    """Run ``workload`` (its first ``max_programs``) in the simulator and live, per policy.

    ``backend``: the simulator (``fast``, or ``vllm``: vLLM's own scheduler in
    process, see :mod:`replay.vllmsim`), with ``async_scheduling`` on either.

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
        session = _Session(
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
        )
        for name, rep in live_runs(names, repeats):
            session.run(name, rep)
        live = {name: merge_runs(session.runs[name]) for name in names}
        engine = sim_engine_config(
            same_servers(session.infos),
            kv_tokens=kv_tokens,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
        )
        assert session.profile is not None  # pooled after the first policy's last run
        side = SimSide(
            replicas=1,
            profile=session.profile,
            engine=engine,
            timing=session.timing,
            bundle=session.bundle_doc,
            async_scheduling=async_scheduling,
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
            },
            say=session.say,
        )
