"""The fast backend's async scheduling (``replay.async_sched``): what it changes and
what it must not. The call-by-call agreement with vLLM's own ``AsyncScheduler`` is
``tests/vllmsim/test_differential.py``."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from fitting.fit import FitConfig, fit_trace
from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_outcome import Outcome
from replay.workload import AgentProgram, Call, Workload
from tests.replay.test_equivalence import workload as seeded_workload
from tests.replay.test_replay_cli import _growing, _trace
from tests.tune.inputs import write_trace
from ttlctl.cli import app
from ttlctl.trace import io as trace_io

COST = ConstantCostModel()
ENGINE = SimSchedulerConfig(kv_tokens=16 * 200, max_num_batched_tokens=512, max_num_seqs=16)


def _run(work: Workload, *, async_scheduling: bool, policy: str = "vllm") -> Outcome:
    config = ReplayConfig(engine=ENGINE, check=True, async_scheduling=async_scheduling)
    outcome, _ = simulate_one(work, PolicySpec(policy), COST, config, Load())
    return outcome


def _calls(outcome: Outcome) -> dict[tuple[str, int], tuple[float, ...]]:
    return {
        (c.program, c.turn): (c.admitted, c.first_token, c.finish, c.hit_tokens, c.preemptions)
        for c in outcome.calls
    }


def test_one_program_alone_is_not_delayed() -> None:
    """Alone on the engine, a program's steps are the same: its next step is scheduled
    while the current one runs, and the step after its last token schedules nothing (it
    costs nothing), so its next call starts as it would synchronously."""
    calls = (
        Call(100, 7, 0, "bash", 0.5),
        Call(180, 5, 107, "bash", 0.0),
        Call(250, 3, 185, None, 0.0),
    )
    work = Workload((AgentProgram("a", 0.0, calls),))
    sync, asyn = _run(work, async_scheduling=False), _run(work, async_scheduling=True)
    a, b = _calls(sync), _calls(asyn)
    assert a.keys() == b.keys() and len(a) == 3
    for k in a:
        assert all(math.isclose(x, y, rel_tol=1e-12) for x, y in zip(a[k], b[k], strict=True))
    assert sync.engine.stats.steps == asyn.engine.stats.steps == 7 + 5 + 3


def test_a_call_sent_during_a_step_waits_one_step_more() -> None:
    """b's call is sent while a decodes: synchronously the next step admits it; with
    async scheduling that step was scheduled before the call arrived, so the one after."""
    a = AgentProgram("a", 0.0, (Call(64, 40, 0, None, 0.0),))
    b = AgentProgram("b", 0.05, (Call(64, 4, 0, None, 0.0),))  # mid-step: a's steps take 0.02 s
    work = Workload((a, b))
    sync, asyn = _run(work, async_scheduling=False), _run(work, async_scheduling=True)
    by = {c.program: c for c in sync.calls}, {c.program: c for c in asyn.calls}
    assert by[1]["b"].admitted_step == by[0]["b"].admitted_step + 1
    assert by[1]["b"].finish > by[0]["b"].finish
    # its record's arrival is when it was sent (its TTFT and JCT count from there)
    assert by[0]["b"].arrival == by[1]["b"].arrival == 0.05
    assert by[1]["a"].admitted_step == by[0]["a"].admitted_step == 0
    # a's tokens are the same; it decodes one step fewer alone before b joins
    assert sync.engine.stats.steps == asyn.engine.stats.steps


def test_async_replays_keep_the_invariants_and_repeat() -> None:
    """Every policy, a cache small enough to preempt and evict, ``--check`` on: the
    invariants hold after every step, every call finishes, and a second run repeats."""
    work = seeded_workload(0)
    for policy in ("vllm", "program-fcfs", "static-ttl", "continuum", "autellix"):
        config = ReplayConfig(
            engine=replace(ENGINE, kv_tokens=16 * 150), check=True, async_scheduling=True
        )
        first, _ = simulate_one(work, PolicySpec(policy), COST, config, Load())
        again, _ = simulate_one(work, PolicySpec(policy), COST, config, Load())
        assert len(first.calls) == work.calls, policy
        assert _calls(first) == _calls(again), policy


def test_replay_takes_the_flag_on_the_fast_backend(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", [_growing(4, pause=0.0) for _ in range(6)])
    docs = []
    for mode in ([], ["--async-scheduling"]):
        out = tmp_path / f"r{len(mode)}.json"
        res = CliRunner().invoke(
            app,
            [
                "replay",
                str(trace),
                "--policy",
                "vllm",
                "--kv-tokens",
                "20000",
                "--json",
                str(out),
                *mode,
            ],
        )
        assert res.exit_code == 0, res.output
        docs.append(json.loads(out.read_text()))
    assert [d["async_scheduling"] for d in docs] == [False, True]
    assert [d["backend"] for d in docs] == ["fast", "fast"]
    # six programs at once: calls sent during steps start later
    assert docs[1]["results"][0]["jct_mean_s"] > docs[0]["results"][0]["jct_mean_s"]


def test_tune_takes_the_flag_on_the_fast_backend(tmp_path: Path) -> None:
    """The study's objective names async scheduling (a sync study is not reused), and
    the synchronous fast backend's objective keeps its keys."""
    trace = write_trace(tmp_path / "t.parquet", programs=6, seed=3)
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(fit_trace(trace_io.scan(trace), FitConfig(min_samples=5))))
    summaries = []
    for mode in ([], ["--async-scheduling"]):
        out = tmp_path / f"bundle{len(mode)}.json"
        args = [
            "tune",
            str(trace),
            "--fit",
            str(fit),
            "--profile",
            "llama-3.1-70b-a100",
            "--concurrency",
            "3",
            "--kv-tokens",
            "12000",
            "--trials",
            "2",
            "--seeds",
            "1",
            "--holdout-seeds",
            "1",
            "-o",
            str(out),
            *mode,
        ]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        summaries.append(json.loads((tmp_path / f"{out.stem}.tune.json").read_text()))
    sync, asyn = (s["objective"] for s in summaries)
    assert "async_scheduling" not in sync and "backend" not in sync
    assert asyn["async_scheduling"] is True and "backend" not in asyn


def test_async_replays_agree_on_both_pools_and_with_offload() -> None:
    """The block-by-block pool gives the same async replay as the runs pool; an offload
    tier runs under async scheduling too (its reloads priced in the step)."""
    work = seeded_workload(2)
    engine = replace(ENGINE, kv_tokens=16 * 150)
    for policy in ("vllm", "continuum"):
        runs = ReplayConfig(engine=engine, check=True, async_scheduling=True)
        blocks = replace(runs, engine=replace(engine, pool="blocks"))
        a, _ = simulate_one(work, PolicySpec(policy), COST, runs, Load())
        b, _ = simulate_one(work, PolicySpec(policy), COST, blocks, Load())
        assert _calls(a) == _calls(b), policy
        offload = replace(runs, offload_tokens=16 * 400)
        c, _ = simulate_one(work, PolicySpec(policy), COST, offload, Load())
        assert len(c.calls) == work.calls and c.engine.stats.loaded_tokens > 0, policy
