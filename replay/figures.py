"""Per-policy figures of a replay, and the replay document ``ttlctl replay --json`` writes.

:class:`ReplayDoc` is ``replay.json``; each of its ``results`` is a :class:`PolicyResult`:
the figures :func:`summarize` reads from a replay's outcome (:class:`ReplayFigures`),
with what the runner adds. A live run (``replay --live``) writes the same keys, with
None where a server does not tell (queueing, engine steps, offload).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, Protocol, TypedDict

import numpy as np

from fitting.percentile import percentile
from replay.fleet.records import FleetRouter, MissReasons, ReplicaResult
from replay.math_utils import cdiv
from replay.sim_outcome import ProgramRun, SimCallRecord
from ttlctl import gap
from ttlctl.jsonio import FileRef


class PinCounts(TypedDict):
    made: int
    hit: int
    expired: int
    released_under_pressure: int
    #: released on a last call, an abort, a replacement or a cache reset
    dropped: NotRequired[int]
    #: a replay's only: still held when it ended (made = hit + expired + released +
    #: dropped + held at the end)
    held_at_end: NotRequired[int]
    #: pins not made: the pin cap refused them
    refused: NotRequired[int]
    #: a live run's plugin counters only: pins not made because vLLM frees the blocks late
    deferred: NotRequired[int]


class PinnedTimeline(TypedDict):
    """KV tokens held by pins over time (a step function, downsampled)."""

    t_s: list[float]
    pinned_tokens: list[float]


class PolicyResult(TypedDict):
    """One policy's entry of ``replay.json``'s ``results`` (:func:`summarize`).
    Percentiles are None with too few programs (:func:`fitting.percentile.percentile`)."""

    policy: str
    #: programs that finished (not cut short)
    programs: int
    programs_cut_short: int
    llm_calls: int
    rejected_calls: int
    truncated_calls: int
    jct_mean_s: float | None
    jct_p50_s: float | None
    jct_p95_s: float | None
    jct_p99_s: float | None
    makespan_s: float
    throughput_programs_per_s: float | None
    ttft_mean_s: float | None
    ttft_p95_s: float | None
    queue_mean_s: float | None
    prefix_hit_rate: float | None
    offload_loaded_tokens: int | None
    preemptions: int | None
    pinned_token_seconds: float | None
    pins: PinCounts | None
    engine_steps: int | None
    engine_busy_s: float | None
    pinned_timeline: PinnedTimeline
    #: a bound no engine can reach (oracle, unlimited KV)
    evaluation_only: bool
    #: wall time of the replay and simulated calls per second (None: ``--no-timing``)
    wall_s: float | None
    sim_calls_per_s: float | None
    #: share of the vLLM → unlimited-KV mean-JCT gap closed (when both ran)
    gap_closed: NotRequired[float | None]
    #: ``--replicas``: the fleet (``replay.fleet.metrics``): the router, the replicas, each
    #: replica's figures, the busiest replica's busy time over the mean, pins whose
    #: program's next call went elsewhere (and their share of the pins made), the share
    #: of follow-up calls that returned to their previous replica, and why calls missed
    router: NotRequired[FleetRouter]
    replicas: NotRequired[int]
    per_replica: NotRequired[list[ReplicaResult]]
    load_balance: NotRequired[float | None]
    pins_wasted: NotRequired[int]
    pins_wasted_share: NotRequired[float | None]
    returned_share: NotRequired[float | None]
    miss_reasons: NotRequired[MissReasons]
    #: ``--backend vllm``: the backend, its scheduling, scheduler class, aborted calls
    #: and the plugin's counters
    backend: NotRequired[str]
    async_scheduling: NotRequired[bool]
    scheduler: NotRequired[str]
    aborted_calls: NotRequired[int]
    plugin_counters: NotRequired[dict[str, int]]
    #: ``--live``: True, and what the server said (counters, errors, warnings)
    live: NotRequired[bool]
    server: NotRequired[dict[str, Any]]


class TraceRef(TypedDict):
    path: str
    sha256: str
    programs: int
    calls: int


class ProfileRef(TypedDict):
    name: str
    path: str
    sha256: str


class ReplaySettings(TypedDict):
    """``replay.json``'s ``config``: the options the replay ran with."""

    #: the simulated engine (``replay.scheduler.SimSchedulerConfig``, field by field)
    engine: dict[str, Any]
    offload_tokens: int
    jps: float | None
    concurrency: int | None
    seed: int
    truncate: bool
    valve: str | None
    pin_cap: float | None
    static_ttl_s: float
    live: str | None
    trace_idle_gap_cap_seconds: float | None
    #: what the replayed clients tagged each call with (``replay.client_tags``)
    client_tags: str


class ReplayDoc(TypedDict):
    """``ttlctl replay --json``: what was replayed, how, and each policy's result."""

    ttlctl_version: str
    #: fast or vllm (None: a live run)
    backend: str | None
    vllm_version: str | None
    async_scheduling: bool
    trace: TraceRef
    profile: ProfileRef
    bundle: FileRef | None
    config: ReplaySettings
    results: list[PolicyResult]
    #: ``--replicas``: the router (name, settings with defaults filled in) and replicas
    fleet: NotRequired[FleetRouter]


class Replayed(Protocol):
    """What the figures are read from: :class:`replay.sim_outcome.Outcome` (the fast
    backend) or the vLLM backend's outcome. ``engine`` has ``stats``
    (``replay.scheduler.Stats``), ``config.block_size`` and ``timeline`` ((time, pinned
    blocks) at each change)."""

    @property
    def calls(self) -> Sequence[SimCallRecord]: ...
    @property
    def programs(self) -> Sequence[ProgramRun]: ...
    @property
    def rejected_calls(self) -> int: ...
    @property
    def truncated_calls(self) -> int: ...
    @property
    def end(self) -> float: ...
    @property
    def engine(self) -> Any: ...


def summarize(
    outcome: Replayed, policy: str, *, evaluation_only: bool, wall_s: float | None
) -> PolicyResult:
    """The result of ``policy``'s replay; ``wall_s``: its wall time (None: not timed)."""
    finished = [
        r for r in outcome.programs if r.done and not r.cut_short and r.last_finish is not None
    ]
    jct = np.array([r.last_finish - r.first_arrival for r in finished])  # type: ignore[operator]
    calls = outcome.calls
    ttft = np.array([c.first_token - c.arrival for c in calls])
    queue = np.array([c.admitted - c.arrival for c in calls])
    stats = outcome.engine.stats
    starts = [r.first_arrival for r in outcome.programs if r.first_arrival is not None]
    ends = [r.last_finish for r in outcome.programs if r.last_finish is not None]
    makespan = (max(ends) - min(starts)) if starts and ends else 0.0
    bs = outcome.engine.config.block_size
    return {
        "policy": policy,
        "programs": len(finished),
        "programs_cut_short": sum(r.cut_short for r in outcome.programs),
        "llm_calls": len(calls),
        "rejected_calls": outcome.rejected_calls,
        "truncated_calls": outcome.truncated_calls,
        "jct_mean_s": float(jct.mean()) if jct.size else None,
        "jct_p50_s": percentile(jct, 50),
        "jct_p95_s": percentile(jct, 95),
        "jct_p99_s": percentile(jct, 99),
        "makespan_s": makespan,
        "throughput_programs_per_s": len(finished) / makespan if makespan > 0 else None,
        "ttft_mean_s": float(ttft.mean()) if ttft.size else None,
        "ttft_p95_s": percentile(ttft, 95),
        "queue_mean_s": float(queue.mean()) if queue.size else None,
        "prefix_hit_rate": stats.hit_tokens / stats.prompt_tokens if stats.prompt_tokens else None,
        "offload_loaded_tokens": stats.loaded_tokens,
        "preemptions": stats.preemptions,
        "pinned_token_seconds": stats.pinned_block_seconds * bs,
        "pins": {
            "made": stats.pins_made,
            "hit": stats.pins_hit,
            "expired": stats.pins_expired,
            "released_under_pressure": stats.pins_released,
            "dropped": stats.pins_dropped,
            "held_at_end": stats.pins_held,
            "refused": stats.pins_refused,
        },
        "engine_steps": stats.steps,
        "engine_busy_s": stats.busy_s,
        "pinned_timeline": timeline(outcome, bs),
        "evaluation_only": evaluation_only,
        "wall_s": wall_s,
        "sim_calls_per_s": None if not wall_s else len(calls) / wall_s,
    }


def timeline(outcome: Replayed, block_size: int, points: int = 400) -> PinnedTimeline:
    """Pinned KV tokens over time, as a step function downsampled to ≤ ``points``
    (each kept sample is the maximum over its slice, so peaks survive)."""
    samples = outcome.engine.timeline
    if not samples:
        return {"t_s": [], "pinned_tokens": []}
    stride = max(1, cdiv(len(samples), points))
    t: list[float] = []
    v: list[float] = []
    for i in range(0, len(samples), stride):
        chunk = samples[i : i + stride]
        t.append(chunk[0][0])
        v.append(max(b for _, b in chunk) * block_size)
    t.append(outcome.end)
    v.append(samples[-1][1] * block_size)
    return {"t_s": t, "pinned_tokens": v}


def gap_closed(result: PolicyResult, vllm: PolicyResult, unlimited: PolicyResult) -> float | None:
    """Share of the mean-JCT gap from vLLM to unlimited KV that a policy closes (None:
    no gap to share, :func:`ttlctl.gap.closed`)."""
    share = gap.closed(
        vllm.get("jct_mean_s"), unlimited.get("jct_mean_s"), result.get("jct_mean_s")
    )
    return None if share is None else float(share)
