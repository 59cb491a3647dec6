"""The simulator sized like the servers it is compared with.

KV tokens from ``vllm:cache_config_info`` (the null block left out, as the scheduler
plugin counts), the server's block size and ``max_model_len``; ``max_num_seqs`` and
``max_num_batched_tokens`` come from the caller (validate's defaults:
``replay.scheduler_config``'s, vLLM's GPU ones, 256 and 8,192; a CPU server started
without them has 128 and 2,048). Every server of one validation must have the same KV
cache.
"""

from __future__ import annotations

from collections.abc import Mapping

from replay.scheduler import SimSchedulerConfig
from replay.validation.error import ValidateError
from ttlctl.server.facts import ServerInfo

#: vLLM 0.32's defaults for the OpenAI server on CPU (GPU: 256 and 8,192 or more)
CPU_MAX_NUM_SEQS = 128
CPU_MAX_NUM_BATCHED_TOKENS = 2048
#: ``max_model_len`` of the simulator when the server does not say
DEFAULT_MAX_MODEL_LEN = 131_072


def sim_engine_config(
    info: ServerInfo,
    *,
    kv_tokens: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> SimSchedulerConfig:
    """The simulator's :class:`~replay.scheduler.SimSchedulerConfig` sized like the server."""
    block = info.block_size or 16
    if kv_tokens is None:
        if info.num_gpu_blocks:
            kv_tokens = (info.num_gpu_blocks - 1) * block  # the null block holds no KV
        elif info.kv_tokens:
            kv_tokens = info.kv_tokens
        else:
            raise ValidateError(
                f"{info.url}: /metrics has no vllm:cache_config_info; "
                "give the KV size (--kv-tokens)"
            )
    return SimSchedulerConfig(
        kv_tokens=kv_tokens,
        block_size=block,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=info.max_model_len or DEFAULT_MAX_MODEL_LEN,
    )


def same_servers(infos: Mapping[str, ServerInfo]) -> ServerInfo:
    """The first server, once every other one has its KV size, block size and
    ``max_model_len`` (:class:`ValidateError` otherwise)."""
    (first_name, first), *rest = infos.items()
    for name, info in rest:
        if (info.kv_tokens, info.block_size, info.max_model_len) != (
            first.kv_tokens,
            first.block_size,
            first.max_model_len,
        ):
            raise ValidateError(
                f"the servers differ: {first_name} has KV {first.kv_tokens} tokens, block "
                f"{first.block_size}, max_model_len {first.max_model_len}; {name} has "
                f"{info.kv_tokens}, {info.block_size}, {info.max_model_len}"
            )
    return first
