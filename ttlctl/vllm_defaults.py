"""vLLM's engine sizes where a command is given none: the simulated engine's
(:class:`replay.scheduler_config.SimSchedulerConfig`, the commands' flags) and the engine
``ttlctl profile`` starts (:mod:`profiles.vllm_plan`) read them here, so that the two
never drift apart."""

from __future__ import annotations

#: vLLM 0.32's ``--max-num-batched-tokens`` and ``--max-num-seqs`` on a GPU (its CPU
#: server's are 128 and 2,048: ``replay.validation.sizing``)
MAX_NUM_BATCHED_TOKENS = 8192
MAX_NUM_SEQS = 256
