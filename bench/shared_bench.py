"""Replay speed with prefixes shared across programs against the same calls without.

The workload is ``replay.synth.synth("swe-bench", PROGRAMS, seed)`` (70k ± 20k tokens per
program) with, as on the Claude Code trace, every call's prompt starting with one of
``TOOL_SETS`` tool-definition sets of ``TOOL_TOKENS`` tokens (each a chain of 16-token
block hashes; the sets share their first half, as product versions do), so that each
call shares ~780 blocks with other programs. Baseline: the same calls with no shared
prefix (``Call.prefix`` None), replayed in the same run.

Figure: simulated calls per CPU-second (``time.process_time`` around
``replay.policy_runs.simulate_one``; best of ``--repeat``) of vllm, program-fcfs and continuum,
Llama-3.1-8B/H100, ``--kv-tokens`` KV tokens, a closed population of
``CONCURRENCY`` programs; the ratio unshared / shared is the cost of sharing (the pool
holds a shared block once and walks a call's shared blocks on admit, step and finish).
Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import AgentProgram, SharedPrefix, Workload, from_frame

PROFILE = "llama-3.1-8b-h100"
CONCURRENCY = 64
TOOL_SETS = 4
TOOL_TOKENS = 12_480  # Claude Code's median shared prefix
BLOCK_TOKENS = 16
POLICIES = {
    "vllm": PolicySpec("vllm"),
    "program-fcfs": PolicySpec("program-fcfs"),
    "continuum": PolicySpec("continuum"),
}


def tool_sets() -> list[SharedPrefix]:
    """``TOOL_SETS`` chains of block hashes sharing their first half."""
    n = TOOL_TOKENS // BLOCK_TOKENS
    common = tuple(range(1, n // 2 + 1))
    return [
        SharedPrefix(common + tuple(range(s * n + n // 2 + 1, s * n + n + 1)), BLOCK_TOKENS)
        for s in range(1, TOOL_SETS + 1)
    ]


def with_prefixes(work: Workload, prefixes: list[SharedPrefix | None]) -> Workload:
    """Every call of program ``i`` starts with ``prefixes[i % len(prefixes)]``."""
    return Workload(
        tuple(
            AgentProgram(
                p.program_id,
                p.start_s,
                tuple(dataclasses.replace(c, prefix=prefixes[i % len(prefixes)]) for c in p.calls),
            )
            for i, p in enumerate(work.programs)
        )
    )


def calls_per_cpu_s(work: Workload, spec: PolicySpec, kv_tokens: int, repeat: int) -> float:
    cost = ProfileCostModel(resolve(PROFILE)[0])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=kv_tokens))
    best = float("inf")
    calls = 0
    for _ in range(repeat):
        gc.collect()
        cpu0 = time.process_time()
        outcome, _ = simulate_one(work, spec, cost, config, Load(concurrency=CONCURRENCY))
        best = min(best, time.process_time() - cpu0)
        calls = len(outcome.calls)
    return calls / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kv-tokens", type=int, default=600_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best of)")
    args = parser.parse_args()
    base = from_frame(synth("swe-bench", args.programs, args.seed))
    shared = with_prefixes(base, list(tool_sets()))
    plain = with_prefixes(base, [None])
    print(
        f"shared prefixes: {len(base.programs):,} swe-bench programs (seed {args.seed}), "
        f"{base.calls:,} calls, each starting with one of {TOOL_SETS} tool sets of "
        f"{TOOL_TOKENS:,} tokens; {PROFILE}, {args.kv_tokens:,} KV tokens, concurrency "
        f"{CONCURRENCY}; calls per CPU-second, best of {args.repeat}"
    )
    print(f"  {'policy':12s} {'unshared':>10s} {'shared':>10s} {'unshared/shared':>16s}")
    for name, spec in POLICIES.items():
        a = calls_per_cpu_s(plain, spec, args.kv_tokens, args.repeat)
        b = calls_per_cpu_s(shared, spec, args.kv_tokens, args.repeat)
        print(f"  {name:12s} {a:10,.0f} {b:10,.0f} {a / b:15.2f}x  (baseline: unshared)")


if __name__ == "__main__":
    main()
