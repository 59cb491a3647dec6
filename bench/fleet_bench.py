"""Fleet replay speed and memory: N simulated engines behind a router against one engine.

The workload is ``replay.synth.synth("swe-bench", PROGRAMS, 0)`` (SWE-bench-like programs,
70k ± 20k tokens each) on the Llama-3.1-8B/H100 profile, 600k KV tokens per engine,
``continuum`` (cold start, stall-only valve). One engine keeps ``PER_ENGINE`` programs
live; a fleet of N keeps N × ``PER_ENGINE`` live behind ``cache-aware`` (vllm-router's
default), so each replica carries one engine's load and the same calls are replayed.
``PROGRAMS`` (3,000) puts a 16-replica fleet in its steady state: each replica rolls
through about 190 programs, its policy's histories as full as one engine's. At 1,000 the
fleet serves each replica's ~62 programs in one wave, with young histories, and reads
about ten points faster against one engine: not the fleet a user replays.

Figures, each against a baseline from the same run (nothing here asserts on speed):

- speed: simulated LLM calls per CPU-second (``time.process_time`` around the replay) of
  the 16-replica fleet over one engine's (goal: at least 80%); each is replayed
  ``--repeat`` times (3), one engine, one replica and the fleet in turn (the order
  rotating from turn to turn), and the fastest of each counts (on a machine shared with
  other jobs a single run reads up to 20% slow);
- scaling: the same fleet's calls per CPU-second over one replica's behind the same
  router (replayed in the same turns), which carries the whole load on one engine: what
  adding replicas costs, apart from what a router and its event loop cost at all (no
  goal; the speed goal above counts both);
- memory: the replay's peak Python allocations (``tracemalloc``, the workload already
  built) with 1, 4 and 16 replicas, per replica (goal: linear in the replicas); a fresh
  process's own peak RSS (``replay_bench.max_rss_mb``: ``VmHWM``, as ``ru_maxrss`` keeps
  the peak of the process it was forked from across ``exec``) is printed beside it, for
  scale.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import Workload, from_frame

PROGRAMS = 3000
PER_ENGINE = 64
KV_TOKENS = 600_000
PROFILE = "llama-3.1-8b-h100"
SPEED_GOAL = 0.8
SPEC = PolicySpec("continuum", valve="stall-only")


def workload(programs: int) -> Workload:
    return from_frame(synth("swe-bench", programs, 0))


def replay(work: Workload, replicas: int, router: str) -> dict[str, Any]:
    cost = ProfileCostModel(resolve(PROFILE)[0])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=KV_TOKENS))
    load = Load(concurrency=PER_ENGINE * replicas)
    start = time.process_time()
    if replicas == 0:  # one engine, no router
        outcome, _ = simulate_one(work, SPEC, cost, config, Load(concurrency=PER_ENGINE))
        calls = len(outcome.calls)
    else:
        fleet = FleetSpec(replicas, RouterSettings(router))
        out, _, _ = simulate_fleet_one(work, SPEC, cost, config, load, fleet)
        calls = len(out.calls)
    cpu = time.process_time() - start
    return {"calls": calls, "cpu_s": cpu, "calls_per_cpu_s": calls / cpu}


def traced_peak_mb(work: Workload, replicas: int, router: str) -> float:
    """Peak bytes the replay allocated (tracemalloc), in MB (the garbage of the replays
    before collected first, so that each starts from the same heap)."""
    gc.collect()
    tracemalloc.start()
    try:
        replay(work, replicas, router)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def peak_rss_mb(programs: int, replicas: int, router: str) -> float:
    """Peak RSS of a fresh process (replicas < 0: it only builds the workload); it imports
    this file by its folder, so that it runs from any working directory."""
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.argv=['x']; sys.path.insert(0, {here!r}); import fleet_bench as b; "
        f"w = b.workload({programs}); "
        + (f"b.replay(w, {replicas}, {router!r}); " if replicas >= 0 else "")
        + "from replay_bench import max_rss_mb; print(max_rss_mb())"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(res.stdout.strip().splitlines()[-1])


def row(label: str, figures: dict[str, Any]) -> None:
    """One replay's line: its calls per CPU-second, calls and CPU seconds."""
    print(
        f"{label:<28}{figures['calls_per_cpu_s']:>9,.0f} calls/CPU-s "
        f"({figures['calls']:,} calls, {figures['cpu_s']:.1f} s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=PROGRAMS)
    ap.add_argument("--router", default="cache-aware")
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="replays of each; the fastest counts")
    ap.add_argument("--json", default=None, help="write the figures here too")
    args = ap.parse_args()
    work = workload(args.programs)
    print(
        f"{args.programs} SWE-bench-like programs, {work.calls:,} calls; continuum; "
        f"{KV_TOKENS:,} KV tokens and {PER_ENGINE} live programs per engine",
        flush=True,
    )
    ones: list[dict[str, Any]] = []
    singles: list[dict[str, Any]] = []
    fleets: list[dict[str, Any]] = []
    kinds = [(ones, 0), (singles, 1), (fleets, args.replicas)]
    for turn in range(max(1, args.repeat)):
        # in turn, so that a busy spell slows each; the order rotates, so that none always
        # follows the same one (a replay runs 5-10% slower after another that left the
        # heap fragmented: the fleet after the single replica's, whose programs all
        # queue on one engine)
        first = turn % len(kinds)
        for results, replicas in kinds[first:] + kinds[:first]:
            results.append(replay(work, replicas, args.router))
    one = min(ones, key=lambda r: r["cpu_s"])
    single = min(singles, key=lambda r: r["cpu_s"])
    fleet = min(fleets, key=lambda r: r["cpu_s"])
    scaling = fleet["calls_per_cpu_s"] / single["calls_per_cpu_s"]
    ratio = fleet["calls_per_cpu_s"] / one["calls_per_cpu_s"]
    runs = [f["calls_per_cpu_s"] / o["calls_per_cpu_s"] for o, f in zip(ones, fleets, strict=True)]
    row("one engine:", one)
    row(f"1 replica ({args.router}):", single)
    row(f"{args.replicas} replicas ({args.router}):", fleet)
    print(
        f"fleet / one engine: {ratio:.3f}, fastest of {len(runs)} each (goal >= "
        f"{SPEED_GOAL:.2f}: {'met' if ratio >= SPEED_GOAL else 'NOT met'}); run by run: "
        + ", ".join(f"{r:.3f}" for r in runs)
    )
    print(
        f"{args.replicas} replicas / 1 replica behind {args.router}: {scaling:.2f} (the cost of "
        f"the replicas themselves; 1 replica / one engine: "
        f"{single['calls_per_cpu_s'] / one['calls_per_cpu_s']:.2f}, the router and the loop's)"
    )
    memory = {}
    for n in sorted({1, 4, args.replicas}):
        memory[n] = traced_peak_mb(work, n, args.router)
        extra = (memory[n] - memory[1]) / (n - 1) if n > 1 else 0.0
        print(
            f"replay peak allocations with {n:>2} replicas: {memory[n]:,.1f} MB "
            f"({extra:+,.2f} MB per replica beyond the first)"
        )
    base = peak_rss_mb(args.programs, -1, args.router)
    rss = peak_rss_mb(args.programs, args.replicas, args.router)
    print(
        f"peak RSS of a fresh process: {base:,.0f} MB building the workload, {rss:,.0f} MB "
        f"replaying it on {args.replicas} replicas"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "one": one,
                    "single": single,
                    "fleet": fleet,
                    "ratio": ratio,
                    "scaling": scaling,
                    "ratios": runs,
                    "alloc_peak_mb": memory,
                    "base_rss_mb": base,
                    "rss_mb": rss,
                },
                fh,
                indent=1,
            )


if __name__ == "__main__":
    main()
