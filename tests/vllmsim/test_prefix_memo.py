"""The plugin's prefix-hit memo changes nothing vLLM does (``ttlctl.engine.hitmemo``).

Each workload is replayed twice on the vLLM backend with the plugin, the memo on and
off (``TTLCTL_PREFIX_MEMO=0``), and the two runs must be the same: every step's
scheduler output (requests, token counts, block ids handed out, preemptions,
finishes), every call's record (admitted step, prefix hit, preemptions, finish),
the plugin's counters, vLLM's prefix-cache stats (turned on for the test), the block
pool after every step (a digest of each block's references and cache hash: both runs
are in one process, and a full copy per step of a large pool does not fit in memory)
and at the end (the
free queue's order and the cache map, duplicates in order too). With the memo on,
each of its answers is also checked against vLLM's own lookup at the time it is given.
Random small workloads with tight memory (hypothesis, sync and async, aborts), and a
contended slice of the SWE-like load where the ``stall-only`` valve keeps long heads
waiting (the case the memo is for).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from vllm.v1.metrics.stats import PrefixCacheStats

import replay.vllmsim.run as vllm_run
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.vllmsim.build import Built
from replay.workload import Workload, from_frame
from tests.vllmsim.drive import COST
from tests.vllmsim.stress import Checker, setup
from tests.vllmsim.test_stress import cases
from ttlctl.engine.hitmemo import ENV

#: the plugin's program book stays within 4 programs (its server setting)
PLUGIN_ENV = {"TTLCTL_MAX_PROGRAMS": "4"}


def pool_state(pool: Any, *, full: bool) -> Any:
    """Each block's references and cache hash; with ``full``, the free queue's order and
    the cache map (every hash with its blocks, in the map's order)."""
    blocks = tuple((b.ref_cnt, b.block_hash, b.block_hash_num_tokens) for b in pool.blocks)
    if not full:
        return blocks
    free = tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks())
    cache = []
    cached = pool.cached_block_hash_to_block
    # 0.32 and 0.33 map a hash to a block or a dict of them, 0.34 to a block id (several
    # kept apart, in ``_dup_ids``)
    several = getattr(cached, "_dup_ids", {})
    for key, found in cached._cache.items():
        if key in several:
            ids = tuple(several[key])
        elif isinstance(found, int):
            ids = (found,)
        else:
            ids = (found.block_id,) if hasattr(found, "block_id") else tuple(found)
        cache.append((key, ids))
    return blocks, free, tuple(cache)


def step_of(output: Any) -> Any:
    cached = output.scheduled_cached_reqs
    return (
        tuple(sorted(output.num_scheduled_tokens.items())),
        tuple((r.req_id, r.block_ids, r.num_computed_tokens) for r in output.scheduled_new_reqs),
        tuple(cached.req_ids),
        tuple(cached.new_block_ids),
        tuple(cached.num_computed_tokens),
        tuple(sorted(getattr(cached, "resumed_req_ids", ()))),  # (not in 0.34)
        tuple(sorted(output.preempted_req_ids or ())),
        tuple(sorted(output.finished_req_ids)),
    )


@dataclass
class Recorder(Checker):
    """The stress tests' checker (aborts, invariants) that also records every step."""

    steps: list[Any] = field(default_factory=list)

    def scheduled(self, harness: Any, output: Any) -> None:
        super().scheduled(harness, output)
        pool = harness.scheduler.kv_cache_manager.block_pool
        self.steps.append((step_of(output), hash(pool_state(pool, full=False))))

    def updated(self, harness: Any) -> None:
        super().updated(harness)
        pool = harness.scheduler.kv_cache_manager.block_pool
        self.steps.append(hash(pool_state(pool, full=False)))


def _checked(memo: Any) -> Any:
    """The memo's lookup, each answer compared with vLLM's own on the same state."""
    mine = memo.get_computed_blocks

    def lookup(request: Any, *args: Any, **kwargs: Any) -> Any:
        got = mine(request, *args, **kwargs)
        want = memo._lookup(request, *args, **kwargs)
        assert got[1:] == want[1:]
        assert [len(g) for g in got[0].blocks] == [len(w) for w in want[0].blocks]
        for ours, theirs in zip(got[0].blocks, want[0].blocks, strict=True):
            assert all(a is b for a, b in zip(ours, theirs, strict=True))
        return got

    return lookup


@dataclass
class Run:
    outcome: Any
    recorder: Recorder
    stats: dict[str, Any]
    pool: Any
    memo: dict[str, int] | None


def replay(
    monkeypatch: pytest.MonkeyPatch,
    work: Workload,
    spec: PolicySpec,
    config: ReplayConfig,
    load: Load,
    *,
    memo: bool,
    async_scheduling: bool,
    aborts: frozenset[tuple[str, int]] = frozenset(),
    untagged: frozenset[str] = frozenset(),
) -> Run:
    built_ones: list[Built] = []
    real_build = vllm_run.build

    def build(*args: Any, **kwargs: Any) -> Built:
        built = real_build(*args, **kwargs)
        manager = built.scheduler.kv_cache_manager
        manager.log_stats = True  # vLLM's prefix-cache stats, as with --disable-log-stats off
        manager.prefix_cache_stats = PrefixCacheStats()
        if built.scheduler.ttl_memo is not None:
            manager.get_computed_blocks = _checked(built.scheduler.ttl_memo)
        built_ones.append(built)
        return built

    with monkeypatch.context() as patch:
        patch.setattr(vllm_run, "build", build)
        if memo:
            patch.delenv(ENV, raising=False)
        else:
            patch.setenv(ENV, "0")
        recorder = Recorder(aborts=aborts)
        outcome = vllm_run.run(
            work,
            spec,
            COST,
            config,
            load,
            async_scheduling=async_scheduling,
            untagged_last=untagged,
            observer=recorder,
            plugin_env=PLUGIN_ENV,
        )
    (built,) = built_ones
    sched = built.scheduler
    assert (sched.ttl_memo is not None) == memo
    manager = sched.kv_cache_manager
    return Run(
        outcome,
        recorder,
        dataclasses.asdict(manager.prefix_cache_stats),
        pool_state(manager.block_pool, full=True),
        sched.ttl_memo.stats.snapshot() if sched.ttl_memo is not None else None,
    )


def assert_same(on: Run, off: Run) -> None:
    assert on.recorder.steps == off.recorder.steps
    assert on.outcome.calls == off.outcome.calls
    assert on.outcome.engine.plugin_counters == off.outcome.engine.plugin_counters
    assert on.outcome.engine.stats == off.outcome.engine.stats
    assert on.outcome.end == off.outcome.end
    assert on.stats == off.stats
    assert on.pool == off.pool
    assert on.recorder.seen == off.recorder.seen


def test_random_tight_workloads_replay_alike_with_and_without_the_memo() -> None:
    """Random tight workloads replay alike with and without the memo, and the memo was
    used: not a vacuous comparison. (These small workloads seldom evict a waiting head's
    hit; the SWE slice below does. A hit extended while its request waits is rare in
    closed-loop programs: tests/engine/test_hitmemo.py makes it.)"""
    seen: dict[str, int] = {}

    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(case=cases())
    def check(case: dict[str, Any]) -> None:
        work, spec, config, load = setup(case)
        async_scheduling = len(case["programs"]) % 2 == 0
        with pytest.MonkeyPatch.context() as monkeypatch:
            runs = [
                replay(
                    monkeypatch,
                    work,
                    spec,
                    config,
                    load,
                    memo=memo,
                    async_scheduling=async_scheduling,
                    aborts=case["aborts"],
                    untagged=case["untagged"],
                )
                for memo in (True, False)
            ]
        assert_same(*runs)
        assert runs[0].memo is not None
        for key, value in runs[0].memo.items():
            seen[key] = seen.get(key, 0) + value

    check()
    assert seen.get("reused", 0) > 0, seen


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_contended_swe_slice_replays_alike(
    monkeypatch: pytest.MonkeyPatch, async_scheduling: bool
) -> None:
    """SWE-like programs (long, growing contexts) in a cache far too small for them, the
    ``stall-only`` valve: heads wait behind pins for many steps and are looked up each
    time. The memo answers most of those lookups, and nothing vLLM does changes."""
    work = from_frame(synth("swe-bench", 4, 1))
    spec = PolicySpec("continuum", valve="stall-only")
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=24_000))
    load = Load(concurrency=4)
    on, off = (
        replay(monkeypatch, work, spec, config, load, memo=m, async_scheduling=async_scheduling)
        for m in (True, False)
    )
    assert_same(on, off)
    assert on.memo is not None
    assert on.memo["reused"] > on.memo["lookups"] / 2 and on.memo["stale"] > 0, on.memo
    # (small enough for the suite: this slice does not preempt; preemptions under the memo
    # are checked by tests/engine/test_hitmemo.py's random walk on vLLM's own manager)
    assert on.stats["hits"] > 0
