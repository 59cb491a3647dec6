"""CacheTTL (Continuum): τ* from the bundle's policy, program-level scheduling, the valve.

The decision is made by :class:`fitting.policy.TTLPolicy`, the same object the vLLM
scheduler plugin uses, as the same τ source (:class:`ttlctl.engine.source.PolicySource`)
of the same pin rules, fed the same events: a pause observed when a program comes back
(next arrival − previous finish, with the tool the client tagged), the queueing delay
of a program that came back without a pin (T), a program's end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitting.policy import TTLPolicy
from fitting.policy_params import DEFAULT_VALVE
from replay.policies.common import NoHooks, program_key
from replay.request import SimRequest
from replay.scheduler import SimScheduler
from ttlctl.engine.source import PolicySource, TauSource


@dataclass(slots=True)
class Continuum(NoHooks):
    ttl: TTLPolicy
    valve_name: str = DEFAULT_VALVE
    pin_cap: float = 1.0
    name: str = "continuum"

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine)

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        # the valve and the pin cap asked for replace the bundle's, as a server's bundle
        # is rebuilt with them (replay.vllmsim.bundles)
        self.ttl.params = replace(self.ttl.params, valve=self.valve_name, pin_cap=self.pin_cap)
        return PolicySource(self.ttl, offload=engine.offload is not None)
