"""What admitting a waiting request takes: its prefix hit, the blocks it needs.

vLLM 0.32 admits a waiting request only if its whole prompt fits
(``scheduler_reserve_full_isl``, on by default), not just its first chunk; a prefix hit
is whole blocks (a partial one never hits), capped below the whole stream
(``num_tokens − 1``: one token is always computed), from the program's own cache, the
blocks it shares with other programs, then the offload tier.
"""

from __future__ import annotations

from typing import NamedTuple

from replay.kv import KVPool
from replay.math_utils import cdiv
from replay.offload import OffloadTier
from replay.request import SimRequest
from replay.scheduler_config import SimSchedulerConfig


class AdmissionPlan(NamedTuple):
    #: blocks of the prompt found in the prefix cache
    hit_blocks: int
    #: tokens reloaded from the offload tier after the hit
    loaded_tokens: int
    #: tokens the admitting step computes (its first chunk)
    num_new_tokens: int
    #: blocks allocated for that chunk
    num_new_blocks: int
    #: free blocks it needs to be admitted (the whole prompt's with the reservation)
    must_fit: int


def admission_plan(
    req: SimRequest,
    pool: KVPool,
    offload: OffloadTier | None,
    config: SimSchedulerConfig,
    budget: int,
    cap: int = 0,
) -> AdmissionPlan:
    """What admitting ``req`` under a token ``budget`` takes now, its first chunk at most
    ``cap`` tokens (0: no cap; vLLM's ``--long-prefill-token-threshold``, as
    :meth:`~replay.scheduler_config.SimSchedulerConfig.prefill_cap` sets it for the
    step); changes nothing."""
    bs = config.block_size
    reusable = req.num_tokens if req.preemptions else req.reusable
    # full blocks only (a partial one never hits); the shared ones from any program
    hit_blocks = pool.prefix_hit(
        req.program, req.shared, reusable // bs, (req.num_tokens - 1) // bs
    )
    hit = hit_blocks * bs
    loaded = 0
    if offload is not None:
        tier = offload.prefix(req.program, reusable, req.num_tokens - 1, req.shared)
        loaded = max(0, tier - hit)
    rest = req.num_tokens - hit - loaded
    if 0 < cap < rest:
        rest = cap
    num_new_tokens = max(1, min(rest, budget))
    need = cdiv(hit + loaded + num_new_tokens, bs) - hit_blocks
    must_fit = need
    if config.reserve_full_prompt:
        must_fit = max(need, cdiv(req.num_tokens, bs) - hit_blocks)
    return AdmissionPlan(hit_blocks, loaded, num_new_tokens, need, must_fit)
