"""What one engine step runs, decided before it runs (vLLM's ``SchedulerOutput``).

The scheduler's step has three parts, as vLLM's (``Scheduler.schedule()``, the model
runner, ``Scheduler.update_from_output()``) and nano-vllm's (``schedule()``, the run,
``postprocess()``):

- decide (:class:`replay.scheduler.SimScheduler`): which requests run and how many
  tokens each, which are preempted, which are admitted; blocks are allocated then;
- price (:mod:`replay.step_price`): the step's seconds from the cost model;
- apply (:mod:`replay.step_apply`): tokens computed, one sampled per request whose
  prompt is complete, finishes.

A :class:`StepPlan` is what passes from the first to the others. It holds the
requests scheduled one by one (:class:`ScheduledRequest`) and, apart, the members of
the aggregated decode set (:class:`replay.decoders.DecodeSet`), which decode one token
each and are counted, not listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from replay.request import SimRequest


class ScheduledRequest(NamedTuple):
    """One request's share of a step (an entry of vLLM's ``num_scheduled_tokens``)."""

    request: SimRequest
    #: tokens the step computes for it (a prefill chunk, or 1 to decode)
    num_new_tokens: int
    #: its computed tokens when the step was scheduled
    num_computed_tokens: int
    #: blocks allocated to it for this step by the running loop (admission counts its own)
    num_new_blocks: int

    @property
    def is_decode(self) -> bool:
        """Whether the step decodes it: its prompt is computed and one token remains."""
        r = self.request
        return r.num_tokens - self.num_computed_tokens <= 1 and self.num_computed_tokens >= r.prompt


@dataclass(frozen=True, slots=True)
class StepPlan:
    """A step's decision: what runs, and what the decision itself did (preempted,
    stopped admission at a waiting head that does not fit)."""

    #: requests scheduled one by one: running ones in running order, then admitted ones
    scheduled: tuple[ScheduledRequest, ...]
    #: members of the decode set, each decoding one token in this step
    num_decodes_in_set: int = 0
    #: their computed tokens (the KV the step's decodes read)
    decode_set_kv_tokens: int = 0
    #: seconds to reload admitted requests' prefixes from the offload tier
    reload_s: float = 0.0
    #: the running loop preempted (then nothing is admitted in the step, as in vLLM)
    preempted: bool = False
    #: admission stopped at a waiting head that did not fit
    blocked_head: bool = False

    @property
    def empty(self) -> bool:
        """Nothing runs: the step computes nothing and costs nothing."""
        return not self.scheduled and not self.num_decodes_in_set

    @property
    def decode_only(self) -> bool:
        """Every request of the step decodes (no prefill chunk)."""
        return all(s.is_decode for s in self.scheduled)
