"""How long vLLM's scheduler takes, when asked (``timed``): :class:`StepTimer` measures the
wall and CPU seconds of each ``schedule()`` and ``update_from_output()``, and the seconds of
vLLM's prefix-cache lookups within each ``schedule()`` (wrapped on the instance, as the
plugin wraps ``allocate_slots``), into a :class:`~replay.vllmsim.outcome.Timings`. Only
these measurements read a wall clock; the simulated time is the harness's virtual clock."""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request

from replay.vllmsim.outcome import Timings


class StepTimer:
    """Times the calls into ``scheduler`` that go through it (see the module docstring)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.timings = Timings()
        self._lookup_s = 0.0
        self._time_lookups()

    def _time_lookups(self) -> None:
        manager = self.scheduler.kv_cache_manager
        lookup = manager.get_computed_blocks

        def timed_lookup(request: Request, *args: Any, **kwargs: Any) -> Any:
            # what the release passes beside the request (0.34: the hit's cap) passed on
            t0 = time.perf_counter()
            try:
                return lookup(request, *args, **kwargs)
            finally:
                self._lookup_s += time.perf_counter() - t0

        manager.get_computed_blocks = timed_lookup

    def schedule(self) -> Any:
        """``schedule()``, timed, with its prefix-cache lookups."""
        timings = self.timings
        self._lookup_s = 0.0
        c0, t0 = time.thread_time(), time.perf_counter()
        output = self.scheduler.schedule()
        timings.schedule_s.append(time.perf_counter() - t0)
        timings.schedule_cpu_s.append(time.thread_time() - c0)
        timings.lookup_s.append(self._lookup_s)
        return output

    def update(self, output: SchedulerOutput, model_output: Any) -> Any:
        """``update_from_output(output, model_output)``, timed."""
        timings = self.timings
        c0, t0 = time.thread_time(), time.perf_counter()
        outputs = self.scheduler.update_from_output(output, model_output)
        timings.update_s.append(time.perf_counter() - t0)
        timings.update_cpu_s.append(time.thread_time() - c0)
        return outputs
