"""The fast simulator against vLLM's own scheduler: random small workloads, per-call comparison.

A :class:`Case` is one workload (programs, turns, prompt and output lengths, reuse, pauses),
one engine (KV blocks from ample to starved, block size, token budget small enough to chunk
prefills, ``max_num_seqs``), one load (trace starts, a closed population, Poisson starts)
and one policy spec. :func:`run_both` replays it on both backends; :func:`compare` lists,
call by call, where they differ:

- ``admitted_step``: the engine step the call was first admitted in (both count the steps
  that computed something, a merged run of decode steps as its steps);
- ``finish_step`` and ``finish``: the step it finished in and the virtual time;
- ``hit_tokens``: its prefix hit at first admission (vLLM's ``num_cached_tokens``);
- ``preemptions``;
- ``pins``: the run's pins made, handed over, expired, released under pressure, dropped
  (last call, abort, replacement) and still held at the end (the plugin's counters on the
  vLLM side);
- ``first_token``: when its first output token came (its TTFT from ``arrival``);
- ``pinned_block_seconds``: the run's pinned memory integrated over time;
- ``pin_timeline`` (only with ``TTLCTL_DIFF_TIMELINE=1``, measured, not asserted): the
  run's (time, pinned blocks) at every change of the pinned total. The fast backend samples
  its timeline at its next ``tick`` (a step boundary), vLLM's harness when the plugin's
  total changes: a pin made at a finish can show up a step or an idle gap later there
  (the block-seconds, integrated from the pin table, agree).

Times agree to a relative 1e-9: the fast backend prices a merged run of decode steps in one
sum, vLLM's harness step by step (the order of float additions). :class:`Tally` counts the
agreement per metric over many cases (``TTLCTL_DIFF_REPORT``, see ``test_differential.py``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from fitting.policy_params import PolicyParams
from profiles.cost import CostModel, ProfileCostModel
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.scheduler_stats import Stats
from replay.sim import ReplayConfig
from replay.sim_outcome import Outcome
from replay.vllmsim.outcome import Outcome as VllmOutcome
from replay.vllmsim.run import run
from replay.workload import AgentProgram, Call, SharedPrefix, Workload
from ttlctl import bundle_make

#: relative tolerance of times (float summation order, see the module docstring)
REL_TIME = 1e-9
METRICS = ("admitted_step", "hit_tokens", "preemptions", "finish_step", "finish")
TOOLS = ("grep", "pytest", "web", "bash")
#: 0 and tiny pauses (the follow-up arrives in the same or the next step), pauses around the
#: TTLs tried, long ones, and one past the program book's abandon_s (an hour)
#: compare the pin timelines too (see the module docstring)
TIMELINE = os.environ.get("TTLCTL_DIFF_TIMELINE") == "1"
PAUSES = (0.0, 0.0005, 0.02, 0.1, 0.3, 0.6, 2.0, 8.0, 40.0, 4000.0)


@dataclass(frozen=True, slots=True)
class Case:
    workload: Workload
    config: ReplayConfig
    load: Load
    spec: PolicySpec
    #: which bundle the spec carries ("cold", "fitted" or "-")
    bundle: str = "-"

    def describe(self) -> str:
        e = self.config.engine
        calls = [
            [
                (c.input_tokens, c.output_tokens, c.reused_tokens, c.pause_s)
                + ((c.prefix.hashes, c.prefix.block_tokens) if c.prefix else ())
                for c in p.calls
            ]
            for p in self.workload.programs
        ]
        return (
            f"{self.spec.name} valve={self.spec.valve} cap={self.spec.pin_cap} "
            f"ttl={self.spec.ttl_s} bundle={self.bundle} | blocks={e.num_blocks} "
            f"bs={e.block_size} budget={e.max_num_batched_tokens} seqs={e.max_num_seqs} "
            f"reserve={e.reserve_full_prompt} long_prefill={e.long_prefill_token_threshold}"
            f"{'~' if e.long_prefill_token_threshold_adaptive else ''} "
            f"watermark={e.watermark:g} | "
            f"{self.load} | starts={[p.start_s for p in self.workload.programs]} calls={calls}"
        )


def continuum_bundles(
    fit: Mapping[str, Any], cost: ProfileCostModel
) -> dict[str, dict[str, Any] | None]:
    """Continuum's bundles: none (cold start, learning online) and one fitted on ``fit``
    (the test session's synthetic trace: tools grep, pytest, web), priced by ``cost``."""
    fitted = bundle_make.build(
        fit,
        cost.profile.to_json(),
        PolicyParams(),
        created="1970-01-01T00:00:00+00:00",
        ttlctl_version="test",
        provenance={"test": True},
    )
    return {"cold": None, "fitted": fitted}


# ---------------------------------------------------------------------- strategies


#: shared prefixes (chained hashes): a tree (1, 2, … shared, then apart), of trace blocks
#: that divide, are divided by or neither the engine's 16 or 32
PREFIX_HASHES = ((1, 2, 3, 4, 5, 6), (1, 2, 3, 7, 8), (1, 9), (10, 11, 12))


@st.composite
def shared_prefix(draw: st.DrawFn) -> SharedPrefix | None:
    """One of a few products' prefixes (or none), some of them sharing their first blocks."""
    which = draw(st.integers(0, len(PREFIX_HASHES)))
    if which == len(PREFIX_HASHES):
        return None
    hashes = PREFIX_HASHES[which]
    n = draw(st.integers(1, len(hashes)))
    return SharedPrefix(hashes[:n], draw(st.sampled_from([8, 16, 24, 32, 64])))


@st.composite
def programs(
    draw: st.DrawFn, max_programs: int = 6, max_turns: int = 5, shared: bool = False
) -> list[AgentProgram]:
    """Programs whose calls repeat all, part or none of the previous stream (prompt +
    output) and add new tokens; a few repeat it whole with nothing new. With ``shared``,
    most programs' prompts start with a prefix other programs share (:data:`PREFIX_HASHES`);
    a first prompt may end inside it, and now and then a call changes prefix."""
    out: list[AgentProgram] = []
    for p in range(draw(st.integers(1, max_programs))):
        calls: list[Call] = []
        stream = 0
        prefix = draw(shared_prefix()) if shared else None
        for _ in range(draw(st.integers(1, max_turns))):
            if shared and draw(st.integers(0, 5)) == 0:
                prefix = draw(shared_prefix())
            how = draw(st.sampled_from(["all", "all", "all", "part", "none", "exact"]))
            if not stream or how == "none":
                reused = 0
            elif how == "part":
                reused = draw(st.integers(0, stream))
            else:
                reused = stream
            new = 0 if (how == "exact" and reused) else draw(st.integers(1, 160))
            if prefix is not None and not reused and draw(st.integers(0, 3)):
                new += len(prefix.hashes) * prefix.block_tokens  # the whole prefix, and more
            output = draw(st.one_of(st.integers(1, 24), st.integers(24, 80)))
            tool = draw(st.sampled_from(TOOLS))
            pause = draw(st.sampled_from(PAUSES))
            calls.append(Call(reused + new, output, reused, tool, pause, prefix))
            stream = reused + new + output
        start = draw(st.sampled_from([0.0, 0.0, 0.003, 0.05, 0.4]))
        out.append(AgentProgram(f"p{p}", start, tuple(calls)))
    return out


@st.composite
def engines(draw: st.DrawFn, work: Workload) -> SimSchedulerConfig:
    """From starved (a little more than the largest call) to ample."""
    bs = draw(st.sampled_from([16, 32]))
    largest = max(c.input_tokens + c.output_tokens for p in work.programs for c in p.calls)
    per_call = -(-largest // bs)
    blocks = draw(
        st.one_of(
            st.integers(per_call, per_call + 4),
            st.integers(per_call, 2 * per_call + 4),
            st.integers(per_call, 3 * per_call + 4),
            st.integers(per_call, per_call * (len(work.programs) + 1) + 8),
        )
    )
    budget = draw(st.sampled_from([16, 32, 64, 128, 512, 8192]))
    seqs = min(budget, draw(st.sampled_from([1, 2, 3, 8, 256])))
    return SimSchedulerConfig(
        kv_tokens=blocks * bs,
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        max_model_len=4096,
        # vLLM's scheduler_reserve_full_isl off: admission on the first chunk, preemptions
        reserve_full_prompt=draw(st.sampled_from([True, True, False])),
    )


loads = st.one_of(
    st.just(Load()),
    st.builds(Load, concurrency=st.integers(1, 4)),
    st.builds(Load, jps=st.sampled_from([2.0, 50.0]), seed=st.integers(0, 9)),
)


@st.composite
def specs(
    draw: st.DrawFn, bundles: Mapping[str, dict[str, Any] | None], pins_only: bool = False
) -> tuple[PolicySpec, str]:
    names = ["static-ttl", "continuum"]
    name = draw(st.sampled_from(names if pins_only else ["vllm", "program-fcfs", *names]))
    if name in ("vllm", "program-fcfs"):
        return PolicySpec(name), "-"
    valve = draw(st.sampled_from(["head", "stall-only"]))
    cap = draw(st.sampled_from([None, None, 0.5, 0.2]))
    if name == "static-ttl":
        ttl = draw(st.sampled_from([0.05, 0.5, 3.0, 30.0]))
        return PolicySpec(name, ttl_s=ttl, valve=valve, pin_cap=cap), "-"
    which = draw(st.sampled_from(sorted(bundles)))
    return PolicySpec(name, bundle=bundles[which], valve=valve, pin_cap=cap), which


@st.composite
def cases(
    draw: st.DrawFn,
    bundles: Mapping[str, dict[str, Any] | None],
    pressure: bool = False,
    shared: bool = False,
) -> Case:
    """``bundles``: name -> bundle for continuum (a cold-start one is None). One case in
    three (every case with ``pressure``) is under pressure: more programs, all at once, a
    policy that pins, and a cache that holds a few of their contexts at most. ``shared``:
    programs whose prompts start with prefixes shared across programs."""
    if pressure or draw(st.integers(0, 2)) == 0:
        work = Workload(tuple(draw(programs(max_programs=8, max_turns=6, shared=shared))))
        work = Workload(tuple(replace(p, start_s=0.0) for p in work.programs))
        engine = draw(engines(work))
        largest = max(c.input_tokens + c.output_tokens for p in work.programs for c in p.calls)
        per_call = -(-largest // engine.block_size)
        blocks = draw(st.integers(per_call, 2 * per_call + 2))
        engine = replace(engine, kv_tokens=blocks * engine.block_size)
        spec, which = draw(specs(bundles, pins_only=True))
        load = draw(st.sampled_from([Load(), Load(concurrency=3), Load(concurrency=6)]))
        return Case(work, ReplayConfig(engine=engine), load, spec, which)
    work = Workload(tuple(draw(programs(shared=shared))))
    engine = draw(engines(work))
    spec, which = draw(specs(bundles))
    return Case(work, ReplayConfig(engine=engine), draw(loads), spec, which)


@st.composite
def capped(draw: st.DrawFn, case: Case) -> Case:
    """``case`` with a prefill chunk cap (vLLM's ``--long-prefill-token-threshold``, from a
    few tokens to past the token budget; adaptive or not)."""
    engine = case.config.engine
    threshold = draw(st.sampled_from([1, 5, 16, 24, 40, 100, 300]))
    adaptive = draw(st.booleans())
    engine = replace(
        engine,
        long_prefill_token_threshold=threshold,
        long_prefill_token_threshold_adaptive=adaptive,
    )
    return replace(case, config=replace(case.config, engine=engine))


@st.composite
def watermarked(draw: st.DrawFn, case: Case) -> Case:
    """``case`` under vLLM's ``--watermark``: from a block or two of the cache kept free
    to a third of it (a share below one block keeps none)."""
    engine = case.config.engine
    share = draw(st.sampled_from([0.01, 0.05, 0.1, 0.2, 0.34]))
    engine = replace(engine, watermark=share)
    return replace(case, config=replace(case.config, engine=engine))


@st.composite
def model_length_cut(draw: st.DrawFn, case: Case) -> Case:
    """``case`` under a ``--max-model-len`` below its longest calls: a prompt that reaches
    it is refused (its program stops), a shorter one whose output runs past it is served
    with its output cut there (:func:`replay.sim.fits_engine`, as vLLM takes them)."""
    engine = case.config.engine
    sizes = sorted(
        {c.input_tokens + c.output_tokens for p in case.workload.programs for c in p.calls}
    )
    smallest_prompt = min(c.input_tokens for p in case.workload.programs for c in p.calls)
    low = smallest_prompt + 1  # at least one call is not refused
    high = max(low, sizes[-1] - 1)
    limit = draw(st.integers(low, high))
    engine = replace(engine, max_model_len=min(limit, engine.num_blocks * engine.block_size))
    return replace(case, config=replace(case.config, engine=engine))


# ---------------------------------------------------------------------- both backends


def run_both(
    case: Case, cost: CostModel, *, async_scheduling: bool = False
) -> tuple[Outcome, VllmOutcome]:
    # both backends schedule as asked: the fast one models vLLM's async scheduler
    config = replace(case.config, async_scheduling=async_scheduling)
    fast, _ = simulate_one(case.workload, case.spec, cost, config, case.load)
    ours = run(
        case.workload,
        case.spec,
        cost,
        case.config,
        case.load,
        async_scheduling=async_scheduling,
    )
    return fast, ours


@dataclass(frozen=True, slots=True)
class Diff:
    #: (program, turn), or ("*", -1) for a run-wide figure
    call: tuple[str, int]
    metric: str
    fast: Any
    vllm: Any
    #: when the call was sent (for ``finish``: its latency is ``fast - sent``)
    sent: float = 0.0


def pin_counts(stats: Stats) -> tuple[int, ...]:
    """A replay's ``pins``: made, hit, expired, released, dropped, held at the end, and
    refused by the pin cap."""
    s = stats
    return (
        s.pins_made,
        s.pins_hit,
        s.pins_expired,
        s.pins_released,
        s.pins_dropped,
        s.pins_held,
        s.pins_refused,
    )


def _pins(outcome: Outcome | VllmOutcome) -> tuple[int, ...]:
    return pin_counts(outcome.engine.stats)


def compare(fast: Outcome, ours: VllmOutcome) -> tuple[int, list[Diff]]:
    """(calls both finished, every difference)."""
    a = {(c.program, c.turn): c for c in fast.calls}
    b = {(c.program, c.turn): c for c in ours.calls}
    diffs = [Diff(k, "calls", k in a, k in b) for k in sorted(a.keys() ^ b.keys())]
    for k in sorted(a.keys() & b.keys()):
        x, y = a[k], b[k]
        for m in METRICS:
            u, v = getattr(x, m), getattr(y, m)
            same = math.isclose(u, v, rel_tol=REL_TIME, abs_tol=1e-12) if m == "finish" else u == v
            if not same:
                diffs.append(Diff(k, m, u, v, x.arrival))
    if _pins(fast) != _pins(ours):
        diffs.append(Diff(("*", -1), "pins", _pins(fast), _pins(ours)))
    diffs += compare_times(fast, ours)
    return len(a.keys() & b.keys()), diffs


def _close(u: float, v: float) -> bool:
    return math.isclose(u, v, rel_tol=REL_TIME, abs_tol=1e-12)


def compare_times(fast: Outcome, ours: VllmOutcome) -> list[Diff]:
    """The timing figures beside the steps: each call's first token (its TTFT), the pinned
    block-seconds and, with :data:`TIMELINE`, the pin timeline."""
    diffs: list[Diff] = []
    b = {(c.program, c.turn): c for c in ours.calls}
    for x in fast.calls:
        y = b.get((x.program, x.turn))
        if y is not None and not _close(x.first_token, y.first_token):
            diffs.append(Diff((x.program, x.turn), "first_token", x.first_token, y.first_token))
    u, v = fast.engine.stats.pinned_block_seconds, ours.engine.stats.pinned_block_seconds
    if not math.isclose(u, v, rel_tol=1e-7, abs_tol=1e-9):
        diffs.append(Diff(("*", -1), "pinned_block_seconds", u, v))
    s, t = fast.engine.timeline, ours.engine.timeline
    if TIMELINE and s != t:
        same = [e[1] == f[1] and _close(e[0], f[0]) for e, f in zip(s, t, strict=False)]
        if len(s) != len(t) or not all(same):
            at = same.index(False) if False in same else min(len(s), len(t))
            diffs.append(Diff(("*", -1), "pin_timeline", s[at : at + 3], t[at : at + 3]))
    return diffs


@dataclass
class Tally:
    """Agreement per metric over many cases: calls that agree, cases with no difference."""

    cases: int = 0
    calls: int = 0
    cases_agreeing: int = 0
    #: metric -> calls (cases for ``pins`` and ``calls``) that differ
    differing: dict[str, int] = field(default_factory=dict)
    #: metric -> cases with at least one difference
    cases_differing: dict[str, int] = field(default_factory=dict)
    #: a few differing cases, described
    examples: list[str] = field(default_factory=list)
    #: cases in which vLLM preempted, pinned, ... (what the cases exercised)
    seen: dict[str, int] = field(default_factory=dict)
    #: metric -> "vLLM minus fast" -> calls, for the step and count metrics that differ
    shifts: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the largest relative difference of a call's latency (send to finish), vLLM's
    #: against the fast backend's, over the calls whose finish differs
    latency_rel_max: float = 0.0
    latency_rel_sum: float = 0.0

    def add(
        self, case: Case, calls: int, diffs: list[Diff], ours: VllmOutcome | None = None
    ) -> None:
        self.cases += 1
        self.calls += calls
        if ours is not None:
            for what, n in exercised(case, ours).items():
                if n:
                    self.seen[what] = self.seen.get(what, 0) + 1
        if not diffs:
            self.cases_agreeing += 1
            return
        seen = set()
        for d in diffs:
            self.differing[d.metric] = self.differing.get(d.metric, 0) + 1
            seen.add(d.metric)
            if d.metric == "finish":
                rel = abs(d.vllm - d.fast) / max(d.fast - d.sent, 1e-12)
                self.latency_rel_max = max(self.latency_rel_max, rel)
                self.latency_rel_sum += rel
            elif d.metric in ("admitted_step", "finish_step", "preemptions", "hit_tokens"):
                by = self.shifts.setdefault(d.metric, {})
                key = f"{d.vllm - d.fast:+d}"
                by[key] = by.get(key, 0) + 1
        for m in seen:
            self.cases_differing[m] = self.cases_differing.get(m, 0) + 1
        if len(self.examples) < 20:
            shown = ", ".join(f"{d.call} {d.metric} fast={d.fast} vllm={d.vllm}" for d in diffs[:4])
            self.examples.append(f"{case.describe()}\n    -> {shown}")

    def merge_into(self, path: Path) -> None:
        """Add this tally to the one in ``path`` (created if absent)."""
        doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        for key in ("cases", "calls", "cases_agreeing"):
            doc[key] = doc.get(key, 0) + getattr(self, key)
        for key in ("differing", "cases_differing", "seen"):
            into = doc.setdefault(key, {})
            for m, n in getattr(self, key).items():
                into[m] = into.get(m, 0) + n
        shifts = doc.setdefault("shifts", {})
        for m, by in self.shifts.items():
            into = shifts.setdefault(m, {})
            for k, n in by.items():
                into[k] = into.get(k, 0) + n
        doc["latency_rel_max"] = max(doc.get("latency_rel_max", 0.0), self.latency_rel_max)
        doc["latency_rel_sum"] = doc.get("latency_rel_sum", 0.0) + self.latency_rel_sum
        doc["examples"] = (doc.get("examples", []) + self.examples)[:40]
        path.write_text(json.dumps(doc, indent=1))


def exercised(case: Case, ours: VllmOutcome) -> dict[str, int]:
    """What a case made vLLM do (for the tally's coverage)."""
    s = ours.engine.stats
    budget = case.config.engine.max_num_batched_tokens
    calls = {p.program_id: p.calls for p in case.workload.programs}
    return {
        "preemptions": s.preemptions,
        "prefix_hits": s.hit_tokens,
        # calls that hit more than their own program's stream holds: blocks another
        # program computed
        "shared_hits": sum(
            c.hit_tokens > (calls[c.program][c.turn].reused_tokens if c.turn else 0)
            for c in ours.calls
        ),
        "chunked_prefill": sum(c.prompt - c.hit_tokens > budget for c in ours.calls),
        "pins_made": s.pins_made,
        "pins_hit": s.pins_hit,
        "pins_expired": s.pins_expired,
        "pins_released": s.pins_released,
        "rejected_calls": ours.rejected_calls,
    }


def shared_slice(work: Workload, programs: int, calls: int, max_output: int) -> Workload:
    """The first ``programs`` programs with their first ``calls`` calls, outputs capped at
    ``max_output`` tokens (vLLM's scheduler steps every decode token: keep it cheap); a
    call's reuse is capped by what the capped previous call left."""
    out = []
    for p in work.programs[:programs]:
        kept: list[Call] = []
        stream = 0
        for c in p.calls[:calls]:
            reused = min(c.reused_tokens, stream)
            call = replace(c, output_tokens=min(c.output_tokens, max_output), reused_tokens=reused)
            kept.append(call)
            stream = call.input_tokens + call.output_tokens
        out.append(AgentProgram(p.program_id, p.start_s, tuple(kept)))
    return Workload(tuple(out))


# ---------------------------------------------------------------------- large cases

#: static τ of the large cases; their pauses sit at τ, just before and just after it
LARGE_TTLS = (0.05, 0.5, 3.0)
#: a product's prefix (system prompt and tools): trace blocks of 256 tokens, chained
LARGE_PREFIX = tuple(range(100, 112))


@st.composite
def large_cases(draw: st.DrawFn, bundles: Mapping[str, dict[str, Any] | None]) -> Case:
    """Contexts up to 32k tokens, up to 32 programs, most starting with one product's
    prefix (shared across programs), pauses at τ ± a few ms, and a cache that holds a
    few contexts at most (memory pressure). Outputs stay short: vLLM's scheduler steps
    every decode token."""
    ttl = draw(st.sampled_from(LARGE_TTLS))
    near = st.sampled_from([ttl - 0.05, ttl - 0.002, ttl, ttl + 0.002, ttl + 0.05, 0.0])
    out: list[AgentProgram] = []
    for p in range(draw(st.integers(2, 32))):
        prefix = None
        if draw(st.integers(0, 3)):
            prefix = SharedPrefix(LARGE_PREFIX[: draw(st.integers(1, 12))], 256)
        first = draw(st.sampled_from([300, 2_000, 8_000, 16_000, 30_000]))
        first += draw(st.integers(0, 600))
        calls: list[Call] = []
        stream = 0
        for _ in range(draw(st.integers(1, 4))):
            new = first if not stream else draw(st.integers(1, 1_500))
            prompt = min(stream + new, 32_000)
            reused = min(stream, prompt - 1)
            output = draw(st.integers(1, 12))
            calls.append(Call(prompt, output, reused, "bash", max(0.0, draw(near)), prefix))
            stream = prompt + output
        out.append(AgentProgram(f"p{p}", draw(st.sampled_from([0.0, 0.0, 0.01])), tuple(calls)))
    work = Workload(tuple(out))
    largest = max(c.input_tokens + c.output_tokens for p in work.programs for c in p.calls)
    per_call = -(-largest // 16)
    blocks = draw(st.integers(per_call, 3 * per_call + 16))
    engine = SimSchedulerConfig(
        kv_tokens=blocks * 16,
        block_size=16,
        max_num_batched_tokens=draw(st.sampled_from([2048, 8192])),
        max_num_seqs=draw(st.sampled_from([8, 256])),
        max_model_len=32_768,
        reserve_full_prompt=draw(st.sampled_from([True, True, False])),
    )
    name = draw(st.sampled_from(["static-ttl", "static-ttl", "continuum", "vllm"]))
    valve = draw(st.sampled_from(["head", "stall-only"]))
    cap = draw(st.sampled_from([None, 0.5]))
    if name == "static-ttl":
        spec, which = PolicySpec(name, ttl_s=ttl, valve=valve, pin_cap=cap), "-"
    elif name == "continuum":
        which = draw(st.sampled_from(sorted(bundles)))
        spec = PolicySpec(name, bundle=bundles[which], valve=valve, pin_cap=cap)
    else:
        spec, which = PolicySpec(name), "-"
    load = draw(st.sampled_from([Load(), Load(concurrency=8), Load(concurrency=16)]))
    return Case(work, ReplayConfig(engine=engine), load, spec, which)


@st.composite
def boundary_cases(draw: st.DrawFn) -> Case:
    """Lengths at block boundaries (a multiple of the block size, one less, one more), a
    cache with room for the largest call and a little more, small token budgets, several
    programs at once: an off-by-one in a reservation, a block count or a prefix hit changes
    when a call is admitted here."""
    bs = 16
    out: list[AgentProgram] = []
    for p in range(draw(st.integers(2, 6))):
        calls: list[Call] = []
        stream = 0
        for _ in range(draw(st.integers(1, 3))):
            total = bs * draw(st.integers(1, 8)) + draw(st.sampled_from([-1, 0, 1]))
            prompt = max(stream + 1, total)
            reused = stream if draw(st.booleans()) else 0
            output = draw(st.sampled_from([1, 2, bs - 1, bs, bs + 1]))
            calls.append(Call(prompt, output, reused, "bash", draw(st.sampled_from(PAUSES[:5]))))
            stream = prompt + output
        out.append(AgentProgram(f"p{p}", draw(st.sampled_from([0.0, 0.0, 0.001])), tuple(calls)))
    work = Workload(tuple(out))
    largest = max(c.input_tokens + c.output_tokens for p in work.programs for c in p.calls)
    per_call = -(-largest // bs)
    budget = draw(st.sampled_from([16, 17, 31, 48, 8192]))
    engine = SimSchedulerConfig(
        kv_tokens=draw(st.integers(per_call, 2 * per_call + 2)) * bs,
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=min(budget, 8),
        max_model_len=4096,
        reserve_full_prompt=draw(st.booleans()),
    )
    if draw(st.booleans()):
        ttl = draw(st.sampled_from([0.02, 0.1, 0.3]))
        valve = draw(st.sampled_from(["head", "stall-only"]))
        cap = draw(st.sampled_from([None, 0.3]))
        spec = PolicySpec("static-ttl", ttl_s=ttl, valve=valve, pin_cap=cap)
    else:
        spec = PolicySpec(draw(st.sampled_from(["vllm", "program-fcfs"])))
    load = draw(st.sampled_from([Load(), Load(concurrency=2)]))
    return Case(work, ReplayConfig(engine=engine), load, spec)
