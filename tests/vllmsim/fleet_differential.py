"""The fast fleet against a fleet of vLLM schedulers: the same cases, call by call.

A :class:`FleetCase` is a single-engine :class:`~tests.vllmsim.differential.Case` (its
workload, engine, load and policy) on ``replicas`` engines of that size behind
``router``. :func:`run_fleets` replays it on both backends (the fast fleet,
:func:`replay.fleet.run.simulate_fleet_one`; vLLM's schedulers in the same loop,
:func:`replay.vllmsim.fleet.simulate`); :func:`compare_fleets` lists every difference:

- per call, the single-engine comparison's figures (``differential.METRICS``: the step it
  was admitted in and finished in, on its replica; its prefix hit; preemptions; its finish
  time), its first token, and ``replica``: where the router sent it;
- per call, its route as the books kept it: the previous call's replica, whether that
  call was pinned and until when, and whether the pin was still held when this call came
  (what ``pins_wasted`` and ``miss_reasons`` are read from);
- per replica, its pins made, handed over, expired, released under pressure, dropped,
  still held at the end and refused by the pin cap, and its pinned block-seconds; for the
  fleet, ``pins_wasted``.

Times agree to the single-engine comparison's relative 1e-9.

One deviation, from the fast fleet's model (docs/replay.md, "Backends"), is bounded
rather than absent (:func:`deviations`):

- **a stale view of a decode run**: a replica of the fast fleet waiting in a run of
  decode steps shows the router its cache as of the run's start; vLLM's replica steps,
  and shows it as of its current step. So a router that reads the KV events (kv-aware,
  pin-aware) may score a call differently when a decode step meanwhile evicted a block.
  Bound: every call that finished before the first view answer that differs agrees, and
  at that answer the replica was waiting in a decode run on the fast side.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st

from profiles.cost import CostModel
from replay.fleet import loop
from replay.fleet.loop import FleetOutcome
from replay.fleet.parts import Fleet
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.fleet.view import FleetState
from replay.sim_outcome import ProgramRun
from replay.vllmsim.fleet import simulate
from tests.vllmsim.differential import METRICS, REL_TIME, Case, Diff, pin_counts

#: the deterministic routers the comparison runs (no draw, no held calls); kv-aware and
#: pin-aware read the replicas' KV events (vLLM's block pool on the vLLM side)
ROUTERS = ("round-robin", "consistent-hash", "cache-aware", "pin-aware", "kv-aware")


@dataclass(frozen=True, slots=True)
class FleetCase:
    case: Case
    replicas: int
    router: str

    def describe(self) -> str:
        return f"{self.replicas} x {self.router} | {self.case.describe()}"

    def fleet(self, backend: str = "fast", *, async_scheduling: bool = False) -> FleetSpec:
        return FleetSpec(
            self.replicas,
            RouterSettings(self.router),
            backend=backend,
            async_scheduling=async_scheduling,
        )


@st.composite
def fleet_cases(draw: st.DrawFn, cases: st.SearchStrategy[Case]) -> FleetCase:
    return FleetCase(draw(cases), draw(st.sampled_from([2, 2, 3])), draw(st.sampled_from(ROUTERS)))


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer of the router's view about a replica's cache."""

    program: str
    turn: int
    replica: int
    tokens: int
    #: when the call was routed
    sent: float
    #: the replica was waiting in a run of decode steps then
    in_decode_run: bool


@dataclass
class ViewLog:
    """The router's view's cache answers, per backend, in the order it gave them."""

    answers: dict[str, list[Answer]] = field(default_factory=lambda: {"fast": [], "vllm": []})
    backend: str = "fast"
    _sent: float = 0.0
    _waiting: frozenset[int] = frozenset()

    @contextmanager
    def watching(self) -> Iterator[None]:
        route, cached = loop.route, FleetState.cached_tokens

        def routed(fleet: Fleet, run: ProgramRun, sent: float) -> None:
            self._sent = sent
            self._waiting = frozenset(
                r.index for r in fleet.replicas if r.deferred_from is not None
            )
            route(fleet, run, sent)

        def answered(view: FleetState, replica: int, call: Any) -> int:
            tokens = cached(view, replica, call)
            self.answers[self.backend].append(
                Answer(
                    call.program, call.turn, replica, tokens, self._sent, replica in self._waiting
                )
            )
            return tokens

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(loop, "route", routed)
            mp.setattr(FleetState, "cached_tokens", answered)
            yield

    def first_difference(self) -> tuple[Answer, Answer] | None:
        for a, b in zip(self.answers["fast"], self.answers["vllm"], strict=False):
            if (a.program, a.turn, a.replica, a.tokens) != (b.program, b.turn, b.replica, b.tokens):
                return a, b
        return None


def run_fleets(
    fc: FleetCase, cost: CostModel, log: ViewLog | None = None, *, async_scheduling: bool = False
) -> tuple[FleetOutcome, FleetOutcome]:
    """Both fleets on ``fc`` (``async_scheduling``: vLLM's ``AsyncScheduler`` on every
    vLLM replica, :class:`~replay.async_sched.AsyncSimScheduler` on every fast one)."""
    c = fc.case
    if log is not None:
        log.backend = "fast"
    fleet = fc.fleet(async_scheduling=async_scheduling)
    fast, _, _ = simulate_fleet_one(c.workload, c.spec, cost, c.config, c.load, fleet)
    if log is not None:
        log.backend = "vllm"
    fleet = fc.fleet("vllm", async_scheduling=async_scheduling)
    ours = simulate(c.workload, c.spec, cost, c.config, c.load, fleet)
    return fast, ours.outcome


def deviations(diffs: list[Diff], log: ViewLog, fast: FleetOutcome) -> list[Diff]:
    """The differences the known deviation (the module docstring) does not explain
    (``fast``: the fast fleet's outcome)."""
    left = list(diffs)
    first = log.first_difference()
    if first is None:
        return left
    stale, _ = first
    if not stale.in_decode_run:
        return left  # a view answer differs, but not from a stale decode run
    # every call that finished before the first differing answer agrees; the routes
    # differ from there on, and with them the replicas' loads and figures
    finished = {(c.program, c.turn): c.finish for c in fast.calls}
    return [
        d
        for d in left
        if d.call[1] >= 0 and finished.get((str(d.call[0]), d.call[1]), math.inf) < stale.sent
    ]


def _close(u: float, v: float) -> bool:
    return math.isclose(u, v, rel_tol=REL_TIME, abs_tol=1e-12)


def _same(u: object, v: object) -> bool:
    if isinstance(u, float) and isinstance(v, float):
        return _close(u, v)
    return u == v


def compare_fleets(fast: FleetOutcome, ours: FleetOutcome) -> tuple[int, list[Diff]]:
    """(calls both finished, every difference)."""
    a = {(c.program, c.turn): (c, r) for c, r in zip(fast.calls, fast.call_replicas, strict=True)}
    b = {(c.program, c.turn): (c, r) for c, r in zip(ours.calls, ours.call_replicas, strict=True)}
    diffs = [Diff(k, "calls", k in a, k in b) for k in sorted(a.keys() ^ b.keys())]
    for k in sorted(a.keys() & b.keys()):
        (x, rx), (y, ry) = a[k], b[k]
        if rx != ry:
            diffs.append(Diff(k, "replica", rx, ry, x.arrival))
        for m in (*METRICS, "first_token"):
            u, v = getattr(x, m), getattr(y, m)
            if not _same(u, v):
                diffs.append(Diff(k, m, u, v, x.arrival))
        p, q = fast.routes[k], ours.routes[k]
        for m in ("previous", "previous_pin_expiry", "pin_held", "delivered"):
            u, v = getattr(p, m), getattr(q, m)
            if not (u is None and v is None) and (u is None or v is None or not _same(u, v)):
                diffs.append(Diff(k, f"route.{m}", u, v, x.arrival))
    for i, (e, f) in enumerate(zip(fast.engines, ours.engines, strict=True)):
        s, t = e.stats, f.stats
        pins, ours_pins = pin_counts(s), pin_counts(t)
        if pins != ours_pins:
            diffs.append(Diff((f"replica {i}", -1), "pins", pins, ours_pins))
        u, v = s.pinned_block_seconds, t.pinned_block_seconds
        if not math.isclose(u, v, rel_tol=1e-7, abs_tol=1e-9):
            diffs.append(Diff((f"replica {i}", -1), "pinned_block_seconds", u, v))
    if fast.pins_wasted != ours.pins_wasted:
        diffs.append(Diff(("*", -1), "pins_wasted", fast.pins_wasted, ours.pins_wasted))
    return len(a.keys() & b.keys()), diffs
