"""What the fleet loop uses of a replica's engine (:class:`Engine`).

Two engines have this shape: the fast backend's :class:`~replay.scheduler.SimScheduler`
and, with ``--backend vllm``, :class:`replay.vllmsim.engine.VllmEngine` (vLLM's own
scheduler on the fleet's clock). The loop's stages (:mod:`replay.fleet.routing`,
:mod:`~replay.fleet.arrival`, :mod:`~replay.fleet.stepping`,
:mod:`~replay.fleet.finishing`), the router's view and the metrics read an engine through
this protocol only, so both backends run in the same loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from replay.kv import Keys
from replay.request import SimRequest
from replay.scheduler import SimSchedulerConfig, Stats


class HasExpiry(Protocol):
    @property
    def expiry(self) -> float: ...


class PinTableView(Protocol):
    @property
    def pins(self) -> Mapping[str, HasExpiry]: ...


class RetentionView(Protocol):
    @property
    def pins(self) -> PinTableView: ...


class PinningView(Protocol):
    """The pin rules' state (the plugin's :class:`~ttlctl.engine.retention.Retention`)."""

    @property
    def retention(self) -> RetentionView: ...


class PrefixLookup(Protocol):
    def prefix_hit(self, program: str, keys: Keys, reusable: int, cap: int) -> int:
        """Leading blocks of the program's next call's prompt the engine holds now (its KV
        events, as a router that subscribes to them knows them); see
        :meth:`replay.kv.KVPool.prefix_hit`."""
        ...


class Engine(Protocol):
    """A replica's engine as the fleet loop drives it (the calls of
    :class:`~replay.scheduler.SimScheduler` of the same names say what each does)."""

    @property
    def config(self) -> SimSchedulerConfig: ...

    @property
    def stats(self) -> Stats: ...

    @property
    def timeline(self) -> list[tuple[float, int]]: ...

    @property
    def waiting(self) -> Sequence[SimRequest]: ...

    @property
    def idle(self) -> bool: ...

    @property
    def pool(self) -> PrefixLookup: ...

    @property
    def pinning(self) -> PinningView | None: ...

    def add(self, req: SimRequest, now: float) -> None: ...

    def tick(self, now: float) -> None: ...

    def expire_pins(self, now: float) -> None:
        """The engine core's turn after a step that finished calls and left nothing to
        run: vLLM schedules once more to report them, and the pins due by ``now`` go."""

    def step(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]: ...

    def next_expiry(self) -> float: ...

    def merge_end(self, now: float) -> float | None: ...

    def take_run(
        self, start: float, horizon: float = float("inf")
    ) -> tuple[float, list[SimRequest]]: ...

    def applied_step(self) -> int: ...

    def pin_counters(self) -> None: ...
