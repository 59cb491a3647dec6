"""Replay speed and memory: 1,000 SWE-bench-like programs under vLLM and Continuum.

The workload is ``replay.synth.synth("swe-bench", 1000, seed)`` (the paper's 10.9 ± 2.1
turns, 70k ± 20k tokens per program), replayed with ``replay.policy_runs.simulate_one`` on the
Llama-3.1-8B/H100 profile, 600k KV tokens, a closed population of 64 programs.

Every figure is read against a baseline measured in the same run (the machine is
shared and noisy); nothing here asserts on speed:

- speed: simulated LLM calls per CPU-second of the simulating process
  (``time.process_time`` around ``simulate_one``: the replay plus building the policy; on
  a shared, loaded machine far steadier than wall time) and, beside it, per wall-second;
  fast simulator (``SimSchedulerConfig(fast=True)``: runs of decode-only steps taken as one
  event) against the same simulator stepping one decode token at a time
  (``fast=False``), as a ratio; both must give the same results.
- memory: peak RSS of a fresh process that builds the workload and replays it, against
  a fresh process that only builds the workload (``VmHWM`` of ``/proc/self/status``, the
  process's own peak: on Linux ``ru_maxrss`` keeps the peak of the process it was forked
  from across ``exec``, so each child would read this process's peak; ``ru_maxrss`` only
  where there is no ``/proc``).
- the vLLM backend (``--backend vllm``: vLLM's own scheduler and KV cache manager in
  process, ``replay.vllmsim``) beside the fast one, on the first ``--vllm-programs``
  programs only (it steps every decode token through vLLM's Python scheduler: the
  whole workload would take an hour), with the calls/s of both on that subset.

Goals (issue): at least 10,000 simulated calls per second, peak memory under 2 GB.
``--profile PATH`` also writes cProfile's top functions of the fast runs to PATH.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import pstats
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay import figures
from replay.policies import BOUNDS, PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import Workload, from_frame

CALLS_PER_S_GOAL = 10_000
MEMORY_GOAL_MB = 2_048
PROFILE = "llama-3.1-8b-h100"
KV_TOKENS = 600_000
CONCURRENCY = 64
POLICIES = {
    "vllm": PolicySpec("vllm"),
    "continuum": PolicySpec("continuum", valve="stall-only"),
}


@dataclass(frozen=True, slots=True)
class Setup:
    programs: int
    seed: int


def workload(setup: Setup, first: int | None = None) -> Workload:
    frame = synth("swe-bench", setup.programs, setup.seed)
    work = from_frame(frame)
    if first is not None and first < len(work.programs):
        work = Workload(work.programs[:first])  # deterministic: the first N by program id
    return work


def replay(work: Workload, policy: str, fast: bool) -> dict[str, Any]:
    """``replay --json``'s figures of one policy, plus ``cpu_s`` (CPU seconds of the
    simulating process) and ``sim_calls_per_cpu_s``."""
    cost = ProfileCostModel(resolve(PROFILE)[0])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=KV_TOKENS, fast=fast))
    spec = POLICIES[policy]
    gc.collect()
    cpu0 = time.process_time()
    outcome, wall = simulate_one(work, spec, cost, config, Load(concurrency=CONCURRENCY))
    cpu = time.process_time() - cpu0
    result: dict[str, Any] = dict(
        figures.summarize(outcome, spec.name, evaluation_only=spec.name in BOUNDS, wall_s=wall)
    )
    result["cpu_s"] = cpu
    result["sim_calls_per_cpu_s"] = len(outcome.calls) / cpu if cpu > 0 else math.inf
    return result


def max_rss_mb() -> float:
    """This process's peak RSS in MB: ``VmHWM`` where there is ``/proc`` (its own peak),
    else ``ru_maxrss``, which on Linux also holds the peak of the process it was forked
    from (kept across ``exec``): a child of a large process reads the parent's peak."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB on Linux


# ---------------------------------------------------------------- memory (fresh processes)


def child(setup: Setup, policy: str | None) -> None:
    """Run in a fresh process: build the workload, replay it (unless None), print peak RSS."""
    work = workload(setup)
    if policy is not None:
        replay(work, policy, fast=True)
    print(json.dumps({"max_rss_mb": max_rss_mb()}))


def peak_mb(setup: Setup, policy: str | None) -> float:
    res = subprocess.run(
        [
            sys.executable,
            __file__,
            "--programs",
            str(setup.programs),
            "--seed",
            str(setup.seed),
            "--child",
            policy or "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(res.stdout.strip().splitlines()[-1])["max_rss_mb"])


# ---------------------------------------------------------------- main


def same_results(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("llm_calls", "preemptions", "pins", "rejected_calls")
    if any(a[k] != b[k] for k in keys):
        return False
    x, y = a["jct_mean_s"], b["jct_mean_s"]
    return x == y or (x is not None and y is not None and abs(x - y) <= 1e-9 * abs(y))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--programs", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--baseline-programs",
        type=int,
        default=None,
        help="replay only the first N programs one token at a time (default: all)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per case (best of)")
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile tops here")
    parser.add_argument(
        "--vllm-programs",
        type=int,
        default=48,
        help="programs the vLLM backend replays (0: skip it)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    setup = Setup(args.programs, args.seed)
    if args.child is not None:
        child(setup, None if args.child == "-" else args.child)
        return

    start = time.perf_counter()
    work = workload(setup)
    build_s = time.perf_counter() - start
    calls = work.calls
    prompt_tokens = sum(c.input_tokens for p in work.programs for c in p.calls)
    finals = [p.calls[-1].input_tokens for p in work.programs]
    print(
        f"replay: {len(work.programs):,} swe-bench programs (synth seed {args.seed}), "
        f"{calls:,} calls, {prompt_tokens / 1e6:.1f}M prompt tokens over all calls "
        f"({sum(finals) / 1e6:.1f}M in the programs' final contexts, mean "
        f"{sum(finals) / len(finals) / 1e3:.1f}k); built in {build_s:.2f} s"
    )
    print(
        f"  {PROFILE}, {KV_TOKENS:,} KV tokens, concurrency {CONCURRENCY}; "
        f"calls/cpu-s = simulated calls per CPU-second of the simulating process, calls/s "
        f"per wall-second (one core; best of {args.repeat} by CPU time)"
    )
    base_work = work
    if args.baseline_programs is not None and args.baseline_programs < len(work.programs):
        base_work = workload(setup, args.baseline_programs)
        print(
            f"  per-token baseline on the first {len(base_work.programs):,} programs "
            f"({base_work.calls:,} calls) only: its calls/s is a rate on that subset, "
            "and the results check is skipped"
        )

    header = (
        f"  {'policy':10s} {'simulator':10s} {'cpu s':>7s} {'calls/cpu-s':>11s}"
        f" {'wall s':>8s} {'calls/s':>9s} {'steps':>9s}"
        f" {'JCT mean s':>11s} {'preempt':>8s}"
    )
    print(header)
    for policy in POLICIES:
        rows = {}
        for label, fast, wl in (("per-token", False, base_work), ("fast", True, work)):
            best: dict[str, Any] | None = None
            for _ in range(args.repeat):
                r = replay(wl, policy, fast)
                if best is None or r["cpu_s"] < best["cpu_s"]:
                    best = r
            assert best is not None
            rows[label] = best
            print(
                f"  {policy:10s} {label:10s} {best['cpu_s']:7.2f}"
                f" {best['sim_calls_per_cpu_s']:11,.0f}"
                f" {best['wall_s']:8.2f} {best['sim_calls_per_s']:9,.0f}"
                f" {best['engine_steps']:9,d} {best['jct_mean_s']:11.1f} {best['preemptions']:8,d}"
                + ("  (baseline)" if not fast else "")
            )
        fast_r, slow_r = rows["fast"], rows["per-token"]
        speedup = fast_r["sim_calls_per_cpu_s"] / slow_r["sim_calls_per_cpu_s"]
        same = (
            "skipped (subset)"
            if base_work is not work
            else ("yes" if same_results(fast_r, slow_r) else "NO")
        )
        print(
            f"  {policy:10s} speedup fast/per-token {speedup:5.2f}x (CPU time)"
            f"   same results: {same}"
            f"   goal >= {CALLS_PER_S_GOAL:,} calls/cpu-s: "
            f"{'yes' if fast_r['sim_calls_per_cpu_s'] >= CALLS_PER_S_GOAL else 'NO'}"
        )

    base_mb = peak_mb(setup, None)
    print(
        f"memory: peak RSS of a fresh process (VmHWM), fast simulator; "
        f"this process so far {max_rss_mb():,.0f} MB"
    )
    print(f"  {'workload only':22s} {base_mb:7,.0f} MB  (baseline)")
    for policy in POLICIES:
        mb = peak_mb(setup, policy)
        print(
            f"  {'workload + ' + policy:22s} {mb:7,.0f} MB  {mb / base_mb:5.2f}x"
            f"  (+{mb - base_mb:,.0f} MB; goal < {MEMORY_GOAL_MB:,} MB: "
            f"{'yes' if mb < MEMORY_GOAL_MB else 'NO'})"
        )

    if args.vllm_programs > 0:
        vllm_backend(workload(setup, args.vllm_programs))

    if args.profile is not None:
        write_profile(work, args.profile)
        print(f"profile: cProfile of the fast runs written to {args.profile}")


def vllm_backend(work: Workload) -> None:
    """Calls/s of the vLLM backend beside the fast backend's, on the same (small) workload."""
    from replay.vllmsim.backend import runner, vllm_version  # lazy: imports vLLM and torch

    cost = ProfileCostModel(resolve(PROFILE)[0])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=KV_TOKENS))
    timing = Load(concurrency=CONCURRENCY)
    print(
        f"vllm backend (vLLM {vllm_version()}'s own scheduler in process, sync) on the first "
        f"{len(work.programs)} programs ({work.calls:,} calls); calls/s of the closed loop"
    )
    print(
        f"  {'policy':10s} {'backend':8s} {'wall s':>8s} {'calls/s':>9s} {'steps':>9s}"
        f" {'JCT mean s':>11s} {'preempt':>8s} {'hits':>5s}"
    )
    for policy, spec in POLICIES.items():
        fast: dict[str, Any] | None = None
        for backend in ("fast", "vllm"):
            gc.collect()
            r: dict[str, Any] = dict(runner(backend)(work, spec, cost, config, timing))
            if fast is None:
                fast, note = r, "  (baseline)"
            else:
                note = f"  {r['sim_calls_per_s'] / fast['sim_calls_per_s']:.4f}x"
            print(
                f"  {policy:10s} {backend:8s} {r['wall_s']:8.2f} {r['sim_calls_per_s']:9,.1f}"
                f" {r['engine_steps']:9,d} {r['jct_mean_s']:11.1f} {r['preemptions']:8,d}"
                f" {r['prefix_hit_rate']:5.0%}" + note,
                flush=True,
            )


def write_profile(work: Workload, path: Path) -> None:
    text = io.StringIO()
    for policy in POLICIES:
        prof = cProfile.Profile()
        prof.enable()
        replay(work, policy, fast=True)
        prof.disable()
        for sort in ("cumulative", "tottime"):
            text.write(f"==== {policy} (fast), top 15 by {sort}\n")
            pstats.Stats(prof, stream=text).sort_stats(sort).print_stats(15)
    path.write_text(text.getvalue())


if __name__ == "__main__":
    main()
