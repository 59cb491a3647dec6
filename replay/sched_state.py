"""What the scheduler's parts share: the engine's state and the methods one part calls in
another, declared for the type checker.

:class:`~replay.scheduler.SimScheduler` is one slotted dataclass assembled from parts,
each a mixin in its own module with the methods of one concept (as vLLM's single
``Scheduler`` class, whose methods they follow): the pins' clock
(:mod:`replay.sched_pins`), the step with the decode set taken together
(:mod:`replay.sched_fast`) or request by request (:mod:`replay.sched_reference`),
admission (:mod:`replay.sched_admit`), preemption and finishing (:mod:`replay.sched_leave`)
and merged decode runs (:mod:`replay.sched_runs`). Each part derives from
:class:`SchedulerState`, which declares the fields the parts read (the dataclass in
:mod:`replay.scheduler` defines them, with the invariants they keep) and the methods a part
calls in another part or in the scheduler itself, so that each part checks on its own and
none imports another: imports run from the scheduler down to its parts, to this module.

Nothing here exists at run time: the declarations are for the type checker only, the
methods are the parts' own (found by the class's method resolution, as any method is:
no call goes through anything extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from profiles.cost import CostModel
    from replay.decode_run import DecodeRun
    from replay.decoders import DecodeSet
    from replay.kv import KVPool
    from replay.offload import OffloadTier
    from replay.pinning import Pinning
    from replay.request import SimRequest
    from replay.scheduler_config import SimSchedulerConfig
    from replay.scheduler_stats import Stats
    from replay.step_plan import ScheduledRequest, StepPlan
    from ttlctl.engine.pins import PinTable


class PolicyHooks(Protocol):
    """The policy's hooks the parts call (:class:`replay.scheduler.Policy` is the whole
    policy; its signatures name the scheduler's class, which the parts, below it, cannot
    import: the engine passed is typed Any here, and is always the scheduler itself)."""

    def on_admit(self, req: SimRequest, engine: Any, now: float) -> None: ...

    def on_finish(self, req: SimRequest, engine: Any, now: float) -> None: ...


class SchedulerState:
    """The scheduler's fields and methods its parts use (declarations only; see the
    module's docstring)."""

    if TYPE_CHECKING:
        # the fields (:class:`replay.scheduler.SimScheduler` says what each holds)
        config: SimSchedulerConfig
        cost: CostModel
        policy: PolicyHooks
        offload: OffloadTier | None
        pool: KVPool
        running: list[SimRequest]
        waiting: list[SimRequest]
        waiting_programs: dict[str, SimRequest]
        pinning: Pinning | None
        _pins: PinTable | None
        stats: Stats
        _waiting_dirty: bool
        _moved: dict[int, SimRequest]
        _preempt_counter: int
        clock: float
        _sizes: set[int] | None
        timeline: list[tuple[float, int]]
        _last_sampled: int
        decoders: DecodeSet
        _prefilling: list[SimRequest]
        _stuck: SimRequest | None
        _stuck_changes: int
        _stuck_kept: bool
        _kept_free: int
        _planned: tuple[float, float, DecodeRun] | None

        # the queue and the step (replay.scheduler)
        def _enqueue(self, req: SimRequest) -> None: ...
        def _dequeue_head(self, head: SimRequest) -> None: ...
        def _sorted_waiting(self) -> list[SimRequest]: ...
        def _enter_running(self, req: SimRequest) -> None: ...
        def _account(self, seconds: float) -> None: ...
        def _on_top(self, plan: StepPlan, start: float) -> float: ...
        def _prefill_cap(self) -> int: ...

        # the pins' clock (replay.sched_pins)
        def tick(self, now: float) -> None: ...
        def expire_pins(self, now: float) -> None: ...
        def next_expiry(self) -> float: ...

        # admission (replay.sched_admit)
        def _admit_waiting(
            self, budget: int, now: float, cap: int = 0
        ) -> tuple[list[ScheduledRequest], float, bool]: ...
        def _head_stays_blocked(self) -> bool: ...

        # preemption and finishing (replay.sched_leave)
        def _preempt(self, req: SimRequest, now: float) -> None: ...
        def _preempt_victim(self, victim: SimRequest, now: float) -> int: ...
        def _finish(self, req: SimRequest, now: float) -> None: ...
        def _finish_all(self, finished: list[SimRequest], end: float) -> list[SimRequest]: ...

        # merged decode runs (replay.sched_runs)
        def _merge_decodes(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]: ...
        def _size_run(self, tokens: int) -> bool: ...

    else:
        # no slots of its own (the dataclass holds the fields): with no ``__dict__`` in
        # any class of the scheduler, an instance has none. Hidden from the type checker,
        # which reads an empty ``__slots__`` as "no attribute may be assigned" in a part.
        __slots__ = ()
