"""A live run's figures under the simulator's result keys (``replay.figures.summarize``).

JCT, TTFT and makespan come from the client's records; the prefix-hit rate,
preemptions and pins from the change of the server's own counters over the run;
pinned token-seconds and the pinned timeline from the sampled
``ttlctl:pinned_blocks`` gauge. What only a live run has sits under ``"server"``.
The simulator's engine-only keys (``queue_mean_s``, ``engine_steps``, …) are None.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import Any

from fitting.percentile import percentile
from replay.live.records import LiveCallRecord, ProgramRecord
from ttlctl.series import PINNED_BLOCKS
from ttlctl.server import prom
from ttlctl.server.facts import ServerInfo

Samples = Sequence[tuple[float, dict[str, float]]]


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(
    policy: str,
    records: Sequence[LiveCallRecord],
    programs: Sequence[ProgramRecord],
    info: ServerInfo,
    before: dict[str, float | None],
    after: dict[str, float | None],
    samples: Samples,
    *,
    wall_s: float,
    reset: bool,
    warnings_: Sequence[str] = (),
) -> dict[str, Any]:
    """The simulator's result keys (``replay.figures.summarize``) from a live run."""
    finished = [
        p
        for p in programs
        if p.done and not p.cut_short and p.first_send_s is not None and p.last_finish_s
    ]
    jct = [p.last_finish_s - p.first_send_s for p in finished]  # type: ignore[operator]
    ok = [r for r in records if r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    starts = [p.first_send_s for p in programs if p.first_send_s is not None]
    ends = [p.last_finish_s for p in programs if p.last_finish_s is not None]
    makespan = (max(ends) - min(starts)) if starts and ends else 0.0
    delta = prom.delta(before, after)
    queries, hits = delta["prefix_cache_queries"], delta["prefix_cache_hits"]
    preemptions = delta["preemptions"]
    return {
        "policy": policy,
        "live": True,
        "programs": len(finished),
        "programs_cut_short": sum(1 for p in programs if p.cut_short or not p.done),
        "llm_calls": len(ok),
        # the server refused them (HTTP 4xx), or they failed there (HTTP 5xx, a lost
        # connection, the run's time limit): either way the program stops there
        "rejected_calls": sum(1 for r in records if refused(r)),
        "failed_calls": sum(1 for r in records if not r.ok and not refused(r)),
        "truncated_calls": sum(1 for r in records if r.clipped),
        "jct_mean_s": _mean(jct),
        "jct_p50_s": percentile(jct, 50),
        "jct_p95_s": percentile(jct, 95),
        "jct_p99_s": percentile(jct, 99),
        "makespan_s": makespan,
        "throughput_programs_per_s": len(finished) / makespan if makespan > 0 else None,
        "ttft_mean_s": _mean(ttft),
        "ttft_p95_s": percentile(ttft, 95),
        "queue_mean_s": None,
        "prefix_hit_rate": hits / queries if queries and hits is not None else None,
        "offload_loaded_tokens": None,
        "preemptions": None if preemptions is None else int(preemptions),
        "pinned_token_seconds": _pinned_token_seconds(samples, info.block_size),
        "pins": _pins(delta) if info.ttl_metrics else None,
        "engine_steps": None,
        "engine_busy_s": None,
        "pinned_timeline": _timeline(samples, info.block_size),
        "evaluation_only": False,
        "wall_s": wall_s,
        "sim_calls_per_s": None,
        "server": _server(info, records, programs, samples, (before, after, delta), reset)
        | {"warnings": list(warnings_)},
    }


def refused(record: LiveCallRecord) -> bool:
    """Whether the server refused the call (an HTTP 4xx answer other than 408, a timeout,
    and 429, too many requests: both say "later", not "never"): it took the request for one
    it cannot serve, as the simulator's engine rejects a call too long for it."""
    status = record.http_status
    return status is not None and 400 <= status < 500 and status not in (408, 429)


def failures_warning(url: str, records: Sequence[LiveCallRecord], calls: int) -> str | None:
    """One line for the calls that did not end well (None: every call sent ended well):
    how many, the first error, and what it does to the figures."""
    bad = [r for r in records if not r.ok]
    if not bad:
        return None
    kinds = [
        f"{n:,} {what}"
        for n, what in (
            (sum(1 for r in bad if refused(r)), "refused by the server"),
            (sum(1 for r in bad if not refused(r)), "failed"),
        )
        if n
    ]
    first = (bad[0].error or "").removeprefix(f"{url}: ")  # the line names the server once
    return (
        f"{url}: {' and '.join(kinds)} of {calls:,} calls (first: {first}); their "
        "programs stop there and are left out of JCT (every error: the JSON's server.errors)"
    )


def _pins(delta: dict[str, float | None]) -> dict[str, int] | None:
    """The TTL scheduler's pin counts over the run (None: the server has no such counter)."""
    if delta["pins_made"] is None:
        return None

    def n(key: str) -> int:
        return int(delta[key] or 0)

    return {
        "made": n("pins_made"),
        "hit": n("pins_hit"),
        "expired": n("pins_expired"),
        "released_under_pressure": n("pins_released"),
        "dropped": n("pins_dropped"),
        "refused": n("pins_refused"),
        "deferred": n("pins_deferred"),
    }


Counters = dict[str, float | None]


def _server(
    info: ServerInfo,
    records: Sequence[LiveCallRecord],
    programs: Sequence[ProgramRecord],
    samples: Samples,
    counts: tuple[Counters, Counters, Counters],
    reset: bool,
) -> dict[str, Any]:
    """What only a live run has: the server, its counters (before, after, their change),
    the client's hit rate, the gauges, late starts and errors."""
    before, after, delta = counts
    ok = [r for r in records if r.ok]
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    usage = [s[prom.KV_USAGE] for _, s in samples if prom.KV_USAGE in s]
    waiting = [s[prom.WAITING] for _, s in samples if prom.WAITING in s]
    return {
        "url": info.url,
        "model": info.model,
        "version": info.version,
        "info": info.to_json(),
        "prefix_cache_reset": reset,
        "counters_before": before,
        "counters_after": after,
        "deltas": delta,
        "client_prompt_tokens": prompt_tokens,
        "client_cached_tokens": sum(cached) if cached else None,
        "client_hit_rate": sum(cached) / prompt_tokens if cached and prompt_tokens else None,
        "calls_with_cached_tokens": len(cached),
        "kv_cache_usage_max": max(usage) if usage else None,
        "kv_cache_usage_mean": _mean(usage),
        "num_requests_waiting_max": max(waiting) if waiting else None,
        "metrics_samples": len(samples),
        "late_starts": sum(1 for p in programs if p.late_start_s > 0.25),
        "errors": sorted({r.error for r in records if r.error})[:10],
    }


def _pinned_token_seconds(samples: Samples, block_size: int | None) -> float | None:
    """∫ pinned tokens dt from the sampled ``ttlctl:pinned_blocks`` gauge (None: no gauge)."""
    points = [(t, s[PINNED_BLOCKS]) for t, s in samples if PINNED_BLOCKS in s]
    if not points or not block_size:
        return None
    total = 0.0
    for (t0, b0), (t1, _) in itertools.pairwise(points):
        total += b0 * block_size * (t1 - t0)
    return total


def _timeline(samples: Samples, block_size: int | None) -> dict[str, list[float]]:
    points = [(t, s[PINNED_BLOCKS]) for t, s in samples if PINNED_BLOCKS in s]
    if not points or not block_size:
        return {"t_s": [], "pinned_tokens": []}
    t0 = points[0][0]
    return {
        "t_s": [t - t0 for t, _ in points],
        "pinned_tokens": [b * block_size for _, b in points],
    }
