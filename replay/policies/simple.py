"""Policies without learning: stock vLLM, program-level FCFS, a static TTL."""

from __future__ import annotations

from dataclasses import dataclass

from replay.policies.common import apply_valve, fcfs_key, program_key, under_cap
from replay.request import SimRequest
from replay.scheduler import SimScheduler


@dataclass(slots=True)
class VLLM:
    """vLLM's default: request-level FCFS, KV freed at finish into the LRU free list."""

    name: str = "vllm"

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return fcfs_key(req)

    def on_arrival(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        pass

    def on_admit(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        pass

    def ttl_on_finish(self, req: SimRequest, engine: SimScheduler, now: float) -> float:
        return 0.0

    def valve(self, engine: SimScheduler, head: SimRequest, now: float, stalled: bool) -> None:
        pass


@dataclass(slots=True)
class ProgramFCFS(VLLM):
    """Programs served in the order they started (docs/method.md), nothing pinned."""

    name: str = "program-fcfs"

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine, pin_first=False)


@dataclass(slots=True)
class StaticTTL(VLLM):
    """Program FCFS and the same fixed TTL after every call but the last."""

    ttl_s: float = 2.0
    valve_name: str = "head"
    pin_cap: float = 1.0
    name: str = "static-ttl"

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine, pin_first=True)

    def ttl_on_finish(self, req: SimRequest, engine: SimScheduler, now: float) -> float:
        if req.is_last or not under_cap(engine, req, self.pin_cap):
            return 0.0
        return self.ttl_s

    def valve(self, engine: SimScheduler, head: SimRequest, now: float, stalled: bool) -> None:
        apply_valve(self.valve_name, engine, head, stalled)
