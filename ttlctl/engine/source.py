"""Where τ comes from: the one thing that differs between the TTL policies.

The pin rules (:class:`~ttlctl.engine.retention.Retention`) are the same for every
policy that pins; a :class:`TauSource` says how long to pin a finished call, which
valve and pin cap apply (its ``params``) and learns from what the rules observe (a
program's pause, the queueing delay of a program that came back without a pin, a
program's end). The plugin's source is the bundle's :class:`~fitting.policy.TTLPolicy`
(:class:`PolicySource`); the simulator's policies bring their own (a constant τ, the
oracle's true pauses, InferCept's formula) and the bundle's policy for ``continuum``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fitting.policy import TTLPolicy
from fitting.policy_params import PolicyParams
from ttlctl.engine.calls import Live


class TauSource(Protocol):
    @property
    def params(self) -> PolicyParams:
        """``valve``, ``pin_cap``, ``pins`` (off: never pin) and ``abandon_s`` (the program
        book forgets a program idle that long) apply to the rules."""
        ...

    def observe_pause(self, tool: str | None, seconds: float) -> object: ...

    def observe_queue_delay(self, seconds: float) -> None: ...

    def observe_program_end(self, n_calls: int) -> None: ...

    def tau(self, live: Live, context_tokens: int) -> float:
        """Seconds to pin a call that just finished (not the last of its program) with
        ``context_tokens`` of KV; 0: do not pin."""
        ...


@dataclass(slots=True)
class PolicySource:
    """The bundle's online policy as a τ source: τ* = ``TTLPolicy.decide(tool, context)``
    (``offload``: a miss is priced as a reload from the offload tier)."""

    policy: TTLPolicy
    offload: bool = False

    @property
    def params(self) -> PolicyParams:
        return self.policy.params

    def observe_pause(self, tool: str | None, seconds: float) -> object:
        return self.policy.observe_pause(tool, seconds)

    def observe_queue_delay(self, seconds: float) -> None:
        self.policy.observe_queue_delay(seconds)

    def observe_program_end(self, n_calls: int) -> None:
        self.policy.observe_program_end(n_calls)

    def tau(self, live: Live, context_tokens: int) -> float:
        return self.policy.decide(live.tags.tool, context_tokens, offload=self.offload).ttl_s
