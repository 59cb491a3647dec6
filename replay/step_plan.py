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

from replay.request import SimRequest

#: One request's share of a step (an entry of vLLM's ``num_scheduled_tokens``):
#: ``(request, num_new_tokens, num_computed_tokens, num_new_blocks)``, the tokens the step
#: computes for it (a prefill chunk, or 1 to decode), its computed tokens when the step was
#: scheduled, and the blocks the running loop allocated it for the step (0 for an admitted
#: request: admission allocates its own). A plain tuple: one is made per request and step,
#: and a named one costs several times as much to make.
ScheduledRequest = tuple[SimRequest, int, int, int]


@dataclass(slots=True)
class StepPlan:
    """A step's decision: what runs, and what the decision itself did (preempted,
    stopped admission at a waiting head that does not fit). Nothing runs when it
    schedules no request and the decode set is empty. Made once a step and never changed
    after (not frozen: a frozen dataclass costs three times as much to make)."""

    #: requests scheduled one by one: running ones in running order, then admitted ones
    scheduled: list[ScheduledRequest]
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
