"""The engine core's batch queue: how many steps are in flight, when each one's output
is applied (vLLM 0.32, ``vllm/v1/engine/core.py``).

Synchronous (``EngineCore.step``, a queue of one): ``schedule()``, the step runs, its
output is applied at its end. Async (``EngineCore.step_with_batch_queue``, a queue of
two): ``schedule()`` of step N+1 is called while step N runs, before N's output is
applied. A scheduled step does not block the loop while the queue has room and there is
work; otherwise the oldest step's output is waited for (the clock moves to its end) and
applied. A step starts executing when the one before it ends.

One :meth:`BatchQueue.turn` is that loop up to the next output applied. Both drivers of
vLLM's scheduler take their steps through it: the single-engine harness
(:class:`replay.vllmsim.harness.Harness`) and each replica of the vLLM fleet
(:class:`replay.vllmsim.engine.VllmEngine`), so the two schedule and apply in the same
order by construction.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from vllm.v1.core.sched.output import SchedulerOutput

from replay.vllmsim.executor import Step


@dataclass(slots=True)
class Queued:
    """A scheduled step: vLLM's ``SchedulerOutput``, what the stand-in executor made of
    it, its price and when it ends."""

    output: SchedulerOutput
    step: Step
    seconds: float
    #: the step's index among the steps that computed something (-1: an empty step)
    index: int
    end: float = 0.0


class Core(Protocol):
    """What the batch queue drives: a virtual clock and vLLM's scheduler around it."""

    now: float

    def has_requests(self) -> bool:
        """vLLM's ``Scheduler.has_requests()``."""
        ...

    def schedule_step(self, last_end: float, start: float) -> Queued:
        """``schedule()`` at :attr:`now` and the executor's step (not run yet), which
        starts at ``start``; ``last_end``: when the last step that computed something
        ended (a step that computes something after an idle spell pays the engine's
        wake, :func:`replay.step_price.wake_after`)."""
        ...

    def apply_step(self, queued: Queued) -> None:
        """``update_from_output()`` of ``queued`` at :attr:`now` (its end)."""
        ...


def _nothing() -> None:
    return None


@dataclass(slots=True)
class BatchQueue:
    """The steps in flight, newest first (``depth``: 1 synchronous, 2 async)."""

    depth: int
    steps: deque[Queued] = field(default_factory=deque)
    busy_until: float = 0.0
    #: when the last step that computed something ended (-inf: none yet)
    last_end: float = -math.inf

    def turn(self, core: Core, between: Callable[[], None] = _nothing) -> Queued | None:
        """Schedule steps while the queue has room, then wait for the oldest one and apply
        its output; returns it (None: no requests and nothing in flight). ``between``
        runs before each further ``schedule()`` of the turn (the engine core reads its
        input queue there)."""
        steps = self.steps
        while True:
            if core.has_requests():
                start = max(core.now, self.busy_until)
                queued = core.schedule_step(self.last_end, start)
                queued.end = self.busy_until = start + queued.seconds
                if queued.index >= 0:
                    self.last_end = queued.end
                steps.appendleft(queued)
                if len(steps) < self.depth and (queued.index >= 0 or core.has_requests()):
                    between()
                    continue  # the batch queue has room: schedule the next step first
            elif not steps:
                return None
            done = steps.pop()
            core.now = max(core.now, done.end)
            core.apply_step(done)
            return done

    def stalled(self, done: Queued, core: Core) -> bool:
        """``done`` scheduled and preempted nothing, the engine has requests and no step
        in flight computes anything: nothing changes until a send, an abort or a pin
        expiry (a step that only preempted is followed by another at once)."""
        idle = done.index < 0 and not done.output.preempted_req_ids
        return idle and core.has_requests() and all(q.index < 0 for q in self.steps)
