"""Whole replays: the two pools and the two stepping modes agree, runs repeat, and
the outcome keeps the BLIS invariants (STYLE.md).

Small seeded workloads of agent programs on a cache small enough that every policy
preempts and evicts; every policy of :data:`replay.policies.NAMES` on each.
"""

from __future__ import annotations

import ast
import gc
import itertools
import json
from dataclasses import fields, replace
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import numpy as np
import pytest

from profiles.cost import ConstantCostModel, ProfileCostModel, rebuild_pricer
from profiles.schema import Decode, Prefill, Profile, Reload
from replay.policies import NAMES, PolicySpec, make
from replay.policy_runs import Load, prepare, run_all, run_one, unlimited_kv_tokens
from replay.request import SimRequest
from replay.scheduler import SimScheduler, SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.sim_outcome import Outcome
from replay.workload import AgentProgram, Call, Workload

REPO = Path(__file__).resolve().parents[2]
COST = ConstantCostModel()
SEEDS = [0, 1, 2]
ENGINE = SimSchedulerConfig(
    kv_tokens=16 * 150, block_size=16, max_num_batched_tokens=512, max_num_seqs=16
)
CONFIG = ReplayConfig(engine=ENGINE, check=True)


def workload(seed: int) -> Workload:
    """20–40 programs of 3–8 calls; each call repeats the previous stream (now and
    then only part of it) and adds 20–200 tokens; pauses ~ Exp(mean 0.5 s). Seed 1
    adds a program whose last call cannot fit the cache (it is cut short)."""
    rng = np.random.default_rng(seed)
    programs = []
    for p in range(int(rng.integers(20, 41))):
        calls = []
        stream = 0
        for _ in range(int(rng.integers(3, 9))):
            reused = stream if rng.random() > 0.15 else int(rng.integers(0, stream + 1))
            prompt = reused + int(rng.integers(20, 200))
            output = int(rng.integers(1, 60))
            tool = str(rng.choice(["bash", "edit", "grep"]))
            calls.append(Call(prompt, output, reused, tool, float(rng.exponential(0.5))))
            stream = prompt + output
        programs.append(AgentProgram(f"p{p:02d}", float(rng.uniform(0, 2)), tuple(calls)))
    if seed == 1:
        too_long = Call(ENGINE.kv_tokens + 10, 5, 200, None, 0.0)
        first = Call(200, 5, 0, "bash", 0.3)
        programs.append(AgentProgram("huge", 0.5, (first, too_long, first)))
    return Workload(tuple(programs))


def timing(seed: int) -> Load:
    return Load(jps=4.0, seed=seed)


def engine_config(config: ReplayConfig, **changes: Any) -> ReplayConfig:
    return replace(config, engine=replace(config.engine, **changes))


def run(seed: int, name: str, config: ReplayConfig = CONFIG) -> dict[str, Any]:
    return run_one(workload(seed), PolicySpec(name), COST, config, timing(seed), timed=False)


def assert_close(a: Any, b: Any, path: str = "") -> None:
    """Equal, except that floats may differ by summation order (rel 1e-9)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert isinstance(b, float | int), path
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), path
    else:
        assert type(a) is type(b) and a == b, path


# ------------------------------------------------------------------ equivalence


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_block_pool_gives_the_same_results(seed: int, name: str) -> None:
    runs = run(seed, name, engine_config(CONFIG, pool="runs"))
    blocks = run(seed, name, engine_config(CONFIG, pool="blocks"))
    assert runs == blocks


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_merged_decode_steps_give_the_same_results(seed: int, name: str) -> None:
    fast = run(seed, name, engine_config(CONFIG, fast=True))
    slow = run(seed, name, engine_config(CONFIG, fast=False))
    assert_close(fast, slow)


#: exact arithmetic: every price and pause a multiple of a power of two, so a merged run's
#: closed-form sum and the step-by-step one are the same number, and a tie (a pin that
#: expires on a step's start) falls the same way in both modes: they must agree exactly
DYADIC = ConstantCostModel(
    prefill_per_token_s=2**-13, decode_step_s=2**-6, reload_per_token_s=2**-20
)
#: the same with a decode price that grows with the batch and its KV, and a wake after each
#: idle spell (points 1/4 s apart: its interpolation stays exact)
DYADIC_PROFILE = ProfileCostModel(
    Profile(
        name="dyadic",
        device="test",
        model="test",
        kv_bytes_per_token=1024,
        max_context=4096,
        prefill=Prefill(a=2**-8, b=2**-14, q=2**-30),
        reload=Reload(bandwidth_bytes_per_s=2.0**40, latency_s=2**-10),
        decode=Decode(step_s=2**-7, per_seq_s=2**-12, per_kv_token_s=2**-24),
        wake=((0.25, 2**-9), (0.5, 2**-7)),
    )
)


def dyadic(work: Workload) -> Workload:
    """The workload with its pauses rounded to 1/1024 s."""
    return Workload(
        tuple(
            replace(
                p, calls=tuple(replace(c, pause_s=round(c.pause_s * 1024) / 1024) for c in p.calls)
            )
            for p in work.programs
        )
    )


@pytest.mark.parametrize("seed", range(3, 13))
@pytest.mark.parametrize("name", NAMES)
def test_merged_decode_steps_agree_exactly_in_exact_arithmetic(seed: int, name: str) -> None:
    """A closed population of 8 (its starts are finishes: exact too), both cost models."""
    cost = DYADIC if seed % 2 else DYADIC_PROFILE
    work, load = dyadic(workload(seed)), Load(concurrency=8)
    spec = PolicySpec(name)
    for block_size in (16, 4):  # small blocks: more preemptions, recomputation, the valve
        config = engine_config(CONFIG, block_size=block_size)
        fast = run_one(work, spec, cost, engine_config(config, fast=True), load, timed=False)
        slow = run_one(work, spec, cost, engine_config(config, fast=False), load, timed=False)
        assert fast == slow, block_size


def test_workloads_are_contended() -> None:
    """The cases above mean something only if memory runs short: stock vLLM
    preempts and evicts cached blocks on every workload, and a call is rejected."""
    cut = 0
    for seed in SEEDS:
        out = outcome(seed, "vllm")
        assert out.engine.stats.preemptions > 0
        assert out.engine.pool.evicted_blocks() > 0
        cut += out.rejected_calls
    assert cut > 0


# ------------------------------------------------------------------ determinism


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    specs = [PolicySpec(n) for n in NAMES]
    w = workload(0)

    def dump(t: Load) -> str:
        results = run_all(w, specs, COST, CONFIG, t, timed=False)
        return json.dumps(results, sort_keys=True)

    first = dump(Load(jps=4.0, seed=0))
    assert dump(Load(jps=4.0, seed=0)) == first
    assert dump(Load(jps=4.0, seed=1)) != first


# ------------------------------------------------------------------ invariants


def prepared(seed: int, name: str) -> tuple[Workload, dict[tuple[str, int], float], ReplayConfig]:
    """What run_one hands to simulate: the retimed workload, the true pauses, the config."""
    work = prepare(workload(seed), timing(seed))
    pauses = {(p.program_id, i): c.pause_s for p in work.programs for i, c in enumerate(p.calls)}
    config = CONFIG
    if name == "unlimited-kv":
        config = engine_config(CONFIG, kv_tokens=unlimited_kv_tokens(work, CONFIG))
    return work, pauses, config


_rebuild = rebuild_pricer(COST, CONFIG.engine.max_num_batched_tokens)


def outcome(seed: int, name: str, wrap: Any = None) -> Outcome:
    work, pauses, config = prepared(seed, name)
    policy = make(PolicySpec(name), pauses, _rebuild)
    return simulate(work, wrap(policy) if wrap else policy, COST, config)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_outcome_invariants(seed: int, name: str) -> None:
    work, _, _ = prepared(seed, name)
    out = outcome(seed, name)
    by_id = {p.program_id: p for p in work.programs}
    records: dict[str, list[Any]] = {}
    for c in out.calls:
        records.setdefault(c.program, []).append(c)
    assert len({(c.program, c.turn) for c in out.calls}) == len(out.calls)  # at most once

    for run_ in out.programs:
        program = run_.program
        calls = records.get(program.program_id, [])
        turns = [c.turn for c in calls]
        assert turns == list(range(len(calls))), program.program_id  # in turn order
        if run_.cut_short:
            assert len(calls) < len(program.calls)
        else:  # every call finished exactly once
            assert run_.done and len(calls) == len(program.calls), program.program_id
            assert run_.last_finish == calls[-1].finish
        if calls:
            assert calls[0].arrival >= by_id[program.program_id].start_s
        for prev, c in itertools.pairwise(calls):
            # closed loop: the next call leaves the client exactly one pause after the
            # previous one finished (it reaches the scheduler at the next step boundary)
            assert c.arrival == prev.finish + program.calls[prev.turn].pause_s
        for c in calls:
            assert c.arrival <= c.admitted <= c.first_token <= c.finish
            assert 0 <= c.hit_tokens < c.prompt or c.prompt == 0
    finished_programs = sum(r.done and not r.cut_short for r in out.programs)
    assert finished_programs == len(out.programs) - sum(r.cut_short for r in out.programs)
    assert out.rejected_calls == sum(
        len(r.program.calls) - len(records.get(r.program.program_id, []))
        for r in out.programs
        if r.cut_short
    )
    # every block back in the free list or in a pin at the end; nothing left queued
    engine = out.engine
    assert engine.idle
    assert engine.pool.free_blocks + engine.pinned_blocks == engine.config.num_blocks
    assert engine.stats.busy_s <= out.end + 1e-9


# ------------------------------------------------------------------ the oracle boundary


#: the trace's true pauses: the dict run_one builds and the field of a Call
HIDDEN = {"pauses", "pause_s"}


def _names_in(path: Path) -> list[tuple[str, ast.AST]]:
    """Every use of a HIDDEN identifier in ``path`` (a name, argument, keyword or
    attribute), with the enclosing class and functions. A pause a policy observes
    itself (``observe_pause``: next arrival minus previous finish) is allowed."""
    found: list[tuple[str, ast.AST]] = []

    def visit(node: ast.AST, scope: str) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            scope = node.name if isinstance(node, ast.ClassDef) else f"{scope}.{node.name}"
        ident = (
            node.id
            if isinstance(node, ast.Name)
            else node.arg
            if isinstance(node, ast.arg | ast.keyword)
            else node.attr
            if isinstance(node, ast.Attribute)
            else None
        )
        if ident in HIDDEN:
            found.append((scope, node))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(ast.parse(path.read_text()), "")
    return found


def test_only_the_oracle_reads_pauses_in_the_source() -> None:
    """No policy module but the oracle's class names a pause; the registry hands the
    pauses to the Oracle constructor and to nothing else; the engine never names one."""
    policies = sorted((REPO / "replay" / "policies").glob("*.py"))
    assert policies
    for path in policies:
        uses = _names_in(path)
        if path.name == "baselines.py":
            assert uses and all(scope.split(".")[0] == "Oracle" for scope, _ in uses), uses
        elif path.name == "registry.py":
            tree = ast.parse(path.read_text())
            calls = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.Call)
                and any(
                    isinstance(a, ast.Name) and a.id == "pauses"
                    for a in [*n.args, *(k.value for k in n.keywords)]
                )
            ]
            assert [c.func.id for c in calls] == ["Oracle"]  # type: ignore[attr-defined]
            assert all(scope == ".make" for scope, _ in uses), uses
        else:
            assert uses == [], (path.name, uses)
    assert _names_in(REPO / "replay" / "scheduler.py") == []
    assert not [f.name for f in fields(SimRequest) if "pause" in f.name]


def _reaches(root: Any, target: Any, limit: int = 200_000) -> bool:
    """Whether ``target`` is reachable from ``root`` through object references
    (functions through their closures only; classes and modules are not followed)."""
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack and len(seen) < limit:
        obj = stack.pop()
        if obj is target:
            return True
        if id(obj) in seen or isinstance(obj, type | ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, FunctionType):
            stack.extend(c.cell_contents for c in obj.__closure__ or ())
        else:
            stack.extend(gc.get_referents(obj))
    return False


class Spy:
    """Forwards to a policy and records the types of every argument it is given."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.name = policy.name
        self.types: set[type] = set()

    def __getattr__(self, method: str) -> Any:
        target = getattr(self.policy, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.types.update(type(a) for a in (*args, *kwargs.values()))
            return target(*args, **kwargs)

        return call


@pytest.mark.parametrize("name", NAMES)
def test_policies_never_hold_or_receive_pauses(name: str) -> None:
    """At run time: only the oracle's object can reach the true pauses; every policy
    is called with requests, the engine, times and flags, and nothing else; the
    engine itself cannot reach the pauses (the pin rules hold the policy's τ source,
    which is the oracle's own object: detached with the policy)."""
    work, pauses, config = prepared(0, name)
    policy = make(PolicySpec(name), pauses, _rebuild)
    assert _reaches(policy, pauses) == (name == "oracle")
    spy = Spy(policy)
    out = simulate(work, spy, COST, config)  # type: ignore[arg-type]
    allowed = SimRequest | SimScheduler | float | bool
    assert all(issubclass(t, allowed) for t in spy.types), spy.types
    assert SimRequest in spy.types and SimScheduler in spy.types
    engine = out.engine
    engine.policy = None  # type: ignore[assignment]
    if engine.pinning is not None:
        engine.pinning.retention.source = None
    assert not _reaches(engine, pauses)
