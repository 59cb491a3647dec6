"""The tuner behind ``ttlctl tune``: an Optuna study over the TTL policy's knobs, by replay.

One trial = one :class:`~fitting.policy.PolicyParams` (η, K, T window, valve, pin cap,
a cold-start override), scored by replaying the trace under it at every load and
seed of a :class:`TuneContext`; the objective is the mean of the replays' mean JCT
(optionally with a p95 constraint). The running mean is reported after each seed's
pass over the loads, so a median pruner stops trials already worse than most others.

Optuna habits (STYLE.md, ECOSYSTEM.md): seeded TPE, the paper's defaults (η from the
fit, K = 100, T window 100, head valve, no cap, τ = ln B in cold start) enqueued as
the first trial (the same with the stall-only valve second: METHOD.md), :func:`objective`
pure enough for ``optuna.trial.FixedTrial``,
parallel trials in processes (``spawn``) that share one storage: any Optuna URL
(SQLite, PostgreSQL, ...) or a journal-file path. RDB storages get heartbeats and a
:class:`~optuna.storages.RetryHeartbeatStaleTrialCallback` (Optuna 5's name for
``RetryFailedTrialCallback``), so a trial whose worker died is failed and retried.

After the study, the best trial, the paper's defaults, a never-pin policy (program
FCFS only) and stock vLLM are replayed on held-back seeds that no trial saw. The
guard: when the tuned policy does not beat vLLM there, the bundle written is the
never-pin one unless the caller insists (``force``).

A seed draws the order in which programs start (and, with ``jps``, their Poisson
arrivals), so seeds are distinct samples of the same workload.

Live mode (``ttlctl tune --live URL``, :class:`LiveTarget`): the trials run against a
vLLM server that runs the TTL scheduler instead of the simulator. Each replay (one
load × one seed = one live run) writes the candidate bundle over the file the server
was started with (``TTLCTL_BUNDLE``), waits until the plugin must have reloaded it
(:func:`swap`), and replays a bounded subset of the trace's programs
(:func:`replay.live.run_live`, which resets the prefix cache first). One server runs
one trial at a time (one worker, no pruning). The held-back comparison replays the
tuned policy, the paper's defaults and the never-pin bundle on the next programs of
the trace (none of which a trial saw); the never-pin bundle is the baseline the
guard compares with, because the server runs the TTL scheduler and stock vLLM is not
measured there.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import socket
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from fitting.policy import VALVES, PolicyParams
from profiles import schema as profile_schema
from profiles.cost import ProfileCostModel
from replay.live import LOW_IDS, LiveError, ServerInfo, probe, run_live
from replay.policies import PolicySpec
from replay.run import Timing, run_one
from replay.sim import ReplayConfig, SimulationError
from replay.workload import Workload

SUMMARY_SCHEMA = "ttlctl.tune/1"
METRIC = "jct_mean_s"
#: bump when the search space or the objective changes meaning (part of the study name)
SEARCH_SPACE = "ttlctl.tune.space/1"
PAPER_K = 100
PAPER_T_WINDOW = 100
COLD_START = ("ln-b", "fixed")
#: trials that end (pruned ones too) count toward ``--trials``
DONE = (TrialState.COMPLETE, TrialState.PRUNED)
_OBJECTIVE_ATTR = "ttlctl.objective"
_PROVENANCE_ATTR = "ttlctl.provenance"


class TuneError(ValueError):
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


@dataclass(frozen=True, slots=True)
class LiveTarget:
    """A vLLM server running the TTL scheduler, and the bundle file it reloads."""

    url: str
    #: the file the server was started with as TTLCTL_BUNDLE (``ttlctl serve --bundle``)
    bundle: Path
    #: programs each live run replays: the trace's programs [offset, offset + programs)
    programs: int = 8
    offset: int = 0
    #: the server's TTLCTL_BUNDLE_CHECK_S (the plugin's default: 2 s)
    check_s: float = 2.0
    #: one live run stops after this (programs still running are cut short)
    timeout_s: float = 900.0
    ttlctl_version: str = "unknown"
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
    fit: Mapping[str, Any]
    #: the profile document that prices every step and every miss
    profile: Mapping[str, Any]
    config: ReplayConfig = field(default_factory=ReplayConfig)
    #: program starts: each a Timing with ``jps`` or ``concurrency`` (its seed is ignored)
    loads: tuple[Timing, ...] = (Timing(concurrency=8),)
    #: every load is replayed with each of these seeds
    seeds: tuple[int, ...] = (0, 1)
    #: a constraint: the replays' mean p95 JCT must stay at or under this (None: none)
    p95_max_s: float | None = None
    #: replay against this server instead of the simulator (None: the simulator)
    live: LiveTarget | None = None
    #: every recorded pause was capped at this (only recorded: the caller capped them)
    idle_gap_cap_s: float | None = None

    def __post_init__(self) -> None:
        if not self.workload.programs:
            raise TuneError("the trace has no programs to replay")
        if self.live is not None and not self.live.subset(self.workload).programs:
            raise TuneError(
                f"the trace has {len(self.workload.programs)} programs: none left for a "
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
                raise TuneError("the p95 limit must be positive")
            if len(self.replayed().programs) < 20:
                raise TuneError(
                    "a p95 limit needs at least 20 programs in the trace"
                    + (" (live: in --live-programs)" if self.live is not None else "")
                )

    @property
    def eta_fitted(self) -> float:
        value = (self.fit.get("eta") or {}).get("value")
        if value is None or not math.isfinite(value):
            return 1.0
        return max(-1.0, min(1.0, float(value)))

    def replayed(self) -> Workload:
        """The programs one replay runs: all of them, or a live run's subset."""
        return self.workload if self.live is None else self.live.subset(self.workload)

    def replays(self) -> list[Timing]:
        """Seed-major: every load with the first seed, then every load with the next."""
        return [replace(load, seed=s) for s in self.seeds for load in self.loads]

    def cost(self) -> ProfileCostModel:
        return ProfileCostModel(profile_schema.from_json(dict(self.profile)))

    def fingerprint(self) -> dict[str, Any]:
        """What the objective's values depend on, besides the inputs' content."""
        engine = self.config.engine
        out: dict[str, Any] = {
            "space": SEARCH_SPACE,
            "loads": [load_json(t) for t in self.loads],
            "seeds": list(self.seeds),
            "p95_max_s": self.p95_max_s,
            "engine": {k: getattr(engine, k) for k in engine.__dataclass_fields__},
            "offload_tokens": self.config.offload_tokens,
            "truncate": self.config.truncate,
        }
        # only when set, so the simulator's studies keep their names and fingerprints
        if self.idle_gap_cap_s is not None:
            out["idle_gap_cap_s"] = self.idle_gap_cap_s
        if self.live is not None:
            out["live"] = self.live.fingerprint()
        return out


def load_json(timing: Timing) -> dict[str, Any]:
    return {"jps": timing.jps} if timing.jps is not None else {"concurrency": timing.concurrency}


def shuffled(workload: Workload, seed: int) -> Workload:
    """The workload with its programs in a seeded order (who starts first)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7E57]))
    order = rng.permutation(len(workload.programs))
    return Workload(tuple(workload.programs[i] for i in order))


def replay_once(ctx: TuneContext, spec: PolicySpec, timing: Timing) -> dict[str, Any]:
    result = run_one(
        shuffled(ctx.workload, timing.seed), spec, ctx.cost(), ctx.config, timing, timed=False
    )
    if result["jct_mean_s"] is None:
        raise TuneError(
            f"no program finished in the replay ({load_json(timing)}, seed {timing.seed}): "
            "are the calls longer than the KV cache? (try a larger --kv-tokens or --truncate)"
        )
    return result


def continuum(ctx: TuneContext, params: PolicyParams) -> PolicySpec:
    """The TTL policy as the engine would run it from a bundle with these parameters."""
    doc = {"fit": dict(ctx.fit), "profile": dict(ctx.profile), "policy": params.to_json()}
    return PolicySpec("continuum", bundle=doc)


# ---------------------------------------------------------------- live replays


def candidate_bundle(ctx: TuneContext, params: PolicyParams, label: str) -> dict[str, Any]:
    """The sealed bundle a live run serves ``params`` with."""
    from datetime import UTC, datetime

    from ttlctl import bundle as bundle_mod

    assert ctx.live is not None
    return bundle_mod.build(
        ctx.fit,
        ctx.profile,
        params,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        ttlctl_version=ctx.live.ttlctl_version,
        provenance={"tuning": {"live_candidate": label}},
    )


def probe_request(live: LiveTarget, timeout_s: float = 300.0) -> None:
    """One short untagged completion (never pinned): its arrival polls the bundle file."""
    body = {
        "model": live.model,
        "prompt": list(range(LOW_IDS, LOW_IDS + 8)),
        "max_tokens": 1,
        "temperature": 0.0,
    }
    url = live.url  # normalised by tune() (from probe())
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise TuneError(f"{url}: the request after a bundle swap failed ({exc})") from None


def swap(ctx: TuneContext, params: PolicyParams, label: str) -> dict[str, Any]:
    """Write the candidate bundle over the server's and return once the server serves it.

    The observable: none on the wire. ``ttlctl/engine/metrics.py`` exports only the pin
    series; the watcher's reload count (``BundleWatcher.reloads``) stays inside the
    engine process and the server only logs the reload. So this relies on the plugin's
    rule instead (``ttlctl/engine/watch.py``, ``scheduler.py``): it looks at the file's
    mtime/size/inode at most every TTLCTL_BUNDLE_CHECK_S seconds, and only when a request
    arrives or a step runs. The write is atomic (a new inode), so after waiting
    ``max(2 x check_s, 2 s)`` the arrival of one more request must look at the file and
    load it, before that request and everything after it is scheduled. A server started
    with a larger TTLCTL_BUNDLE_CHECK_S than ``check_s`` breaks this: give it.
    """
    from ttlctl import bundle as bundle_mod

    live = ctx.live
    assert live is not None
    doc = candidate_bundle(ctx, params, label)
    bundle_mod.write(doc, live.bundle)
    written = time.monotonic()
    time.sleep(live.wait_s)
    probe_request(live)
    return {
        "label": label,
        "sha256": doc["sha256"],
        "policy": doc["policy"],
        "waited_s": round(time.monotonic() - written, 3),
    }


def live_replay(
    ctx: TuneContext, params: PolicyParams, timing: Timing, label: str
) -> dict[str, Any]:
    """Swap ``params``'s bundle in, then one live run of ``ctx``'s programs (in ``timing``'s
    seeded order); the simulator's result keys, and ``bundle_loaded`` (what :func:`swap` saw)."""
    live = ctx.live
    assert live is not None
    loaded = swap(ctx, params, label)
    try:
        result = run_live(
            live.url,
            shuffled(ctx.replayed(), timing.seed),
            "continuum",
            timing=timing,
            seed=timing.seed,
            timeout_s=live.timeout_s,
            warn=live.warn,
        )
    except LiveError as exc:
        raise TuneError(str(exc)) from None
    where = f"live run of {label} ({load_json(timing)}, seed {timing.seed})"
    if result["rejected_calls"] or result["programs_cut_short"]:
        errors = "; ".join(result["server"]["errors"][:2]) or "the run's time limit"
        raise IncompleteRun(
            f"{where}: {result['rejected_calls']} call(s) failed, "
            f"{result['programs_cut_short']} program(s) cut short ({errors})"
        )
    if result["jct_mean_s"] is None:
        raise IncompleteRun(f"{where}: no program finished")
    result["bundle_loaded"] = loaded
    return result


def _live_brief(result: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial keeps of each live run."""
    keep = ("programs", "llm_calls", "jct_p95_s", "prefix_hit_rate", "preemptions", "pins")
    return {k: result.get(k) for k in keep} | {
        "wall_s": round(float(result["wall_s"]), 3),
        "bundle_sha256": result["bundle_loaded"]["sha256"],
        "waited_s": result["bundle_loaded"]["waited_s"],
    }


# ---------------------------------------------------------------- the search space


def suggest(trial: optuna.trial.BaseTrial) -> PolicyParams:
    """The policy a trial stands for. Also maps a trial's stored params back."""
    eta = trial.suggest_float("eta", -1.0, 1.0)
    k = trial.suggest_int("k", 10, 1000, log=True)
    t_window = trial.suggest_int("t_window", 10, 1000, log=True)
    valve = trial.suggest_categorical("valve", list(VALVES))
    pin_cap = trial.suggest_float("pin_cap", 0.05, 1.0)
    cold = trial.suggest_categorical("cold_start", list(COLD_START))
    cold_ttl = trial.suggest_float("cold_start_ttl_s", 0.0, 30.0) if cold == "fixed" else None
    return PolicyParams(
        eta=eta, k=k, t_window=t_window, valve=valve, pin_cap=pin_cap, cold_start_ttl_s=cold_ttl
    )


def paper_defaults(eta: float) -> dict[str, Any]:
    """The first trial: the paper's policy with the fit's η."""
    return {
        "eta": max(-1.0, min(1.0, eta)),
        "k": PAPER_K,
        "t_window": PAPER_T_WINDOW,
        "valve": "head",
        "pin_cap": 1.0,
        "cold_start": "ln-b",
    }


def first_trials(eta: float) -> list[dict[str, Any]]:
    """Enqueued before the sampler's own: the paper's defaults (trial 0), then the same
    with the stall-only valve, because the valve moves results more than τ does."""
    paper = paper_defaults(eta)
    return [paper, {**paper, "valve": "stall-only"}]


def params_of(values: Mapping[str, Any]) -> PolicyParams:
    return suggest(optuna.trial.FixedTrial(dict(values)))


# ---------------------------------------------------------------- the objective


def objective(trial: optuna.trial.BaseTrial, ctx: TuneContext) -> float:
    """Mean JCT (s) of the trial's policy over every load × seed of ``ctx``; lower is better."""
    if ctx.live is not None:
        return live_objective(trial, ctx)
    spec = continuum(ctx, suggest(trial))
    replays = ctx.replays()
    jcts: list[float] = []
    p95s: list[float | None] = []
    per_seed = len(ctx.loads)
    for i, timing in enumerate(replays):
        result = replay_once(ctx, spec, timing)
        jcts.append(float(result["jct_mean_s"]))
        p95s.append(result["jct_p95_s"])
        if (i + 1) % per_seed:
            continue
        # after each full pass over the loads: every step's value mixes the same loads
        step = (i + 1) // per_seed - 1
        trial.report(float(np.mean(jcts)), step)
        if step < len(ctx.seeds) - 1 and trial.should_prune():
            raise optuna.TrialPruned(f"pruned after {step + 1} of {len(ctx.seeds)} seeds")
    trial.set_user_attr("jct_mean_s_by_replay", jcts)
    if all(p is not None for p in p95s):
        p95 = float(np.mean([p for p in p95s if p is not None]))
        trial.set_user_attr("jct_p95_s", p95)
        if ctx.p95_max_s is not None:
            trial.set_constraint("jct_p95_s", p95 - ctx.p95_max_s)
    elif ctx.p95_max_s is not None:
        raise TuneError("too few programs finished for a p95 JCT (needs 20)")
    return float(np.mean(jcts))


def live_objective(trial: optuna.trial.BaseTrial, ctx: TuneContext) -> float:
    """The objective against the server: one live run per load × seed, each after its own
    bundle swap (so every run starts from the bundle, not from what the last one learned).
    The running mean is reported after each seed (no pruning: see :func:`pruner`)."""
    params = suggest(trial)
    number = getattr(trial, "number", None)
    label = "trial" if number is None else f"trial {number}"
    jcts: list[float] = []
    p95s: list[float | None] = []
    runs: list[dict[str, Any]] = []
    per_seed = len(ctx.loads)
    for i, timing in enumerate(ctx.replays()):
        result = live_replay(ctx, params, timing, label)
        jcts.append(float(result["jct_mean_s"]))
        p95s.append(result["jct_p95_s"])
        runs.append(_live_brief(result))
        if not (i + 1) % per_seed:
            trial.report(float(np.mean(jcts)), (i + 1) // per_seed - 1)
    trial.set_user_attr("jct_mean_s_by_replay", jcts)
    trial.set_user_attr("live_runs", runs)
    if all(p is not None for p in p95s):
        p95 = float(np.mean([p for p in p95s if p is not None]))
        trial.set_user_attr("jct_p95_s", p95)
        if ctx.p95_max_s is not None:
            trial.set_constraint("jct_p95_s", p95 - ctx.p95_max_s)
    elif ctx.p95_max_s is not None:
        raise TuneError("too few programs finished for a p95 JCT (needs 20)")
    return float(np.mean(jcts))


# ---------------------------------------------------------------- storage


@dataclass(frozen=True, slots=True)
class Storage:
    """An Optuna storage every worker opens for itself: a URL or a journal-file path."""

    target: str
    #: seconds between a running trial's heartbeats (RDB storages)
    heartbeat_s: int = 60
    #: a trial whose heartbeat is older than this is failed (None: 2 × heartbeat)
    grace_s: int | None = None
    #: times a trial failed that way is retried
    max_retry: int = 2

    @property
    def is_url(self) -> bool:
        return "://" in self.target

    def open(self) -> optuna.storages.BaseStorage:
        if not self.is_url:
            return self._journal()
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if self.target.startswith("sqlite"):
            kwargs = {"connect_args": {"timeout": 60}}
            database = self.target.split(":///", 1)[-1].split("?", 1)[0]
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.8
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    self.target,
                    engine_kwargs=kwargs,
                    heartbeat_interval=self.heartbeat_s,
                    grace_period=self.grace_s,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=self.max_retry
                    ),
                )
        except ImportError as exc:
            raise TuneError(f"storage {self.shown()}: missing driver ({exc})") from None
        except Exception as exc:  # sqlalchemy's errors: bad URL, refused, auth, ...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TuneError(f"storage {self.shown()}: cannot open ({first})") from None

    def _journal(self) -> optuna.storages.BaseStorage:
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(self.target)
        if path.is_dir():
            raise TuneError(f"{path}: is a directory, not a journal file")
        if path.is_file():
            with path.open("rb") as fh:
                if fh.read(16) == b"SQLite format 3\x00":
                    raise TuneError(
                        f"{path}: is a SQLite database, not a journal file; "
                        f"pass it as a URL: sqlite:///{path.resolve()}"
                    )
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))

    def shown(self) -> str:
        """The target with any password hidden."""
        if not self.is_url:
            return self.target
        try:
            from sqlalchemy.engine import make_url

            return make_url(self.target).render_as_string(hide_password=True)
        except Exception:
            return self.target.split("://", 1)[0] + "://…"

    def commands(self, study: str) -> dict[str, str]:
        """The commands Optuna users know, for this storage and study."""
        if self.is_url:
            shown = self.shown()
            return {
                "dashboard": f"optuna-dashboard {shown}",
                "best_trial": f"optuna best-trial --study-name {study} --storage {shown} -f json",
            }
        path = Path(self.target).resolve()
        return {
            "dashboard": f"optuna-dashboard {path}",
            "best_trial": f"optuna best-trial --study-name {study} --storage {path} "
            "--storage-class JournalFileBackend -f json",
        }


def default_storage(output: Path) -> str:
    """A SQLite file next to the bundle (absolute, so the printed commands work anywhere)."""
    return f"sqlite:///{output.resolve().parent / (output.stem + '.optuna.db')}"


def default_study_name(ctx: TuneContext, inputs: Mapping[str, str]) -> str:
    """Deterministic from the inputs' hashes and the objective's settings."""
    return "ttlctl-tune-" + _digest({"inputs": dict(inputs), "objective": ctx.fingerprint()})[:16]


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------- running trials


def worker_seed(seed: int, index: int) -> int:
    """Worker 0 samples with ``seed`` itself; the others with seeds drawn from
    (seed, index), so no two workers of any machines with distinct seeds share one."""
    if index == 0:
        return seed
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def sampler(seed: int, trials: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(3, min(10, trials // 4)))


def pruner(ctx: TuneContext) -> optuna.pruners.BasePruner:
    """Steps are seeds: a trial is stopped after a seed's pass over every load when its
    mean so far is worse than the median of finished trials' at the same point.
    Live trials are never pruned (a live run is one noisy sample; they are few)."""
    if ctx.live is not None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)


def run_trials(
    study: optuna.Study,
    ctx: TuneContext,
    n: int,
    total: int,
    worker: str,
    on_trial: Callable[[], None] | None = None,
) -> None:
    """Run up to ``n`` trials here; stop early once the study has ``total`` finished ones."""

    def run(trial: optuna.Trial) -> float:
        trial.set_user_attr("worker", worker)
        return objective(trial, ctx)

    callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] = [
        optuna.study.MaxTrialsCallback(total, states=DONE)
    ]
    if on_trial is not None:
        callbacks.append(lambda _s, _t: on_trial())
    study.optimize(run, n_trials=n, catch=(SimulationError, IncompleteRun), callbacks=callbacks)


@dataclass(frozen=True, slots=True)
class WorkerJob:
    ctx: TuneContext
    storage: Storage
    study: str
    index: int
    trials: int
    total: int
    seed: int
    verbosity: int


def worker_main(job: WorkerJob) -> None:
    """One worker process: open the shared study and run its share of trials."""
    optuna.logging.set_verbosity(job.verbosity)
    study = optuna.load_study(
        study_name=job.study,
        storage=job.storage.open(),
        sampler=sampler(worker_seed(job.seed, job.index), job.total),
        pruner=pruner(job.ctx),
    )
    run_trials(study, job.ctx, job.trials, job.total, _worker_name(job.index))


def _worker_name(index: int) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{index}"


def _finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=DONE))


def run_workers(
    study: optuna.Study,
    ctx: TuneContext,
    storage: Storage,
    n: int,
    total: int,
    workers: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Run ``n`` trials of ``study`` in ``workers`` processes (``spawn``), each opening
    the storage itself and running its share; ``progress`` is polled meanwhile."""
    shares = [n // workers + (i < n % workers) for i in range(workers)]
    verbosity = optuna.logging.get_verbosity()
    jobs = [
        WorkerJob(ctx, storage, study.study_name, i, k, total, seed, verbosity)
        for i, k in enumerate(shares)
        if k > 0
    ]
    mp = multiprocessing.get_context("spawn")
    procs = [
        mp.Process(target=worker_main, args=(job,), name=f"ttlctl-tune-{job.index}") for job in jobs
    ]
    started = []
    try:
        for proc in procs:
            proc.start()
            started.append(proc)
        while any(proc.is_alive() for proc in started):
            if progress is not None:
                progress(_finished(study), total)
            for proc in started:
                proc.join(timeout=0.5 / len(started))
    except BaseException:
        for proc in started:
            if proc.is_alive():
                proc.terminate()
        for proc in started:
            proc.join()
        raise
    bad = [(job.index, p.exitcode) for job, p in zip(jobs, procs, strict=True) if p.exitcode != 0]
    if bad:
        index, code = bad[0]
        raise TuneError(f"worker {index} exited with code {code} (its error is printed above)")


def open_study(
    ctx: TuneContext,
    storage: Storage,
    name: str,
    *,
    seed: int,
    trials: int,
    inputs: Mapping[str, str],
    provenance: Mapping[str, Any],
) -> optuna.Study:
    """Create or resume the named study; refuse one made for other inputs or settings."""
    fingerprint = {"inputs": dict(inputs), **ctx.fingerprint()}
    study = optuna.create_study(
        storage=storage.open(),
        study_name=name,
        direction="minimize",
        load_if_exists=True,
        sampler=sampler(seed, trials),
        pruner=pruner(ctx),
    )
    stored = study.user_attrs.get(_OBJECTIVE_ATTR)
    if stored is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([METRIC])
        study.set_user_attr(_OBJECTIVE_ATTR, fingerprint)
        study.set_user_attr(_PROVENANCE_ATTR, dict(provenance))
    elif _digest(stored) != _digest(fingerprint):
        raise TuneError(
            f"study {name!r} in {storage.shown()} was made for other inputs or settings "
            "(trace, fit, profile, loads, seeds, KV size or p95 limit); pick another --study"
        )
    for values in first_trials(ctx.eta_fitted):
        study.enqueue_trial(values, skip_if_exists=True)
    return study


# ---------------------------------------------------------------- the whole run


def tune(
    ctx: TuneContext,
    *,
    storage: Storage,
    study_name: str,
    trials: int,
    workers: int = 1,
    seed: int = 0,
    holdout_seeds: Sequence[int] = (1000, 1001, 1002),
    force: bool = False,
    inputs: Mapping[str, str] | None = None,
    provenance: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    stage: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the study to ``trials`` finished trials, then judge its best
    policy on held-back seeds. Returns the summary (see :func:`summary_doc`); the
    policy to ship is ``summary["shipped"]["policy"]``."""
    if trials < 1 or workers < 1:
        raise TuneError("trials and workers must be at least 1")
    if set(holdout_seeds) & set(ctx.seeds) or not holdout_seeds:
        raise TuneError("held-back seeds must be given and differ from the tuning seeds")
    run: dict[str, Any] = {
        "storage": storage,
        "study_name": study_name,
        "trials": trials,
        "seed": seed,
        "holdout": tuple(holdout_seeds),
        "force": force,
        "inputs": inputs or {},
        "provenance": provenance or {},
        "progress": progress,
        "stage": stage,
    }
    if ctx.live is None:
        return _tune(ctx, workers=workers, server=None, **run)
    if workers != 1:
        raise TuneError("a live study runs one trial at a time on its server: use one worker")
    live = ctx.live
    held = live.held_back()
    if not held.subset(ctx.workload).programs:
        raise TuneError(
            f"the trace has {len(ctx.workload.programs)} programs: a live study needs more "
            f"than --live-programs ({live.programs}), so that the held-back comparison "
            "replays programs no trial saw"
        )
    try:
        original = live.bundle.read_bytes()
    except OSError as exc:
        raise TuneError(
            f"{live.bundle}: cannot read the server's bundle ({exc.strerror or exc}); "
            "give --live-bundle the file the server was started with"
        ) from None
    try:
        info = probe(live.url)
    except LiveError as exc:
        raise TuneError(str(exc)) from None
    if not info.ttl_metrics:
        _say(
            live,
            f"{info.url}: no ttlctl:pins_* on /metrics: make sure this server runs the TTL "
            "scheduler (ttlctl serve) with --live-bundle as its bundle",
        )
    ctx = replace(ctx, live=replace(live, url=info.url, model=info.model))
    try:
        return _tune(ctx, workers=1, server=info, **run)
    except BaseException:
        _put_back(live.bundle, original)  # the server goes back to what it served before
        raise


def _say(live: LiveTarget, message: str) -> None:
    if live.warn is not None:
        live.warn(message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _put_back(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a failed study leaves the server's bundle)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.restore")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _tune(
    ctx: TuneContext,
    *,
    storage: Storage,
    study_name: str,
    trials: int,
    workers: int,
    seed: int,
    holdout: tuple[int, ...],
    force: bool,
    inputs: Mapping[str, str],
    provenance: Mapping[str, Any],
    progress: Callable[[int, int], None] | None,
    stage: Callable[[str], None] | None,
    server: ServerInfo | None,
) -> dict[str, Any]:
    study = open_study(
        ctx,
        storage,
        study_name,
        seed=seed,
        trials=trials,
        inputs=inputs,
        provenance=provenance,
    )
    todo = max(0, trials - _finished(study))
    started = time.perf_counter()
    if todo and workers == 1:
        done = [_finished(study)]

        def tick() -> None:
            done[0] += 1
            if progress is not None:
                progress(done[0], trials)

        if progress is not None:
            progress(done[0], trials)
        run_trials(study, ctx, todo, trials, _worker_name(0), tick)
    elif todo:
        run_workers(study, ctx, storage, todo, trials, workers, seed, progress)
    if progress is not None:
        progress(_finished(study), trials)
    elapsed = time.perf_counter() - started
    if stage is not None:
        stage("replaying held-back programs live" if ctx.live else "replaying held-back seeds")
    return summary_doc(study, ctx, storage, holdout, force, seed, todo, elapsed, server=server)


def summary_doc(
    study: optuna.Study,
    ctx: TuneContext,
    storage: Storage,
    holdout: tuple[int, ...],
    force: bool,
    seed: int,
    ran: int,
    elapsed_s: float,
    *,
    server: ServerInfo | None = None,
) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        raise TuneError(f"study {study.study_name!r}: no trial completed")
    try:
        best = study.best_trial
    except ValueError:
        raise TuneError(
            f"no trial kept the mean p95 JCT at or under {ctx.p95_max_s} s; "
            "raise --p95-max or run more trials"
        ) from None
    defaults = paper_defaults(ctx.eta_fitted)
    default_trial = next((t for t in trials if t.params == defaults), None)
    tuned = params_of(best.params)
    paper = params_of(defaults)
    never = replace(paper, pins=False)
    policies = {"tuned": tuned, "default": paper, "never-pin": never}
    if ctx.live is None:
        held, by_replay = held_back(replace(ctx, seeds=holdout), policies)
        verdict = guard(held, force)
    else:
        held_ctx = replace(ctx, seeds=holdout, live=ctx.live.held_back())
        held, by_replay = held_back_live(held_ctx, policies)
        verdict = guard(held, force, baseline="never-pin")
    shipped = tuned if verdict["shipped"] == "tuned" else never
    return {
        "schema": SUMMARY_SCHEMA,
        "mode": "simulator" if ctx.live is None else "live",
        "live": None if ctx.live is None else live_doc(ctx, server),
        "study": {
            "name": study.study_name,
            "storage": storage.shown(),
            "direction": "minimize",
            "metric": METRIC,
            "sampler": "TPESampler",
            "pruner": type(study.pruner).__name__,
            "seed": seed,
        },
        "direction": "minimize",
        "objective": ctx.fingerprint() | {"eta_fitted": ctx.eta_fitted},
        "counts": {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState},
        "ran_now": ran,
        "elapsed_s": elapsed_s,
        "trials": [_trial_json(t) for t in trials],
        "default": {
            "number": None if default_trial is None else default_trial.number,
            "params": defaults,
            "value": None if default_trial is None else default_trial.value,
        },
        "best": {
            "number": best.number,
            "params": best.params,
            "value": best.value,
            "jct_p95_s": best.user_attrs.get("jct_p95_s"),
            "policy": tuned.to_json(),
        },
        "importance": importances(study) if len(complete) >= 2 else None,
        "held_back": held,
        "held_back_jct_mean_s_by_replay": by_replay,
        "guard": verdict,
        "shipped": {"which": verdict["shipped"], "policy": shipped.to_json()},
        "commands": storage.commands(study.study_name),
    }


def _trial_json(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    out = {
        "number": t.number,
        "state": t.state.name,
        "params": t.params,
        "value": t.value,
        "jct_p95_s": t.user_attrs.get("jct_p95_s"),
        "worker": t.user_attrs.get("worker"),
        "steps": len(t.intermediate_values),
    }
    if "live_runs" in t.user_attrs:
        out["jct_mean_s_by_replay"] = t.user_attrs.get("jct_mean_s_by_replay")
        out["live_runs"] = t.user_attrs["live_runs"]
    return out


def live_doc(ctx: TuneContext, server: ServerInfo | None) -> dict[str, Any]:
    """What a live study ran against (tune.json's ``live``)."""
    live = ctx.live
    assert live is not None
    tuning = live.subset(ctx.workload)
    held = live.held_back().subset(ctx.workload)
    return {
        "url": live.url,
        "bundle": str(live.bundle),
        "model": live.model,
        "server": None if server is None else server.to_json(),
        "programs": [p.program_id for p in tuning.programs],
        "held_back_programs": [p.program_id for p in held.programs],
        "idle_gap_cap_s": ctx.idle_gap_cap_s,
        "check_s": live.check_s,
        "wait_s": live.wait_s,
        "reload_rule": LIVE_RELOAD_RULE,
        "baseline": "never-pin",
        "baseline_note": LIVE_BASELINE_NOTE,
    }


def importances(study: optuna.Study) -> dict[str, float] | None:
    """Optuna's default evaluator (PED-ANOVA in Optuna 5: deterministic, no scikit-learn)."""
    from optuna.importance import get_param_importances

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "few trials in some regimes" and the like
            found = get_param_importances(study)
    except (ValueError, RuntimeError, ImportError):
        return None
    return {k: float(v) for k, v in found.items() if math.isfinite(v)}


# ---------------------------------------------------------------- held-back judgement


def held_back(
    ctx: TuneContext, policies: Mapping[str, PolicyParams]
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Each policy (and stock vLLM) on ``ctx``'s seeds: flat figures (``<name>_jct_mean_s``,
    ``gain_vs_default`` …, as a report shows them) and each replay's mean JCT by policy."""
    specs = {name: continuum(ctx, p) for name, p in policies.items()} | {"vllm": PolicySpec("vllm")}
    by: dict[str, list[float]] = {name: [] for name in specs}
    p95: dict[str, list[float | None]] = {name: [] for name in specs}
    for timing in ctx.replays():
        for name, spec in specs.items():
            r = replay_once(ctx, spec, timing)
            by[name].append(float(r["jct_mean_s"]))
            p95[name].append(r["jct_p95_s"])
    return _held_figures(ctx, by, p95, ("default", "vllm"), "vllm"), by


def held_back_live(
    ctx: TuneContext, policies: Mapping[str, PolicyParams]
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """:func:`held_back` against the server, on ``ctx.live``'s (held-back) programs: each
    policy's bundle swapped in, then one live run per load × seed. No stock vLLM: the
    server runs the TTL scheduler; ``never-pin`` is the baseline."""
    by: dict[str, list[float]] = {name: [] for name in policies}
    p95: dict[str, list[float | None]] = {name: [] for name in policies}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in policies}
    for timing in ctx.replays():
        for name, params in policies.items():
            r = live_replay(ctx, params, timing, f"held-back {name}")
            by[name].append(float(r["jct_mean_s"]))
            p95[name].append(r["jct_p95_s"])
            runs[name].append(_live_brief(r))
    out = _held_figures(ctx, by, p95, ("default", "never-pin"), "never-pin")
    out["note"] = LIVE_BASELINE_NOTE
    out["live_runs"] = runs
    return out, by


def _held_figures(
    ctx: TuneContext,
    by: Mapping[str, Sequence[float]],
    p95: Mapping[str, Sequence[float | None]],
    compare: Sequence[str],
    baseline: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seeds": list(ctx.seeds),
        "loads": [load_json(t) for t in ctx.loads],
        "replays": len(ctx.replays()),
        "baseline": baseline,
    }
    if ctx.live is not None:
        out["programs"] = [p.program_id for p in ctx.replayed().programs]
    for name, values in by.items():
        key = name.replace("-", "_")
        out[f"{key}_jct_mean_s"] = float(np.mean(values))
        known = [p for p in p95[name] if p is not None]
        out[f"{key}_jct_p95_s"] = float(np.mean(known)) if len(known) == len(p95[name]) else None
    for name in compare:
        other = name.replace("-", "_")
        if "tuned" in by and name in by:
            p = paired(by["tuned"], by[name])
            out[f"gain_vs_{other}"] = p["gain"]
            out[f"diff_vs_{other}_s"] = p["diff_s"]  # tuned − other, per replay
            out[f"diff_sem_vs_{other}_s"] = p["diff_sem_s"]
            out[f"within_noise_vs_{other}"] = p["within_noise"]
    return out


def paired(tuned: Sequence[float], other: Sequence[float]) -> dict[str, Any]:
    """``gain`` = other / tuned mean JCT (>1: tuned is faster); the paired difference
    tuned − other with its standard error (the noise across replays)."""
    diff = np.asarray(tuned) - np.asarray(other)
    sem = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else None
    return {
        "gain": float(np.mean(other) / np.mean(tuned)),
        "diff_s": float(diff.mean()),
        "diff_sem_s": sem,
        "within_noise": None if sem is None else bool(abs(diff.mean()) <= 2 * sem),
    }


def guard(held: Mapping[str, Any], force: bool, baseline: str = "vllm") -> dict[str, Any]:
    """Ship the tuned policy only if it beats the baseline on the held-back seeds: stock
    vLLM (simulator), or in live mode the never-pin bundle (``baseline="never-pin"``:
    the server runs the TTL scheduler, so stock vLLM is not measured there)."""
    if baseline == "never-pin":
        return _guard_live(held, force)
    tuned, vllm, never = (held[f"{n}_jct_mean_s"] for n in ("tuned", "vllm", "never_pin"))
    beats = tuned < vllm
    never_beats = never < vllm
    if beats:
        shipped = "tuned"
        message = (
            f"the tuned policy beats stock vLLM on the held-back seeds: mean JCT {tuned:.2f} s "
            f"vs {vllm:.2f} s ({vllm / tuned:.2f}x)"
        )
    elif force:
        shipped = "tuned"
        message = (
            f"the tuned policy does NOT beat stock vLLM on the held-back seeds (mean JCT "
            f"{tuned:.2f} s vs {vllm:.2f} s); shipping it anyway, as asked (--force)"
        )
    else:
        shipped = "never-pin"
        message = (
            f"the tuned policy does NOT beat stock vLLM on the held-back seeds (mean JCT "
            f"{tuned:.2f} s vs {vllm:.2f} s): the bundle written never pins (program FCFS "
            "only); pass --force to ship the tuned policy anyway"
        )
    if shipped == "never-pin" and not never_beats:
        message += (
            f". Program FCFS alone does not beat stock vLLM either ({never:.2f} s): "
            "serve this workload without a bundle"
        )
    return {
        "baseline": "vllm",
        "beats_baseline": beats,
        "beats_vllm": beats,
        "never_pin_beats_vllm": never_beats,
        "forced": bool(force and not beats),
        "shipped": shipped,
        "message": message,
    }


def _guard_live(held: Mapping[str, Any], force: bool) -> dict[str, Any]:
    tuned, never = held["tuned_jct_mean_s"], held["never_pin_jct_mean_s"]
    beats = tuned < never
    what = "the never-pin bundle (program FCFS, no pins; the live baseline)"
    figures = f"mean JCT {tuned:.2f} s vs {never:.2f} s"
    if beats:
        shipped = "tuned"
        message = (
            f"the tuned policy beats {what} on the held-back programs: {figures} "
            f"({never / tuned:.2f}x)"
        )
    elif force:
        shipped = "tuned"
        message = (
            f"the tuned policy does NOT beat {what} on the held-back programs ({figures}); "
            "shipping it anyway, as asked (--force)"
        )
    else:
        shipped = "never-pin"
        message = (
            f"the tuned policy does NOT beat {what} on the held-back programs ({figures}): "
            "the bundle written never pins; pass --force to ship the tuned policy anyway"
        )
    message += ". Stock vLLM was not measured (the server runs the TTL scheduler)"
    return {
        "baseline": "never-pin",
        "beats_baseline": beats,
        "beats_vllm": None,
        "never_pin_beats_vllm": None,
        "forced": bool(force and not beats),
        "shipped": shipped,
        "message": message,
    }


# ---------------------------------------------------------------- outputs


def summary_path(output: Path) -> Path:
    """Where the study summary goes by default: ``tune.json`` next to the bundle."""
    return output.parent / "tune.json"


def provenance_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The study summary that goes into the bundle's provenance (no trial list)."""
    keep = (
        "mode",
        "live",
        "study",
        "objective",
        "counts",
        "default",
        "best",
        "importance",
        "held_back",
        "guard",
        "shipped",
    )
    return {k: summary[k] for k in keep if k in summary}
