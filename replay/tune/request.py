"""What ``ttlctl tune`` was asked: :class:`TuneRequest` (the command's options, by name) and
the options' rules (:func:`check`, :func:`check_live`), each refusal one :class:`TuneError`
line. Nothing is read here; :func:`replay.tune.session.prepare` reads the inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from replay.client_tags import FULL
from replay.client_tags import check as check_tags
from replay.loads import SEEDS_MAX
from replay.policy_runs import Load
from replay.tune.context import DEFAULT_CHECK_S, LIVE_PROGRAMS, LIVE_TIMEOUT_S, TuneError

#: the largest seed of Optuna's TPE sampler (numpy's RandomState takes 0 … 2**32 − 1)
SAMPLER_SEED_MAX = 2**32 - 1
#: the live study's options (their flags), which go with --live only
LIVE_ONLY = {
    "live_bundle": "--live-bundle",
    "live_programs": "--live-programs",
    "live_check_s": "--live-check-seconds",
    "live_timeout_s": "--live-timeout-seconds",
}


@dataclass(frozen=True, slots=True)
class TuneRequest:
    """What ``ttlctl tune`` was asked (the CLI's options, by name)."""

    trace: Path
    fit: Path
    profile: str
    output: Path
    trials: int = 40
    loads: tuple[Load, ...] = ()
    storage: str | None = None
    study: str | None = None
    workers: int = 1
    seed: int = 0
    seeds: int = 2
    holdout_seeds: int = 3
    p95_max_s: float | None = None
    #: the engine's size; None: as the trace's engine log states it (one replica), else the
    #: simulator's default (:class:`~replay.scheduler.SimSchedulerConfig`)
    kv_tokens: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    #: vLLM's prefill chunk cap and its adaptive floor; None: as the trace's engine log
    #: states it (one replica), else none
    long_prefill_token_threshold: int | None = None
    long_prefill_token_threshold_adaptive: bool | None = None
    #: vLLM's ``--watermark`` (None: the engine log's, else none)
    watermark: float | None = None
    offload_tokens: int = 0
    truncate: bool = False
    force: bool = False
    min_gain: float = 1.0
    summary: Path | None = None
    heartbeat_s: int = 60
    live: str | None = None
    live_bundle: Path | None = None
    #: a live study's settings; None: not given (the defaults above: :meth:`live_run`)
    live_programs: int | None = None
    live_check_s: float | None = None
    live_timeout_s: float | None = None
    idle_gap_cap_s: float | None = None
    backend: str = "fast"
    async_scheduling: bool = False
    #: what the replayed clients tag each call with (``--client-tags``:
    #: :mod:`replay.client_tags`)
    client_tags: str = FULL
    #: a fleet: this many replicas behind the first of ``routers`` (more routers: the
    #: router itself is searched among them)
    replicas: int | None = None
    routers: tuple[str, ...] = ()
    #: the replicas' URLs as vllm-router is given them (``--worker-urls``), in replica
    #: order: the hashing routers place programs by them (None: ``http://replica-I``)
    worker_urls: tuple[str, ...] | None = None
    #: whether ``kv-aware`` credits the calls with their cached prefix
    #: (``--no-prefix-credit``: :attr:`replay.fleet.run.FleetSpec.prefix_credit`)
    prefix_credit: bool = True


def live_run(req: TuneRequest) -> tuple[int, float, float]:
    """A live study's programs per run, the plugin's reload check (s) and the runs' time
    limit (s): as given, else the defaults."""
    return (
        LIVE_PROGRAMS if req.live_programs is None else req.live_programs,
        DEFAULT_CHECK_S if req.live_check_s is None else req.live_check_s,
        LIVE_TIMEOUT_S if req.live_timeout_s is None else req.live_timeout_s,
    )


#: the most of each count tune takes: far past any study, and short of what a list of
#: workers or of seeds can hold (a count of 10**20 overflowed or hung)
COUNT_MAX = {
    "--trials": 1_000_000,
    "--workers": 1_024,
    "--seeds": SEEDS_MAX,
    "--holdout-seeds": SEEDS_MAX,
}
#: the longest heartbeat Optuna's timestamps take with room (a day)
HEARTBEAT_MAX_S = 86_400


def check(req: TuneRequest) -> None:
    """The options' rules, each refusal one line."""
    counts = {
        "--trials": req.trials,
        "--workers": req.workers,
        "--seeds": req.seeds,
        "--holdout-seeds": req.holdout_seeds,
    }
    for flag, count in counts.items():
        if count < 1:
            raise TuneError(f"{flag} must be >= 1, not {count}")
        if count > COUNT_MAX[flag]:
            raise TuneError(f"{flag} must be at most {COUNT_MAX[flag]:,}, not {count:,}")
    if not 0 <= req.seed <= SAMPLER_SEED_MAX:
        raise TuneError(
            f"--seed must be in 0 … {SAMPLER_SEED_MAX} (the TPE sampler's seeds), not {req.seed}"
        )
    if not 1 <= req.heartbeat_s <= HEARTBEAT_MAX_S:
        raise TuneError(
            f"--heartbeat-seconds must be in 1 … {HEARTBEAT_MAX_S:,} (a day), "
            f"not {req.heartbeat_s:g}"
        )
    if not (math.isfinite(req.min_gain) and req.min_gain >= 1.0):
        raise TuneError(
            f"--min-gain must be a ratio of at least 1 (1.05: 5% faster than the baseline), "
            f"not {req.min_gain:g}"
        )
    check_tags(req.client_tags)
    check_live(req)
    if req.idle_gap_cap_s is not None and req.idle_gap_cap_s < 0:
        raise TuneError("--trace-idle-gap-cap-seconds must be >= 0")


def check_live(req: TuneRequest) -> None:
    """The live options' rules, each refusal one line."""
    bundle = req.live_bundle
    if req.live is None:
        for name, flag in LIVE_ONLY.items():
            if getattr(req, name) is not None:
                raise TuneError(
                    f"{flag} goes with --live URL (a live study; without --live each trial "
                    "replays in the simulator)"
                )
        return
    if bundle is None:
        raise TuneError(
            "--live needs --live-bundle PATH: the bundle file the server was started with "
            "(TTLCTL_BUNDLE, `ttlctl serve --bundle`), which each trial overwrites"
        )
    if not bundle.is_file():
        raise TuneError(
            f"{bundle}: no such file: --live-bundle is the bundle the server was started with"
        )
    if req.workers != 1:
        raise TuneError("--live runs one trial at a time (one server): --workers must be 1")
    programs, check_s, timeout_s = live_run(req)
    if programs < 1:
        raise TuneError("--live-programs must be >= 1")
    if not check_s >= 0 or not timeout_s > 0:
        raise TuneError("--live-check-seconds must be >= 0 and --live-timeout-seconds positive")
