"""The simulated engine's settings (vLLM's ``SchedulerConfig`` and cache settings)."""

from __future__ import annotations

from dataclasses import dataclass

from ttlctl.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SimSchedulerConfig:
    kv_tokens: int = 600_000
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 131_072
    #: "runs" (fast) or "blocks" (the per-block reference)
    pool: str = "runs"
    #: take runs of decode-only steps in one event
    fast: bool = True
    #: admit a waiting request only if its whole prompt fits (vLLM 0.32's
    #: ``scheduler_reserve_full_isl``, on by default), not just its first chunk
    reserve_full_prompt: bool = True

    def __post_init__(self) -> None:
        if self.kv_tokens < self.block_size or self.block_size <= 0:
            raise ConfigError("--kv-tokens must hold at least one block (--block-size tokens)")
        if self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ConfigError("--max-num-batched-tokens and --max-num-seqs must be positive")
        if self.pool not in ("runs", "blocks"):
            raise ConfigError("pool must be 'runs' or 'blocks'")

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens // self.block_size
