"""How a running request leaves the running list: preempted or finished.

- preemption is vLLM's recompute preemption (``_preempt_request`` in
  ``vllm/v1/core/sched/scheduler.py``): the request's blocks are freed (their KV stays
  in the prefix cache until a block is reused), its computed tokens reset to 0, and it
  goes back to the waiting queue (the policies' keys put a preempted request in front,
  as vLLM's ``prepend_request`` does); with async scheduling only the blocks of tokens
  already known stay cached (:meth:`~Leaving._cached_tokens_at_preempt`, overridden in
  :mod:`replay.async_sched`);
- finishing is vLLM's ``_free_request`` and ``_free_blocks`` with the plugin's hook: the
  pin rules (:mod:`replay.pinning`) pin the request's full blocks for a TTL or free
  them (without pin rules they are freed); an offload tier stores them first.
"""

from __future__ import annotations

from operator import attrgetter

from replay.request import SimRequest
from replay.sched_state import SchedulerState

#: the running order's sort key, read in C
_run_seq = attrgetter("run_seq")


class Leaving(SchedulerState):
    """Preemption and finishing (a part of :class:`~replay.scheduler.SimScheduler`)."""

    __slots__ = ()

    def _preempt(self, req: SimRequest, now: float) -> None:
        """Recompute preemption: free the blocks (they stay cached), requeue at the front."""
        bs = self.config.block_size
        if req in self._prefilling:
            self._prefilling.remove(req)
        self.pool.release(req.program, self._cached_tokens_at_preempt(req) // bs)
        req.blocks = 0
        req.num_computed_tokens = 0
        req.preempted = True
        req.preemptions += 1
        self._preempt_counter += 1
        req.preempt_seq = self._preempt_counter
        self.stats.preemptions += 1
        self._enqueue(req)

    def _preempt_victim(self, victim: SimRequest, now: float) -> int:
        """Preempt ``victim``; the blocks that went free (not a shared one still held)."""
        if victim.decoding:
            self.decoders.leave(victim)
        free = self.pool.free_blocks
        self._preempt(victim, now)
        return self.pool.free_blocks - free

    def _cached_tokens_at_preempt(self, req: SimRequest) -> int:
        """The tokens of a preempted request's KV that stay in the prefix cache (all it
        computed; with async scheduling only the tokens already known)."""
        return req.num_computed_tokens

    def _finish_all(self, finished: list[SimRequest], end: float) -> list[SimRequest]:
        """Finish ``finished`` and the decoding requests whose last token the steps taken
        sampled, in running order, at ``end``; returns them all."""
        decoders = self.decoders
        for r in decoders.pop_finished():
            decoders.leave(r)
            finished.append(r)
        if len(finished) > 1:
            finished.sort(key=_run_seq)
        for r in finished:
            self._finish(r, end)
        return finished

    def _finish(self, req: SimRequest, now: float) -> None:
        req.finish = now
        self.running.remove(req)
        if not req.decoding and req in self._prefilling:
            self._prefilling.remove(req)
        full = req.num_computed_tokens // self.config.block_size
        if self.offload is not None:
            self.offload.store(req.program, full * self.config.block_size, req.shared)
        self.policy.on_finish(req, self, now)
        if self.pinning is not None:
            self.pinning.finish(req, full, now)
        else:
            self.pool.release(req.program, full)
        req.blocks = 0
