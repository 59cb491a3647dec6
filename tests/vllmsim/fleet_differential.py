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
- per replica, its pins made, handed over, expired and released under pressure, and its
  pinned block-seconds; for the fleet, ``pins_wasted``.

Times agree to the single-engine comparison's relative 1e-9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import strategies as st

from profiles.cost import CostModel
from replay.fleet.loop import FleetOutcome
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.vllmsim.fleet import simulate
from tests.vllmsim.differential import METRICS, REL_TIME, Case, Diff

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

    def fleet(self, backend: str = "fast") -> FleetSpec:
        return FleetSpec(self.replicas, RouterSettings(self.router), backend=backend)


@st.composite
def fleet_cases(draw: st.DrawFn, cases: st.SearchStrategy[Case]) -> FleetCase:
    return FleetCase(draw(cases), draw(st.sampled_from([2, 2, 3])), draw(st.sampled_from(ROUTERS)))


def run_fleets(fc: FleetCase, cost: CostModel) -> tuple[FleetOutcome, FleetOutcome]:
    c = fc.case
    fast, _, _ = simulate_fleet_one(c.workload, c.spec, cost, c.config, c.load, fc.fleet())
    ours = simulate(c.workload, c.spec, cost, c.config, c.load, fc.fleet("vllm"))
    return fast, ours.outcome


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
        pins = (s.pins_made, s.pins_hit, s.pins_expired, s.pins_released)
        ours_pins = (t.pins_made, t.pins_hit, t.pins_expired, t.pins_released)
        if pins != ours_pins:
            diffs.append(Diff((f"replica {i}", -1), "pins", pins, ours_pins))
        u, v = s.pinned_block_seconds, t.pinned_block_seconds
        if not math.isclose(u, v, rel_tol=1e-7, abs_tol=1e-9):
            diffs.append(Diff((f"replica {i}", -1), "pinned_block_seconds", u, v))
    if fast.pins_wasted != ours.pins_wasted:
        diffs.append(Diff(("*", -1), "pins_wasted", fast.pins_wasted, ours.pins_wasted))
    return len(a.keys() & b.keys()), diffs
