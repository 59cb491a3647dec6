"""What a vLLM profile measures, and whether it fits: contexts, decode points, engine sizes.

Pure (no vLLM, no torch): :func:`make_plan` turns the arguments of
:func:`profiles.measure_vllm.measure_vllm` and the memory available into a
:class:`Plan` (the prefill contexts, the decode (batch, context) points, the
engine's ``max_model_len`` and a KV cache sized to hold them), or refuses with a
one-line :class:`VllmMeasureError` before any engine is started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from profiles import models
from profiles.grid import MIN_CONTEXT, engine_contexts, grid_to_time, limit_bound
from ttlctl import vllm_defaults
from ttlctl.errors import ConfigError, TtlctlError

#: the replay's default step budget (``ttlctl replay --max-num-batched-tokens``)
DEFAULT_MAX_NUM_BATCHED_TOKENS = vllm_defaults.MAX_NUM_BATCHED_TOKENS
#: weights plus KV cache may take this share of the memory available
MEMORY_SHARE = 0.6
DECODE_BATCHES = {"cpu": (1, 4, 16), "cuda": (1, 8, 32)}
#: batch × context of one decode point is capped (the batch is prefilled first)
DECODE_TOKENS_CAP = {"cpu": 8192, "cuda": 131072}
DECODE_WARM_STEPS = 2
DECODE_STEPS = 16
#: untimed steps of spare room: sequences decode while their batch's peers prefill
DECODE_SPARE_STEPS = 8
#: the KV cache is sized in units of this many tokens per sequence (any block size ≤ it)
KV_GRANULE = 256
#: headroom on the KV cache beyond what the measurements hold
KV_MARGIN = 1.25
#: the engine's ``max_num_seqs`` (the replay's default), or the step budget where that is
#: less (vLLM takes no budget under ``max_num_seqs``), or the largest decode batch
MAX_NUM_SEQS = vllm_defaults.MAX_NUM_SEQS


class VllmMeasureError(TtlctlError, ValueError):
    """The measurement cannot run as asked; the message (one line) says why."""


def parse_contexts(text: str | None) -> list[int] | None:
    """``--contexts``: comma-separated lengths, sorted and unique (None: the default grid).
    A :class:`~ttlctl.errors.ConfigError` when they are not integers, one is under 1 token
    (named: a length of 0 is no context to time), or fewer than 3 distinct ones (a
    quadratic is fitted). Every profiler takes this grid."""
    if text is None:
        return None
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"--contexts: not a comma-separated list of integers: {text!r}") from None
    if values and values[0] < 1:
        raise ConfigError(f"--contexts: {values[0]} is not a length (a length is at least 1 token)")
    if len(values) < 3:
        raise ConfigError(
            f"--contexts needs at least 3 distinct lengths (a quadratic is fitted), got {values}"
        )
    return values


def decode_tokens(batch: int, context: int, budget: int) -> int:
    """Most tokens one sequence of a decode point generates: the first of a batch decode
    while the others prefill (a step per ``budget`` tokens of prompts, one a sequence,
    some spare), then the warm-up and timed steps; none may finish before the last."""
    prefill_steps = -(-batch * context // budget) + batch + DECODE_SPARE_STEPS
    return prefill_steps + DECODE_WARM_STEPS + DECODE_STEPS + 2


@dataclass(frozen=True, slots=True)
class Plan:
    kind: str
    dtype: str
    enforce_eager: bool
    contexts: tuple[int, ...]
    #: (batch, context) of each decode point
    decode: tuple[tuple[int, int], ...]
    max_model_len: int
    max_num_batched_tokens: int
    block_size: int | None
    kv_cache_bytes: int
    kv_bytes_config: int
    parameters: int

    @property
    def max_num_seqs(self) -> int:
        """The engine's ``max_num_seqs``: :func:`max_num_seqs` of the plan's budget."""
        return max_num_seqs(self.max_num_batched_tokens, self.decode)

    def engine_args(self, model: str, seed: int) -> dict[str, Any]:
        """vLLM ``EngineArgs`` of the measurement (random weights, no tokenizer)."""
        return {
            "model": model,
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "block_size": self.block_size,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "kv_cache_memory_bytes": self.kv_cache_bytes,
            "enforce_eager": self.enforce_eager,
            "async_scheduling": False,
            "seed": seed,
            "disable_log_stats": True,
        }


def max_num_seqs(budget: int, decode: Sequence[tuple[int, int]]) -> int:
    """The engine's ``max_num_seqs`` for a step budget of ``budget`` tokens and the
    (batch, context) ``decode`` points: :data:`MAX_NUM_SEQS`, or ``budget`` where that is
    less (as a server of that budget is started: vLLM refuses a budget under
    ``max_num_seqs``), but never under the largest decode batch."""
    return max([min(MAX_NUM_SEQS, budget), *(b for b, _ in decode)])


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _grid(
    contexts: Sequence[int] | None, model_limit: int, max_context: int | None, where: str
) -> list[int]:
    # a prompt leaves one token of the model's length for the token it samples
    limit = model_limit - 1 if max_context is None else min(model_limit - 1, int(max_context))
    model_bound = f"the model's {model_limit} positions less the sampled token"
    if limit < MIN_CONTEXT:
        raise VllmMeasureError(
            f"{where}: {limit_bound(limit, model_bound, max_context)} leaves a context limit "
            f"of {limit} tokens, too short to time (at least {MIN_CONTEXT})"
        )
    grid, fault = grid_to_time(contexts, limit, model_bound, max_context, engine_contexts)
    if fault is not None:
        raise VllmMeasureError(fault)
    return grid


def make_plan(
    config: dict[str, Any],
    kind: str,
    free_bytes: int,
    *,
    where: str,
    contexts: Sequence[int] | None = None,
    max_context: int | None = None,
    dtype: str | None = None,
    block_size: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    enforce_eager: bool | None = None,
    decode_batches: Sequence[int] | None = None,
) -> Plan:
    """The measurement of ``config``'s model on ``kind`` (``cpu``/``cuda``) with
    ``free_bytes`` available (0: unknown, not checked). A step budget under the largest
    decode batch is refused here (:func:`max_num_seqs`): vLLM refuses it."""
    budget = int(max_num_batched_tokens)
    if budget < 1:
        raise VllmMeasureError(f"--max-num-batched-tokens {budget}: expected at least 1")
    try:
        dtype_name = models.profile_dtype(config, dtype, where)
    except models.ModelConfigError as exc:
        raise VllmMeasureError(str(exc)) from None
    model_limit = models.max_context(config)
    grid = _grid(contexts, model_limit, max_context, where)

    # decode at a short and a mid context; each sequence needs room for what it generates
    batches = tuple(decode_batches or DECODE_BATCHES[kind])
    wanted = sorted({grid[0], max(grid[0], min(8 * grid[0], grid[-1]))})
    reach = max(c + decode_tokens(b, c, budget) for b in batches for c in wanted)
    max_model_len = min(model_limit, max(grid[-1] + 1, reach))
    decode: list[tuple[int, int]] = []
    for b in batches:
        for want in wanted:
            c = min(want, max_model_len - decode_tokens(b, want, budget))
            if c >= 16 and b * c <= DECODE_TOKENS_CAP[kind] and (b, c) not in decode:
                decode.append((b, c))
    if len(decode) < 3:
        raise VllmMeasureError(
            f"{where}: only {len(decode)} decode points fit; give longer contexts"
        )
    seqs = max_num_seqs(budget, decode)
    if budget < seqs:  # vLLM's own check, after the copies are timed, in a pydantic dump
        raise VllmMeasureError(
            f"--max-num-batched-tokens {budget}: under the largest decode batch ({seqs} "
            f"sequences), and vLLM takes no step budget under its max_num_seqs; give at "
            f"least {seqs}"
        )

    granule = max(KV_GRANULE, block_size or 0)

    def held(tokens: int) -> int:
        return -(-tokens // granule) * granule

    kv_tokens = max(
        [held(max_model_len)] + [b * held(c + decode_tokens(b, c, budget)) for b, c in decode]
    )
    kv_config = models.kv_bytes_per_token(config, dtype_name)
    kv_cache_bytes = int(kv_tokens * kv_config * KV_MARGIN) + 2 * granule * kv_config

    n_params = models.parameters(config)
    weights = n_params * models.DTYPE_BYTES[dtype_name]
    if free_bytes > 0 and weights + kv_cache_bytes > MEMORY_SHARE * free_bytes:
        raise VllmMeasureError(
            f"{where}: about {_gb(weights)} of {dtype_name} weights ({n_params / 1e9:.2f} B "
            f"parameters) and {_gb(kv_cache_bytes)} of KV cache exceed {MEMORY_SHARE:.0%} of "
            f"the {_gb(free_bytes)} available on {kind}; measure it on a bigger device or use "
            "a shipped roofline profile"
        )
    return Plan(
        kind=kind,
        dtype=dtype_name,
        enforce_eager=(kind == "cpu") if enforce_eager is None else bool(enforce_eager),
        contexts=tuple(grid),
        decode=tuple(decode),
        max_model_len=max_model_len,
        max_num_batched_tokens=budget,
        block_size=block_size,
        kv_cache_bytes=kv_cache_bytes,
        kv_bytes_config=kv_config,
        parameters=n_params,
    )
