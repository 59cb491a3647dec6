"""The simulated engine's settings (vLLM's ``SchedulerConfig`` and cache settings)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ttlctl.errors import ConfigError

# The simulated engine's default size, read by :class:`SimSchedulerConfig`, by the
# commands' flags (``ttlctl.cli.options``: this module imports nothing heavy, so
# ``ttlctl --help`` stays light) and by the validations' library defaults
# (:func:`replay.validation.crosscheck.validate`, ``validate_fleet``).
#: the simulated KV cache, in tokens
KV_TOKENS = 600_000
#: vLLM's ``--block-size`` default
BLOCK_SIZE = 16
#: vLLM 0.32's ``--max-num-batched-tokens`` and ``--max-num-seqs`` on a GPU (its CPU
#: server's are 128 and 2,048: ``replay.validation.sizing``)
MAX_NUM_BATCHED_TOKENS = 8192
MAX_NUM_SEQS = 256
#: ``--max-model-len``
MAX_MODEL_LEN = 131_072


@dataclass(frozen=True, slots=True)
class SimSchedulerConfig:
    kv_tokens: int = KV_TOKENS
    block_size: int = BLOCK_SIZE
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = MAX_NUM_SEQS
    max_model_len: int = MAX_MODEL_LEN
    #: "runs" (fast) or "blocks" (the per-block reference)
    pool: str = "runs"
    #: take runs of decode-only steps in one event
    fast: bool = True
    #: admit a waiting request only if its whole prompt fits (vLLM 0.32's
    #: ``scheduler_reserve_full_isl``, on by default), not just its first chunk
    reserve_full_prompt: bool = True
    #: the step sizes (scheduled tokens) the engine ran before the replay: each other size
    #: pays the cost model's ``new_shape_s`` the first time it runs
    #: (:func:`replay.step_price.new_size_extra`). None: every size, an engine that has
    #: served for long (a replay's default); a set: one just started and warmed with those
    sizes_run: frozenset[int] | None = None

    def __post_init__(self) -> None:
        if self.kv_tokens < self.block_size or self.block_size <= 0:
            raise ConfigError("--kv-tokens must hold at least one block (--block-size tokens)")
        if self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ConfigError("--max-num-batched-tokens and --max-num-seqs must be positive")
        if self.pool not in ("runs", "blocks"):
            raise ConfigError("pool must be 'runs' or 'blocks'")

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON (``sizes_run`` as ascending sizes, and only when set)."""
        doc: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        sizes = doc.pop("sizes_run")
        if sizes is not None:
            doc["sizes_run"] = sorted(sizes)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SimSchedulerConfig:
        """The settings :meth:`to_json` wrote."""
        sizes = doc.get("sizes_run")
        return cls(**{**doc, "sizes_run": None if sizes is None else frozenset(sizes)})

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens // self.block_size
