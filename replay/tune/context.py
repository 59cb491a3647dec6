"""What a trial replays: the tuner's errors, the live target, :class:`TuneContext` (every
setting the objective needs, as plain data) and the helpers that replay one load × seed
in the simulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fitting.eta import from_fit as eta_from_fit
from fitting.fit_doc import FitDoc
from fitting.policy_params import PolicyParams
from profiles import profile_read
from profiles.cost import ProfileCostModel
from profiles.schema import ProfileDoc
from replay.client_tags import FULL
from replay.figures import PolicyResult
from replay.fleet.run import FleetSpec
from replay.fleet.run import runner as fleet_runner
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.sim import ReplayConfig
from replay.vllmsim.backend import runner
from replay.workload import Workload
from ttlctl.bundle_doc import BundleParts
from ttlctl.errors import TtlctlError
from ttlctl.nouns import counted

#: bump when the search space or the objective changes meaning (part of the study name)
SEARCH_SPACE = "ttlctl.tune.space/1"


class TuneError(TtlctlError, ValueError):
    """Bad settings, an unusable storage or a study that cannot give an answer (one line)."""


class IncompleteRun(TuneError):
    """A live run in which a call failed or a program was cut short: the trial fails
    (and the study goes on); on the held-back programs the whole run stops."""


# ---------------------------------------------------------------- live mode


#: the live baseline: the server runs the TTL scheduler, so stock vLLM is not measured
LIVE_BASELINE_NOTE = (
    "live mode: the server runs ttlctl's TTL scheduler, so stock vLLM is not measured; "
    "the baseline is the never-pin bundle (pins=False: program FCFS, no pins)"
)
#: how the tuner knows the server serves the bundle it wrote (see :func:`swap`)
LIVE_RELOAD_RULE = (
    "no reload counter on /metrics: after each write, wait max(2 x check_s, 2 s), then "
    "send one untagged request, whose arrival makes the plugin look at the file"
)


#: a live study's defaults: programs per run, the plugin's TTLCTL_BUNDLE_CHECK_S
#: (ttlctl/engine/watch.py) and a run's time limit
LIVE_PROGRAMS = 8
DEFAULT_CHECK_S = 2.0
LIVE_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class LiveTarget:
    """A vLLM server running the TTL scheduler, and the bundle file it reloads."""

    url: str
    #: the file the server was started with as TTLCTL_BUNDLE (``ttlctl serve --bundle``)
    bundle: Path
    #: programs each live run replays: the trace's programs [offset, offset + programs)
    programs: int = LIVE_PROGRAMS
    offset: int = 0
    #: the server's TTLCTL_BUNDLE_CHECK_S (the plugin's default)
    check_s: float = DEFAULT_CHECK_S
    #: one live run stops after this (programs still running are cut short)
    timeout_s: float = LIVE_TIMEOUT_S
    #: the served model's name (filled in by :func:`tune` from ``/v1/models``)
    model: str | None = None
    #: each warning of a live run (None: :func:`warnings.warn`)
    warn: Callable[[str], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.programs < 1 or self.offset < 0:
            raise TuneError("--live-programs must be at least 1")
        if not self.check_s >= 0 or not self.timeout_s > 0:
            raise TuneError("the bundle check interval must be >= 0 and the run timeout > 0")

    @property
    def wait_s(self) -> float:
        """Seconds between writing a bundle and the request that makes the plugin load it."""
        return max(2.0 * self.check_s, 2.0)

    def subset(self, workload: Workload) -> Workload:
        return Workload(workload.programs[self.offset : self.offset + self.programs])

    def held_back(self) -> LiveTarget:
        """The next programs of the trace: the held-back comparison's."""
        return replace(self, offset=self.offset + self.programs)

    def fingerprint(self) -> dict[str, Any]:
        return {"mode": "live", "programs": self.programs, "offset": self.offset}


# ---------------------------------------------------------------- what a trial replays


@dataclass(frozen=True, slots=True)
class TuneContext:
    """Everything the objective needs, as plain data (picklable for worker processes)."""

    workload: Workload
    #: the fit document (its CDFs are the policy's prior; its η the default trial's)
    fit: FitDoc
    #: the profile document that prices every step and every miss
    profile: ProfileDoc
    config: ReplayConfig = field(default_factory=ReplayConfig)
    #: program starts: each a Load with ``jps`` or ``concurrency`` (its seed is ignored)
    loads: tuple[Load, ...] = (Load(concurrency=8),)
    #: every load is replayed with each of these seeds
    seeds: tuple[int, ...] = (0, 1)
    #: a constraint: the replays' mean p95 JCT must stay at or under this (None: none)
    p95_max_s: float | None = None
    #: replay against this server instead of the simulator (None: the simulator)
    live: LiveTarget | None = None
    #: every recorded pause was capped at this (only recorded: the caller capped them)
    idle_gap_cap_s: float | None = None
    #: the simulator: ``fast`` or ``vllm`` (vLLM's own scheduler, ``replay.vllmsim``)
    backend: str = "fast"
    async_scheduling: bool = False
    #: a fleet (``--replicas``): the replicas, and the router the default trials use
    #: (None: one engine)
    fleet: FleetSpec | None = None
    #: the routers a trial may pick (more than one: the router itself is searched;
    #: empty: the fleet's router)
    routers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.workload.programs:
            raise TuneError("the trace has no programs to replay")
        if self.live is not None and not self.live.subset(self.workload).programs:
            raise TuneError(
                f"the trace has {counted(len(self.workload.programs), 'program')}: none left for a "
                f"live run from program {self.live.offset}"
            )
        if not self.loads:
            raise TuneError("give at least one load (--jps or --concurrency)")
        for load in self.loads:
            if (load.jps is None) == (load.concurrency is None):
                raise TuneError("each load needs exactly one of jps and concurrency")
            if (load.jps is not None and not load.jps > 0) or (
                load.concurrency is not None and load.concurrency < 1
            ):
                raise TuneError("jps and concurrency must be positive")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise TuneError("seeds must be a non-empty list without repeats")
        if self.p95_max_s is not None:
            if not self.p95_max_s > 0:
                raise TuneError("--p95-max-seconds must be positive")
            if len(self.replayed().programs) < 20:
                raise TuneError(
                    "a p95 limit needs at least 20 programs in the trace"
                    + (" (live: in --live-programs)" if self.live is not None else "")
                )

    @property
    def eta_fitted(self) -> float:
        return eta_from_fit(self.fit)

    def replayed(self) -> Workload:
        """The programs one replay runs: all of them, or a live run's subset."""
        return self.workload if self.live is None else self.live.subset(self.workload)

    def replays(self) -> list[Load]:
        """Seed-major: every load with the first seed, then every load with the next."""
        return [replace(load, seed=s) for s in self.seeds for load in self.loads]

    def cost(self) -> ProfileCostModel:
        return ProfileCostModel(profile_read.from_json(self.profile))

    def fingerprint(self) -> dict[str, Any]:
        """What the objective's values depend on, besides the inputs' content."""
        engine = self.config.engine
        out: dict[str, Any] = {
            "space": SEARCH_SPACE,
            "loads": [load_json(t) for t in self.loads],
            "seeds": list(self.seeds),
            "p95_max_s": self.p95_max_s,
            "engine": engine.to_json(),
            "offload_tokens": self.config.offload_tokens,
            "truncate": self.config.truncate,
        }
        # only when set, so the simulator's studies keep their names and fingerprints
        if self.idle_gap_cap_s is not None:
            out["idle_gap_cap_s"] = self.idle_gap_cap_s
        if self.backend != "fast":
            out["backend"] = self.backend
        if self.backend != "fast" or self.async_scheduling:
            out["async_scheduling"] = self.async_scheduling
        if self.config.client_tags != FULL:
            out["client_tags"] = self.config.client_tags
        if self.live is not None:
            out["live"] = self.live.fingerprint()
        if self.fleet is not None:
            out["fleet"] = {
                "replicas": self.fleet.replicas,
                "router": self.fleet.router.name,
                "routers": list(self.searched_routers()),
            }
            # each only where it departs from the default (the URLs given: the hashing
            # routers place programs by them; the credit off: kv-aware places calls
            # otherwise), so studies on the defaults keep their names
            if self.fleet.worker_urls is not None:
                out["fleet"]["worker_urls"] = list(self.fleet.worker_urls)
            if not self.fleet.prefix_credit:
                out["fleet"]["prefix_credit"] = False
        return out

    def searched_routers(self) -> tuple[str, ...]:
        """The routers trials choose from (one: the router is fixed)."""
        if self.fleet is None:
            return ()
        return self.routers or (self.fleet.router.name,)


def load_json(timing: Load) -> dict[str, Any]:
    return {"jps": timing.jps} if timing.jps is not None else {"concurrency": timing.concurrency}


def shuffled(workload: Workload, seed: int) -> Workload:
    """The workload with its programs in a seeded order (who starts first)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7E57]))
    order = rng.permutation(len(workload.programs))
    return Workload(tuple(workload.programs[i] for i in order))


def replay_once(
    ctx: TuneContext, spec: PolicySpec, timing: Load, fleet: FleetSpec | None = None
) -> PolicyResult:
    """One replay of ``spec`` at ``timing``; on ``fleet`` (default: ``ctx.fleet``) when
    the study tunes a fleet."""
    fleet = fleet or ctx.fleet
    run_one = (
        fleet_runner(fleet)
        if fleet is not None
        else runner(ctx.backend, async_scheduling=ctx.async_scheduling)
    )
    result = run_one(
        shuffled(ctx.workload, timing.seed), spec, ctx.cost(), ctx.config, timing, timed=False
    )
    if result["jct_mean_s"] is None:
        raise TuneError(
            f"no program finished in the replay ({load_json(timing)}, seed {timing.seed}): "
            "are the calls longer than the KV cache? (try a larger --kv-tokens or --truncate)"
        )
    return result


def jct_mean(result: PolicyResult) -> float:
    """A replay's mean JCT (:func:`replay_once` and the live runs refuse a replay in
    which no program finished)."""
    value = result["jct_mean_s"]
    if value is None:
        raise TuneError(f"{result['policy']}: no program finished in the replay")
    return value


def continuum(ctx: TuneContext, params: PolicyParams) -> PolicySpec:
    """The TTL policy as the engine would run it from a bundle with these parameters."""
    parts: BundleParts = {
        "fit": ctx.fit.copy(),
        "profile": ctx.profile.copy(),
        "policy": params.to_json(),
    }
    return PolicySpec("continuum", bundle=parts)
