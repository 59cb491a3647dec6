"""The simulator sized like the servers it is compared with.

KV tokens from ``vllm:cache_config_info`` (the null block left out, as the scheduler
plugin counts), the server's block size and ``max_model_len``; ``max_num_seqs`` and
``max_num_batched_tokens`` come from the caller (validate's defaults:
``replay.scheduler_config``'s, vLLM's GPU ones, 256 and 8,192; a CPU server started
without them has 128 and 2,048). Every server of one validation must have the same KV
cache.

A KV size that holds no block of the servers' size is refused in one line naming its
flag: before any server starts where the arguments say both (:func:`check_kv_tokens`:
``--kv-tokens`` against the vLLM arguments' ``--block-size``, or vLLM's smallest default),
else as soon as the first server answers (:func:`kv_tokens_of`), before its live run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from replay.scheduler import SimSchedulerConfig
from replay.scheduler_config import BLOCK_SIZE
from replay.validation.error import ValidateError
from ttlctl.nouns import counted
from ttlctl.server import vllm_config
from ttlctl.server.facts import ServerInfo

#: vLLM 0.32's defaults for the OpenAI server on CPU (GPU: 256 and 8,192 or more)
CPU_MAX_NUM_SEQS = 128
CPU_MAX_NUM_BATCHED_TOKENS = 2048
#: ``max_model_len`` of the simulator when the server does not say
DEFAULT_MAX_MODEL_LEN = 131_072
#: the vLLM option that sets a server's KV block size (vLLM's default when it is not
#: given: :data:`~replay.scheduler_config.BLOCK_SIZE` tokens on a GPU, 128 on a CPU;
#: never fewer than :data:`~replay.scheduler_config.BLOCK_SIZE`)
BLOCK_SIZE_FLAG = "--block-size"


def given_block_size(args: Sequence[str]) -> tuple[str, int] | None:
    """The ``--block-size`` vLLM's ``args`` set (on the command line or in their
    ``--config`` file, read as vLLM reads them; the last one given), with the option as
    given; None when they do not. :class:`ValidateError` on a value that is not a whole
    number."""
    found = vllm_config.read(args, (BLOCK_SIZE_FLAG,)).value(BLOCK_SIZE_FLAG)
    if found is None:
        return None
    shown, value = found
    try:
        return shown, int(value)
    except ValueError:
        raise ValidateError(f"{shown} takes a number of tokens, not {value!r}") from None


def check_kv_tokens(kv_tokens: int | None, args: Sequence[str] | None) -> None:
    """Before any server starts: :class:`ValidateError` when ``--kv-tokens`` holds no KV
    block of the servers started with vLLM's ``args`` (None: validate starts none): their
    ``--block-size``, else vLLM's default, which is never below
    :data:`~replay.scheduler_config.BLOCK_SIZE` tokens (the servers' own is read when they
    answer: :func:`kv_tokens_of`)."""
    if kv_tokens is None or args is None:
        return
    given = given_block_size(args)
    if given is not None and kv_tokens < given[1]:
        shown, block = given
        raise ValidateError(
            f"--kv-tokens {kv_tokens} holds no KV block: the servers' blocks are {block} "
            f"tokens (their vLLM {shown}); give at least {block}"
        )
    if given is None and kv_tokens < BLOCK_SIZE:
        raise ValidateError(
            f"--kv-tokens {kv_tokens} holds no KV block: vLLM's blocks are at least "
            f"{BLOCK_SIZE} tokens (its {BLOCK_SIZE_FLAG} default); give at least {BLOCK_SIZE}"
        )


def kv_tokens_of(info: ServerInfo, kv_tokens: int | None) -> int:
    """The simulator's KV tokens for the server ``info``: ``kv_tokens`` (``--kv-tokens``),
    else the server's (its blocks less vLLM's null block). :class:`ValidateError` naming
    the flag when they hold no block of the server's size, or the server does not say."""
    block = info.block_size or BLOCK_SIZE
    if kv_tokens is not None:
        if kv_tokens < block:
            raise ValidateError(
                f"--kv-tokens {kv_tokens} holds no KV block: {info.url} has blocks of "
                f"{block} tokens ({BLOCK_SIZE_FLAG}); give at least {block}"
            )
        return kv_tokens
    if info.num_gpu_blocks:
        kv_tokens = (info.num_gpu_blocks - 1) * block  # the null block holds no KV
        blocks = counted(info.num_gpu_blocks, "KV block")
        held = f"{blocks} of {block} tokens (one is vLLM's null block)"
    elif info.kv_tokens:
        kv_tokens = info.kv_tokens
        held = f"{info.kv_tokens} KV tokens in blocks of {block}"
    else:
        raise ValidateError(
            f"{info.url}: /metrics has no vllm:cache_config_info; give the KV size (--kv-tokens)"
        )
    if kv_tokens < block:
        raise ValidateError(
            f"{info.url} has {held}: no usable KV block; give its KV cache more memory "
            "(vLLM's --kv-cache-memory-bytes or --gpu-memory-utilization)"
        )
    return kv_tokens


def sim_engine_config(
    info: ServerInfo,
    *,
    kv_tokens: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    prefill_cap: tuple[int, bool] = (0, False),
    watermark: float = 0.0,
) -> SimSchedulerConfig:
    """The simulator's :class:`~replay.scheduler.SimSchedulerConfig` sized like the server
    (``prefill_cap``: vLLM's ``--long-prefill-token-threshold`` and whether adaptive;
    ``watermark``: vLLM's ``--watermark``)."""
    max_model_len = info.max_model_len or DEFAULT_MAX_MODEL_LEN
    return SimSchedulerConfig(
        kv_tokens=kv_tokens_of(info, kv_tokens),
        block_size=info.block_size or BLOCK_SIZE,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        # a cap past the server's length caps no prompt (a --url server's, known only
        # after its runs: cut to it rather than refused then)
        long_prefill_token_threshold=min(prefill_cap[0], max_model_len),
        long_prefill_token_threshold_adaptive=prefill_cap[1],
        watermark=watermark,
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
