"""The vLLM backend's harness: what it maps onto vLLM's engine core, checked against the fast
backend where the two must agree exactly, and against vLLM's own counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from profiles.cost import ProfileCostModel, rebuild_pricer
from profiles.shipped import resolve
from replay.policies import PolicySpec, make
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.synth import synth
from replay.vllmsim.run import VllmRunner, record, run
from replay.workload import AgentProgram, Call, Workload, from_frame

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])


@pytest.fixture(scope="module")
def swe() -> Workload:
    return from_frame(synth("swe-bench", 5, 3))


def _fast(work: Workload, spec: PolicySpec, config: ReplayConfig) -> Any:
    rebuild = rebuild_pricer(COST, config.engine.max_num_batched_tokens)
    return simulate(work, make(spec, {}, rebuild), COST, config)


@pytest.mark.parametrize("policy", ["vllm", "program-fcfs", "static-ttl", "continuum"])
def test_with_ample_memory_every_call_is_as_in_the_fast_backend(swe: Workload, policy: str) -> None:
    """Nothing is evicted or preempted: vLLM's scheduler, the stand-in executor and the
    virtual clock give each call the fast backend's admission, first token, finish and
    prefix hit exactly (the same cost model prices the same steps)."""
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=2_000_000), concurrency=3)
    fast = _fast(swe, PolicySpec(policy), config)
    got = run(swe, PolicySpec(policy), COST, config, Load(concurrency=3))
    assert len(got.calls) == len(fast.calls) == swe.calls
    ours = {(c.program, c.turn): c for c in got.calls}
    for c in fast.calls:
        v = ours[(c.program, c.turn)]
        assert (v.hit_tokens, v.preemptions, v.prompt, v.output) == (
            c.hit_tokens,
            c.preemptions,
            c.prompt,
            c.output,
        )
        for name in ("arrival", "admitted", "first_token", "finish"):
            assert getattr(v, name) == pytest.approx(getattr(c, name), rel=1e-12, abs=1e-9)
    assert sum(c.hit_tokens for c in got.calls) > 0
    # the engine's figures as the fast backend's: its steps, busy time and longest step
    ours_stats, fast_stats = got.engine.stats, fast.engine.stats
    assert ours_stats.steps == fast_stats.steps
    assert ours_stats.busy_s == pytest.approx(fast_stats.busy_s, rel=1e-9)
    assert ours_stats.longest_step_s == pytest.approx(fast_stats.longest_step_s, rel=1e-12)
    assert ours_stats.longest_step_s > 0


def test_records_agree_with_vllms_own_counts(swe: Workload) -> None:
    """A contended run: per-call records and the engine figures are consistent with each
    other and with what vLLM and the plugin counted."""
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=110_000))  # two preemptions
    spec = PolicySpec("continuum", valve="stall-only")
    got = run(swe, spec, COST, config, Load(concurrency=5))
    stats = got.engine.stats
    assert len(got.calls) == swe.calls and got.scheduler == "TTLScheduler"
    assert stats.preemptions == sum(c.preemptions for c in got.calls) > 0
    assert stats.hit_tokens == sum(min(c.hit_tokens, c.prompt) for c in got.calls)
    for c in got.calls:
        assert c.hit_tokens % 16 == 0 and c.hit_tokens < c.prompt
        assert 0 <= c.admitted_step <= c.finish_step < stats.steps
        assert c.arrival <= c.reached <= c.admitted <= c.first_token <= c.finish
    counters = got.engine.plugin_counters
    ended = counters["hit"] + counters["expired"] + counters["released"] + counters["dropped"]
    assert counters["made"] == ended + counters["pinned_programs"] > 0
    result = record(got, spec.name)
    fast = run_one(swe, spec, COST, config, Load(concurrency=5))
    assert set(fast) <= set(result)
    assert result["backend"] == "vllm" and result["llm_calls"] == swe.calls
    assert result["pins"]["made"] == counters["made"]


@dataclass
class _Order:
    """Records the order of the harness's calls into vLLM's scheduler."""

    calls: list[str] = field(default_factory=list)

    def scheduled(self, harness: Any, output: Any) -> None:
        self.calls.append("S" if output.total_num_scheduled_tokens else "s")

    def updated(self, harness: Any) -> None:
        self.calls.append("U")


def test_sync_and_async_step_loops() -> None:
    """The engine core's loops, call by call (S: a step scheduled, s: an empty one, U: an
    output applied). Synchronous (``EngineCore.step``): schedule, update. Async
    (``step_with_batch_queue``, two batches): step 2 is scheduled before step 1's output is
    applied, and from then on each output is applied with the next step already
    scheduled. The empty steps at the end are vLLM telling its workers which requests
    finished. Two calls, six and three output tokens, finish at the same steps either way."""
    work = Workload(
        (
            AgentProgram("a", 0.0, (Call(100, 6, 0, None, 0.0),)),
            AgentProgram("b", 0.0, (Call(40, 3, 0, None, 0.0),)),
        )
    )
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=4096))
    sync, asyn = _Order(), _Order()
    a = run(work, PolicySpec("vllm"), COST, config, Load(), observer=sync)
    b = run(work, PolicySpec("vllm"), COST, config, Load(), async_scheduling=True, observer=asyn)
    assert a.scheduler == "Scheduler" and b.scheduler == "AsyncScheduler"
    assert "".join(sync.calls) == "SU" * 6 + "sU"
    assert "".join(asyn.calls) == "SS" + "US" * 4 + "UsUsUU"
    assert [(c.program, c.admitted_step, c.finish_step) for c in a.calls] == [
        ("b", 0, 2),
        ("a", 0, 5),
    ]
    assert [(c.finish, c.finish_step) for c in a.calls] == [
        (c.finish, c.finish_step) for c in b.calls
    ]


def _long_call_workload() -> Workload:
    calls = (Call(500, 20, 0, "bash", 0.5), Call(5000, 20, 520, None, 0.0))
    return Workload(
        (
            AgentProgram("a", 0.0, calls),
            AgentProgram("b", 0.1, (Call(300, 10, 0, None, 0.0),)),
        )
    )


@pytest.mark.parametrize("truncate", [False, True])
def test_rejected_and_truncated_calls_as_in_the_fast_backend(truncate: bool) -> None:
    engine = SimSchedulerConfig(kv_tokens=2048, block_size=16)
    config = ReplayConfig(engine=engine, truncate=truncate)
    work = _long_call_workload()
    fast = run_one(work, PolicySpec("vllm"), COST, config, Load())
    ours = VllmRunner()(work, PolicySpec("vllm"), COST, config, Load())
    for key in ("llm_calls", "rejected_calls", "truncated_calls", "programs", "programs_cut_short"):
        assert ours[key] == fast[key], key
    assert ours["rejected_calls"] == (0 if truncate else 1)


def test_unlimited_kv_never_preempts(swe: Workload) -> None:
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=60_000))
    got = VllmRunner(async_scheduling=True)(
        swe, PolicySpec("unlimited-kv"), COST, config, Load(concurrency=5)
    )
    assert got["preemptions"] == 0 and got["llm_calls"] == swe.calls
    assert got["evaluation_only"] is True and got["async_scheduling"] is True


def test_the_plugins_server_settings_in_the_shell_do_not_change_a_replay(
    swe: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a ``TTLCTL_MAX_PROGRAMS`` left in the user's shell from serving reached
    the plugin a ``--backend vllm`` replay builds (the program book held one program: other
    pins, other JCTs), unrecorded; the fast backend ignored it."""
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=60_000))
    spec = PolicySpec("static-ttl", ttl_s=3.0)
    load = Load(concurrency=5)
    clean = VllmRunner()(swe, spec, COST, config, load)
    for name, value in (
        ("TTLCTL_MAX_PROGRAMS", "1"),
        ("TTLCTL_BUNDLE_CHECK_S", "0"),
        ("TTLCTL_REPLICA", "r9"),
    ):
        monkeypatch.setenv(name, value)
    shell = VllmRunner()(swe, spec, COST, config, load)
    for key in ("jct_mean_s", "prefix_hit_rate", "pinned_token_seconds", "pins"):
        assert shell[key] == clean[key], key
    assert clean["pins"]["made"] > 0
