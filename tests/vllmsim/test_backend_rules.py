"""The vLLM backend's own rules, one at a time: what a replay's record counts, the bundle a
replay policy runs with, and the plugin's counters as the fast backend's figures."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from fitting.policy_params import PolicyParams
from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.run import FleetSpec
from replay.policies import PolicySpec
from replay.policies.simple import STATIC_TTL_VALVE
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig, Stats
from replay.sim import ReplayConfig
from replay.vllmsim.backend import BackendError
from replay.vllmsim.bundles import bundle_for
from replay.vllmsim.fleet import simulate
from replay.vllmsim.outcome import put_plugin_counters
from replay.vllmsim.run import VllmRunner, record, run
from replay.workload import AgentProgram, Call, Workload
from tests.vllmsim.drive import AbortFirst
from tests.vllmsim.stress import workload

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])


def test_the_plugins_counters_become_the_fast_backends_pin_figures() -> None:
    """``put_plugin_counters``: the plugin's pins made, hit, expired, released, dropped,
    held (``pinned_programs``) and refused, each into the figure of its own name."""
    names = ("made", "hit", "expired", "released", "dropped", "pinned_programs", "refused")
    counters = {name: 10 + i for i, name in enumerate(names)}
    stats = Stats()
    put_plugin_counters(stats, counters)
    got = (
        stats.pins_made,
        stats.pins_hit,
        stats.pins_expired,
        stats.pins_released,
        stats.pins_dropped,
        stats.pins_held,
        stats.pins_refused,
    )
    assert got == tuple(counters[name] for name in names)


def _params(spec: PolicySpec) -> PolicyParams:
    doc = bundle_for(spec, COST)
    assert doc is not None
    return PolicyParams.from_json(doc["policy"])


def test_static_ttl_bundle_pins_as_the_fast_backends_static_ttl() -> None:
    """static-ttl: a cold start that never ends at τ, with the fast backend's defaults
    (valve ``head``, pin cap 1.0) unless asked otherwise."""
    params = _params(PolicySpec("static-ttl", ttl_s=3.5))
    assert params.cold_start_ttl_s == 3.5 and params.pins
    assert (params.valve, params.pin_cap) == (STATIC_TTL_VALVE, 1.0)
    params = _params(PolicySpec("static-ttl", ttl_s=3.5, valve="stall-only", pin_cap=0.25))
    assert (params.valve, params.pin_cap) == ("stall-only", 0.25)


def test_continuum_bundle_takes_the_valve_and_pin_cap_asked() -> None:
    """continuum: ``--valve`` and ``--pin-cap`` replace the policy's, each on its own."""
    cold = _params(PolicySpec("continuum"))
    assert cold == PolicyParams()
    assert _params(PolicySpec("continuum", pin_cap=0.3)) == PolicyParams(pin_cap=0.3)
    assert _params(PolicySpec("continuum", valve="head")) == PolicyParams(valve="head")


def test_program_fcfs_bundle_pins_nothing() -> None:
    assert _params(PolicySpec("program-fcfs")).pins is False
    assert bundle_for(PolicySpec("vllm"), COST) is None
    assert bundle_for(PolicySpec("unlimited-kv"), COST) is None


def test_a_program_refused_at_its_first_call_has_every_call_rejected() -> None:
    """A call the engine refuses stops its program: that call and every later one are
    rejected, as in the fast backend (three calls here, not one)."""
    long_calls = (
        Call(5000, 20, 0, "bash", 0.5),
        Call(5100, 20, 5020, "bash", 0.5),
        Call(5200, 20, 5140, None, 0.0),
    )
    work = Workload(
        (
            AgentProgram("a", 0.0, long_calls),
            AgentProgram("b", 0.1, (Call(300, 10, 0, None, 0.0),)),
        )
    )
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=2048, block_size=16))
    fast = run_one(work, PolicySpec("vllm"), COST, config, Load())
    ours = VllmRunner()(work, PolicySpec("vllm"), COST, config, Load())
    for key in ("llm_calls", "rejected_calls", "programs_cut_short"):
        assert ours[key] == fast[key], key
    assert (ours["rejected_calls"], ours["programs_cut_short"]) == (3, 1)


def test_the_record_counts_the_aborted_calls() -> None:
    work = workload([[(64, 8, 0.5)] * 3, [(64, 8, 0.5)] * 2])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000, block_size=16))
    got = run(work, PolicySpec("vllm"), COST, config, Load(), observer=AbortFirst())
    result = record(got, "vllm")
    assert result["aborted_calls"] == got.aborted_calls == 1
    assert result["llm_calls"] == 2 and result["programs_cut_short"] == 1


def test_async_scheduling_reaches_the_fast_runner() -> None:
    """``--backend fast --async-scheduling`` runs the fast backend's model of async
    scheduling (``backend.runner``): a contended replay's times change with it."""
    from replay.vllmsim.backend import runner
    from tests.replay.test_equivalence import workload as contended

    engine = SimSchedulerConfig(kv_tokens=16 * 60, max_num_batched_tokens=256, max_num_seqs=8)
    config = ReplayConfig(engine=engine, truncate=True)
    work, spec, load = contended(0), PolicySpec("vllm"), Load(concurrency=6)
    sync = runner("fast")(work, spec, COST, config, load, timed=False)
    asyn = runner("fast", async_scheduling=True)(work, spec, COST, config, load, timed=False)
    model = run_one(work, spec, COST, replace(config, async_scheduling=True), load, timed=False)
    assert asyn["jct_mean_s"] == model["jct_mean_s"] != sync["jct_mean_s"]


def test_a_prompt_has_the_calls_length_whatever_it_repeats() -> None:
    """``Streams.prompt``: the call's ``length`` tokens, even when the shared blocks or the
    reuse asked for cover more than that."""
    from replay.vllmsim.tokens import Streams

    s = Streams()
    first = s.prompt("p", 0, 40)
    s.finished("p", first + s.fresh(10))
    assert s.prompt("p", 50, 30) == first[:30]  # reused past the length: the length
    assert len(s.prompt("q", 0, 20, ("k1", "k2"), block_size=16)) == 20  # 2 keys, 20 tokens


def test_streams_share_blocks_by_key_and_reuse_only_the_same_keys() -> None:
    """Every program whose prompt starts with the same keys sends the same ids; the rest
    are fresh ids that occur nowhere else; a program's stream is repeated only when its
    previous call had the same keys, and not after it is forgotten."""
    from replay.vllmsim.tokens import FIRST_ID, Streams

    s = Streams()
    a = s.prompt("a", 0, 40, ("k",), block_size=16)
    b = s.prompt("b", 0, 40, ("k",), block_size=16)
    assert a[:16] == b[:16] and not set(a[16:]) & set(b)
    assert min(a + b) >= FIRST_ID and len(set(a) | set(b)) == 16 + 24 + 24
    stream = a + s.fresh(8)  # prompt + output
    s.finished("a", stream)
    again = s.prompt("a", 48, 60, ("k",), block_size=16)
    assert again[:48] == stream and not set(again[48:]) & set(a + b + stream)
    s.finished("a", again)
    other = s.prompt("a", 60, 70, ("j",), block_size=16)  # other keys: nothing repeated
    assert not set(other[16:]) & set(again)
    s.finished("a", other)
    unshared = s.prompt("a", 70, 80)  # no keys now, the previous call had some
    assert not set(unshared) & set(other)
    plain = s.prompt("c", 0, 30)
    s.finished("c", plain)
    s.forget("c")
    assert not set(s.prompt("c", 30, 40)) & set(plain)


@dataclass
class _Steps:
    """Counts the harness's ``schedule()`` and ``update_from_output()`` calls."""

    schedules: int = 0
    updates: int = 0

    def scheduled(self, harness: Any, output: Any) -> None:
        self.schedules += 1

    def updated(self, harness: Any) -> None:
        self.updates += 1


def test_timed_calls_time_each_call_and_each_steps_lookups() -> None:
    """``timed_calls``: one entry per ``schedule()`` and per ``update_from_output()``; the
    step's virtual price (their sum the engine's busy seconds); and the prefix-cache
    lookups of each ``schedule()`` alone: a call's first step looks it up, its decode
    steps (nothing waiting) spend exactly 0 s there."""
    work = Workload((AgentProgram("a", 0.0, (Call(40, 6, 0, None, 0.0),)),))
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=4096, block_size=16))
    steps = _Steps()
    got = run(work, PolicySpec("vllm"), COST, config, Load(), observer=steps, timed_calls=True)
    t = got.timings
    assert t is not None and steps.schedules == 7 == steps.updates  # 6 steps, 1 empty
    for series in (t.schedule_s, t.schedule_cpu_s, t.step_s, t.lookup_s):
        assert len(series) == steps.schedules
    assert len(t.update_s) == len(t.update_cpu_s) == steps.updates
    assert sum(t.step_s) == pytest.approx(got.engine.stats.busy_s) and t.step_s[-1] == 0.0
    assert 0 < t.lookup_s[0] <= t.schedule_s[0]
    assert t.lookup_s[1:] == [0.0] * 6


def test_an_untagged_last_call_only_changes_the_last_call() -> None:
    """``call_request(untagged_last=True)``: the last call says no ``is_last`` and names
    the tool ``unknown``; a call that is not the last is tagged as any other."""
    from replay.client_tags import FULL
    from replay.vllmsim.sent_call import call_request

    def xargs(tool: str | None, *, is_last: bool, untagged_last: bool) -> Any:
        call = Call(32, 4, 0, tool, 0.0)
        request = call_request(
            "0",
            list(range(1000, 1032)),
            call,
            "p",
            is_last=is_last,
            untagged_last=untagged_last,
            tags=FULL,
            sent=1.5,
            hasher=lambda r: [],
        )
        assert request.arrival_time == 1.5 and request.sampling_params.max_tokens == 4
        return request.sampling_params.extra_args

    last = xargs(None, is_last=True, untagged_last=True)
    assert last == {"program_id": "p", "is_last": 0, "tool": "unknown"}
    assert xargs("bash", is_last=True, untagged_last=True)["tool"] == "bash"
    for tool in (None, "bash"):
        assert xargs(tool, is_last=False, untagged_last=True) == xargs(
            tool, is_last=False, untagged_last=False
        )
    assert xargs(None, is_last=False, untagged_last=False) == {"program_id": "p", "is_last": 0}


def test_progress_is_told_at_every_finished_call_of_a_small_trace() -> None:
    """``replay.progress.CallTally``: a trace of fewer than ``TELLS`` calls is told at every
    call finished, the count rising by one each time to the trace's calls."""
    work = workload([[(64, 8, 0.5)] * 3, [(64, 8, 0.5)] * 3])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000, block_size=16))
    told: list[tuple[int, int]] = []
    run(work, PolicySpec("vllm"), COST, config, Load(), progress=lambda d, t: told.append((d, t)))
    assert told == [(n, 6) for n in range(1, 7)]


def test_sends_come_by_time_then_a_send_before_an_abort_then_in_order() -> None:
    """``Sends``: in order of time, then kind (a send before an abort at the same time),
    then sequence; nothing due before its time."""
    from replay.vllmsim.sends import ABORT, ARRIVAL, Sends

    sends = Sends()
    sends.push(1.0, ABORT, "abort-1")
    sends.push(1.0, ARRIVAL, "send-1")
    sends.push(0.5, ABORT, "abort-0.5")
    sends.push(1.0, ARRIVAL, "send-2")
    assert sends.next_at() == 0.5 and sends.due(0.4) is None
    got = []
    while (event := sends.due(1.0)) is not None:
        got.append(event[2])
    assert got == ["abort-0.5", "send-1", "send-2", "abort-1"]


@dataclass
class _AbortWhenScheduled:
    """Aborts program p0's first call in the ``schedule()`` that first runs it, and
    notes every request each later ``schedule()`` runs."""

    rid: str | None = None
    later: list[str] = field(default_factory=list)

    def scheduled(self, harness: Any, output: Any) -> None:
        if self.rid is not None:
            self.later += list(output.num_scheduled_tokens)
            return
        for rid in output.num_scheduled_tokens:
            call = harness.calls[rid]
            if (call.run.program.program_id, call.turn) == ("p0", 0):
                self.rid = rid
                harness.abort(rid)

    def updated(self, harness: Any) -> None:
        pass


def test_an_abort_reaches_the_scheduler_before_its_next_schedule_under_async() -> None:
    """Async scheduling schedules step N+1 before step N's output is applied; the engine
    core reads its input queue in between, so a call aborted at a step boundary is not in
    the next step vLLM schedules (``BatchQueue.turn``'s ``between``)."""
    work = workload([[(64, 8, 0.5)] * 2, [(64, 8, 0.5)] * 2])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000, block_size=16))
    seen = _AbortWhenScheduled()
    got = run(work, PolicySpec("vllm"), COST, config, Load(), async_scheduling=True, observer=seen)
    assert got.aborted_calls == 1 and seen.rid is not None
    assert seen.later and seen.rid not in seen.later


def test_with_a_concurrency_cap_a_program_starts_when_one_ends() -> None:
    """``Sends.start``: with a cap, the first ``concurrency`` programs start at 0 and each of
    the others when one ends (its run's ``start``, as the fast backend's runs say)."""
    work = workload([[(64, 8, 0.5)] * 2 for _ in range(3)])
    for program in work.programs:
        assert program.start_s == 0.0
    work = Workload(tuple(replace(p, start_s=4.0 + i) for i, p in enumerate(work.programs)))
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000, block_size=16))
    got = run(work, PolicySpec("vllm"), COST, config, Load(concurrency=1))
    runs = got.programs
    assert [r.start for r in runs] == [0.0, runs[0].last_finish, runs[1].last_finish]
    assert [r.first_arrival for r in runs] == [r.start for r in runs]


@dataclass
class _OutputIds:
    """Checks, after each output applied, that every live call's output so far is its own
    output ids in order (the stand-in executor's samples)."""

    checked: int = 0

    def scheduled(self, harness: Any, output: Any) -> None:
        pass

    def updated(self, harness: Any) -> None:
        for entry in harness.calls.values():
            got = list(entry.request.output_token_ids)
            assert got == entry.outputs[: len(got)]
            self.checked += len(got)


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_each_call_samples_its_own_output_ids_in_order(async_scheduling: bool) -> None:
    """``executor.execute``: a step that reaches the end of a request's known tokens
    samples the call's next output id (index ``c + n − prompt``), never a filler."""
    work = workload([[(64, 8, 0.0)] * 2, [(40, 5, 0.0)] * 2])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000, block_size=16))
    seen = _OutputIds()
    run(
        work,
        PolicySpec("vllm"),
        COST,
        config,
        Load(),
        observer=seen,
        async_scheduling=async_scheduling,
    )
    assert seen.checked > 10


def test_a_call_of_no_output_tokens_is_refused_by_name_where_the_fast_backend_runs_it() -> None:
    """vLLM serves at least one output token (``SamplingParams`` refuses ``max_tokens`` 0):
    a workload built in code with such a call is refused before vLLM is built, one line
    naming the program and turn, on one engine and on a fleet; the fast backend runs it."""
    calls = (Call(40, 6, 0, "bash", 0.5), Call(60, 0, 46, None, 0.0))
    work = Workload(
        (AgentProgram("a", 0.0, (Call(40, 6, 0, None, 0.0),)), AgentProgram("z", 0.1, calls))
    )
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 64))
    spec, load = PolicySpec("vllm"), Load(concurrency=2)
    with pytest.raises(BackendError, match=r"^program z turn 1 asks for 0 output tokens"):
        run(work, spec, COST, config, load)
    with pytest.raises(BackendError, match=r"^program z turn 1 asks for 0 output tokens"):
        simulate(work, spec, COST, config, load, FleetSpec(2, backend="vllm"))
    fast = run_one(work, spec, COST, config, load)
    assert (fast["llm_calls"], fast["rejected_calls"]) == (3, 0)
