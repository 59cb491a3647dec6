"""Per-policy figures of a replay: the result keys ``ttlctl replay --json`` writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from fitting.percentile import percentile
from replay.sim import ProgramRun, SimCallRecord


class Replayed(Protocol):
    """What the figures are read from: :class:`replay.sim.Outcome` (the fast backend)
    or the vLLM backend's outcome. ``engine`` has ``stats`` (``replay.scheduler.Stats``),
    ``config.block_size`` and ``timeline`` ((time, pinned blocks) at each change)."""

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


def summarize(outcome: Replayed, policy: str) -> dict[str, Any]:
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
        },
        "engine_steps": stats.steps,
        "engine_busy_s": stats.busy_s,
        "pinned_timeline": timeline(outcome, bs),
    }


def timeline(outcome: Replayed, block_size: int, points: int = 400) -> dict[str, list[float]]:
    """Pinned KV tokens over time, as a step function downsampled to ≤ ``points``
    (each kept sample is the maximum over its slice, so peaks survive)."""
    samples = outcome.engine.timeline
    if not samples:
        return {"t_s": [], "pinned_tokens": []}
    stride = max(1, -(-len(samples) // points))
    t: list[float] = []
    v: list[float] = []
    for i in range(0, len(samples), stride):
        chunk = samples[i : i + stride]
        t.append(chunk[0][0])
        v.append(max(b for _, b in chunk) * block_size)
    t.append(outcome.end)
    v.append(samples[-1][1] * block_size)
    return {"t_s": t, "pinned_tokens": v}


def gap_closed(
    result: dict[str, Any], vllm: dict[str, Any], unlimited: dict[str, Any]
) -> float | None:
    """Share of the mean-JCT gap from vLLM to unlimited KV that a policy closes."""
    a, b, x = vllm.get("jct_mean_s"), unlimited.get("jct_mean_s"), result.get("jct_mean_s")
    if a is None or b is None or x is None or abs(a - b) < 1e-12:
        return None
    return float((a - x) / (a - b))
