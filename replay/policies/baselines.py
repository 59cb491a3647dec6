"""Baselines from the literature: InferCept and Autellix (docs/method.md, "Baselines"),
and the evaluation-only oracle. InferCept and the oracle pin through the same pin rules
as every TTL policy (:mod:`replay.pinning`); each is its own τ source."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fitting.policy_params import DEFAULT_VALVE, PolicyParams
from replay.policies.common import NoHooks, Observes, program_key, rules
from replay.policies.simple import VLLM
from replay.request import SimRequest
from replay.scheduler import SimScheduler
from ttlctl.engine.calls import Live
from ttlctl.engine.source import TauSource


@dataclass(slots=True)
class InferCept(VLLM, Observes):
    """Preserve a paused request's KV while that wastes less memory-time than
    recomputing it would: TTL ≈ Tfwd(C)·(C + C_other)/(2C), request-level FCFS.

    C is the request's context, C_other the context of the other running
    requests (their wait is the recompute's cost), Tfwd the prefill time of C.
    With an offload tier the KV also survives on the host (write-through), so a
    discard costs a reload, not a prefill. The head valve, no pin cap.
    """

    name: str = "infercept"
    pin_cap: float = 1.0
    _rules: PolicyParams | None = None
    _engine: SimScheduler | None = None

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        self._rules = rules("head", self.pin_cap)
        self._engine = engine
        return self

    @property
    def params(self) -> PolicyParams:
        assert self._rules is not None
        return self._rules

    def tau(self, live: Live, context_tokens: int) -> float:
        engine = self._engine
        assert engine is not None and isinstance(live.request, SimRequest)
        req = live.request
        context = max(1, context_tokens)
        others = sum(engine.context_tokens(r) for r in engine.running if r is not req)
        if engine.offload is not None:
            forward = engine.cost.reload_s(context)
        else:
            forward = engine.cost.rebuild_s(context, engine.config.max_num_batched_tokens)
        return forward * (context + others) / (2 * context)


@dataclass(slots=True)
class Autellix:
    """Program-level least attained service: multi-level queues by the tokens a
    program has been served so far, with anti-starvation; nothing is retained."""

    name: str = "autellix"
    #: service (tokens) of the first queue level; each next level doubles it
    base_tokens: float = 8192.0
    levels: int = 8
    #: a request waiting longer than this goes to the top queue
    starvation_s: float = 60.0
    _service: dict[str, float] = field(default_factory=dict)
    _now: float = 0.0

    def _level(self, program: str) -> int:
        served = self._service.get(program, 0.0)
        if served < self.base_tokens:
            return 0
        return min(self.levels - 1, 1 + int(math.log2(served / self.base_tokens)))

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        level = 0 if self._now - req.arrival > self.starvation_s else self._level(req.program)
        return (
            0.0 if req.preempted else 1.0,
            float(level),
            req.program_start,
            float(req.program_seq),
            req.arrival,
        )

    def on_arrival(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        self._now = now

    def on_admit(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        self._now = now
        engine.touch_order()  # waiting times moved on: starvation may promote someone

    def on_finish(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        self._now = now
        served = (req.prompt - req.hit_tokens) + req.output
        self._service[req.program] = self._service.get(req.program, 0.0) + served
        if req.is_last:
            self._service.pop(req.program, None)
        engine.touch_order()

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        return None


@dataclass(slots=True)
class Oracle(NoHooks, Observes):
    """EVALUATION ONLY: reads each pause's true length and whether a call is the
    last (``pauses``: :meth:`replay.workload.Workload.pauses`, which has no pause after a
    program's last call, whatever the client tags), and pins exactly when keeping the
    context pays: when the pause is shorter than what losing the context would cost
    (rebuilding it, plus the mean queueing delay that returning programs without a pin
    have suffered so far).
    Stall-only valve by default (the best in the reference model of docs/method.md), no
    pin cap unless one is given (``--pin-cap``, as for the other TTL policies)."""

    pauses: dict[tuple[str, int], float]
    name: str = "oracle"
    valve_name: str = DEFAULT_VALVE
    pin_cap: float = 1.0
    _delays: list[float] = field(default_factory=list)
    _rules: PolicyParams | None = None
    _engine: SimScheduler | None = None

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        return program_key(req, engine)

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        self._rules = rules(self.valve_name, self.pin_cap)
        self._engine = engine
        return self

    @property
    def params(self) -> PolicyParams:
        assert self._rules is not None
        return self._rules

    def observe_queue_delay(self, seconds: float) -> None:
        """A program that came back without a pin waited this long to be admitted."""
        self._delays.append(seconds)
        if len(self._delays) > 100:
            del self._delays[0]

    def tau(self, live: Live, context_tokens: int) -> float:
        engine = self._engine
        assert engine is not None and isinstance(live.request, SimRequest)
        req = live.request
        pause = self.pauses.get((req.program, req.turn))
        if pause is None:
            return 0.0
        rebuild = engine.cost.rebuild_s(context_tokens, engine.config.max_num_batched_tokens)
        if engine.offload is not None:
            rebuild = min(rebuild, engine.cost.reload_s(context_tokens))
        queueing = sum(self._delays) / len(self._delays) if self._delays else 0.0
        if pause >= rebuild + queueing:
            return 0.0
        # the call reaches the scheduler at the end of the step in progress when it is sent
        # (pins expire at step starts and arrivals, before the arrival): hold past that
        return pause + engine.stats.longest_step_s + 1e-6
