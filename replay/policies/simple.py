"""Policies without learning: stock vLLM, program-level FCFS, a static TTL."""

from __future__ import annotations

from dataclasses import dataclass, field

from fitting.policy_params import PolicyParams
from replay.policies.common import NoHooks, Observes, fcfs_key, program_key, rules
from replay.request import SimRequest
from replay.scheduler import SimScheduler
from ttlctl.engine.calls import Live
from ttlctl.engine.source import TauSource


@dataclass(slots=True)
class VLLM(NoHooks):
    """vLLM's default: request-level FCFS, KV freed at finish into the LRU free list."""

    name: str = "vllm"

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return fcfs_key(req)

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        return None


@dataclass(slots=True)
class ProgramFCFS(VLLM, Observes):
    """Programs served in the order they started (docs/method.md), nothing pinned: the
    plugin with pins off (its program book gives the order)."""

    name: str = "program-fcfs"
    _rules: PolicyParams = field(default_factory=lambda: rules(pins=False))

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine)

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        return self

    @property
    def params(self) -> PolicyParams:
        return self._rules

    def tau(self, live: Live, context_tokens: int) -> float:
        return 0.0


#: static-ttl's valve when none is asked for: the paper's rule, as its baseline ran
STATIC_TTL_VALVE = "head"


@dataclass(slots=True)
class StaticTTL(VLLM, Observes):
    """Program FCFS and the same fixed TTL after every call but the last."""

    ttl_s: float = 2.0
    valve_name: str = STATIC_TTL_VALVE
    pin_cap: float = 1.0
    name: str = "static-ttl"
    _rules: PolicyParams | None = None

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine)

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        self._rules = rules(self.valve_name, self.pin_cap)
        return self

    @property
    def params(self) -> PolicyParams:
        assert self._rules is not None
        return self._rules

    def tau(self, live: Live, context_tokens: int) -> float:
        return self.ttl_s
