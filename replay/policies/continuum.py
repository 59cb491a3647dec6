"""CacheTTL (Continuum): τ* from the bundle's policy, program-level scheduling, the valve.

The decision is made by :class:`fitting.policy.TTLPolicy`, the same object the
vLLM scheduler plugin uses, fed the same events: a pause observed when a program
comes back (next arrival − previous finish, with the tool the client tagged), the
queueing delay of a program that came back without a pin (T), a program's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fitting.policy import DEFAULT_VALVE, TTLPolicy
from replay.policies.common import apply_valve, program_key, under_cap
from replay.request import SimRequest
from replay.scheduler import SimScheduler


@dataclass(slots=True)
class Continuum:
    ttl: TTLPolicy
    valve_name: str = DEFAULT_VALVE
    pin_cap: float = 1.0
    name: str = "continuum"
    _last_finish: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    _evicted: set[int] = field(default_factory=set)

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine, pin_first=True)

    def on_arrival(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        last = self._last_finish.pop(req.program, None)
        if last is not None:
            finished_at, tool = last
            self.ttl.observe_pause(tool, now - finished_at)
            if req.program not in engine.pins:
                self._evicted.add(req.rid)

    def on_admit(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        if req.rid in self._evicted:
            self._evicted.discard(req.rid)
            self.ttl.observe_queue_delay(now - req.arrival)

    def ttl_on_finish(self, req: SimRequest, engine: SimScheduler, now: float) -> float:
        if req.is_last:
            self.ttl.observe_program_end(req.turn + 1)
            return 0.0
        self._last_finish[req.program] = (now, req.tool)
        decision = self.ttl.decide(req.tool, req.computed, offload=engine.offload is not None)
        if decision.ttl_s <= 0 or not under_cap(engine, req, self.pin_cap):
            return 0.0
        return decision.ttl_s

    def valve(self, engine: SimScheduler, head: SimRequest, now: float, stalled: bool) -> None:
        apply_valve(self.valve_name, engine, head, stalled)
