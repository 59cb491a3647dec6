"""vLLM's scheduler, KV cache manager and block pool, set up as the engine core does it.

What ``EngineCore.__init__`` (``vllm/v1/engine/core.py``) does, minus the model:

- a ``VllmConfig`` from a folder that holds only a ``config.json`` (a small Llama
  config; ``skip_tokenizer_init``: no tokenizer, no weights), a ``CacheConfig``
  with prefix caching and a ``SchedulerConfig`` (chunked prefill, the token and
  sequence budgets, ``scheduler_reserve_full_isl`` as the fast backend's
  ``reserve_full_prompt``, and ``--scheduler-cls`` when the plugin runs);
- async scheduling as a GPU platform leaves it: the CPU platform hook turns it off
  (it is not needed there), so it is set again after the config is built;
- ``cache_config.num_gpu_blocks`` by hand (the engine core sets it after profiling
  memory): the fast backend's usable blocks + 1 for vLLM's null block, and a
  ``KVCacheConfig`` with that many blocks and one ``FullAttentionSpec`` group;
- the scheduler class from ``scheduler_config.get_scheduler_cls()`` (which resolves
  ``ttlctl.engine.TTLScheduler`` by name, as ``--scheduler-cls`` does), built with
  the block sizes ``resolve_kv_cache_block_sizes`` gives, under ``TTLCTL_BUNDLE``
  naming the bundle file (the plugin reads it at construction and polls it later);
- the request block hasher (``init_none_hash`` + ``get_request_block_hasher`` with
  ``prefix_caching_hash_algo``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.structured_output import StructuredOutputManager

from replay.scheduler import SimSchedulerConfig
from replay.sim_error import SimulationError
from replay.vllmsim.backend import BackendError
from ttlctl.engine.enginelog import ENV_LOG
from ttlctl.engine.facts import ENV_REPLICA
from ttlctl.engine.plugin_setup import ENV_PROGRAM_CAP
from ttlctl.engine.watch import ENV_BUNDLE, ENV_EVERY

#: what ``--scheduler-cls`` names to run the plugin
PLUGIN = "ttlctl.engine.TTLScheduler"
#: the server settings the plugin reads from its environment at construction: a replay
#: sets each itself (the bundle, no engine log, the rest at their defaults), so that a
#: variable left in the user's shell from serving (``TTLCTL_MAX_PROGRAMS`` …) does not
#: change a replay
SERVER_SETTINGS = (ENV_BUNDLE, ENV_EVERY, ENV_LOG, ENV_PROGRAM_CAP, ENV_REPLICA)
#: a small Llama: the scheduler reads only lengths from the model config
_MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}


@dataclass(frozen=True, slots=True)
class Built:
    scheduler: Any
    #: ``Request(..., block_hasher=hasher)``
    hasher: Callable[[Any], list[Any]]
    vllm_config: VllmConfig
    #: blocks in vLLM's pool, the null block included
    num_gpu_blocks: int


@contextmanager
def quiet_vllm() -> Iterator[None]:
    """vLLM's INFO lines go to stdout; keep them out of a replay's output."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _env(values: dict[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def vllm_config(engine: SimSchedulerConfig, *, async_scheduling: bool, plugin: bool) -> VllmConfig:
    """The engine's configuration; :class:`BackendError` when vLLM refuses the settings."""
    with tempfile.TemporaryDirectory(prefix="ttlctl-vllmsim-") as folder:
        model = dict(_MODEL, max_position_embeddings=engine.max_model_len)
        (Path(folder) / "config.json").write_text(json.dumps(model))
        try:
            config = VllmConfig(
                model_config=ModelConfig(
                    model=folder,
                    skip_tokenizer_init=True,
                    max_model_len=engine.max_model_len,
                    dtype="bfloat16",
                ),
                cache_config=CacheConfig(block_size=engine.block_size, enable_prefix_caching=True),
                scheduler_config=SchedulerConfig(
                    max_num_seqs=engine.max_num_seqs,
                    max_num_batched_tokens=engine.max_num_batched_tokens,
                    max_model_len=engine.max_model_len,
                    is_encoder_decoder=False,
                    enable_chunked_prefill=True,
                    scheduler_reserve_full_isl=engine.reserve_full_prompt,
                    long_prefill_token_threshold=engine.long_prefill_token_threshold,
                    long_prefill_token_threshold_adaptive=(
                        engine.long_prefill_token_threshold_adaptive
                    ),
                    watermark=engine.watermark,
                    scheduler_cls=PLUGIN if plugin else None,
                ),
            )
        except (ValueError, TypeError) as exc:
            lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
            said = [x for x in lines if not x.startswith("For further information")]
            reason = (said[-1] if said else repr(exc)).split(" [type=")[0]
            raise BackendError(f"vLLM refuses the engine settings: {reason}") from None
    config.scheduler_config.async_scheduling = async_scheduling
    cache, sched = config.cache_config, config.scheduler_config
    wanted = {
        "block_size": (cache.block_size, engine.block_size),
        "enable_prefix_caching": (cache.enable_prefix_caching, True),
        "enable_chunked_prefill": (sched.enable_chunked_prefill, True),
        "max_num_batched_tokens": (sched.max_num_batched_tokens, engine.max_num_batched_tokens),
        "max_num_seqs": (sched.max_num_seqs, engine.max_num_seqs),
        "max_model_len": (config.model_config.max_model_len, engine.max_model_len),
        "long_prefill_token_threshold": (
            sched.long_prefill_token_threshold,
            engine.long_prefill_token_threshold,
        ),
        "watermark": (sched.watermark, engine.watermark),
    }
    changed = {k: v for k, v in wanted.items() if v[0] != v[1]}
    if changed:
        raise SimulationError(f"vLLM changed the engine settings (got, wanted): {changed}")
    return config


def build(
    engine: SimSchedulerConfig,
    *,
    async_scheduling: bool,
    bundle: Path | None,
    env: Mapping[str, str] | None = None,
) -> Built:
    """vLLM's scheduler (the plugin's ``TTLScheduler`` when ``bundle`` is given, else
    vLLM's own) over ``engine.num_blocks`` usable blocks; ``env``: more of the plugin's
    variables for its construction (tests: ``TTLCTL_LOG``, ``TTLCTL_REPLICA`` …)."""
    plugin = bundle is not None
    config = vllm_config(engine, async_scheduling=async_scheduling, plugin=plugin)
    num_gpu_blocks = engine.num_blocks + 1  # vLLM's null block (block 0) never holds KV
    config.cache_config.num_gpu_blocks = num_gpu_blocks
    spec = FullAttentionSpec(
        block_size=engine.block_size, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, config)
    cls = config.scheduler_config.get_scheduler_cls()
    variables: dict[str, str | None] = dict.fromkeys(SERVER_SETTINGS)
    variables[ENV_BUNDLE] = str(bundle) if bundle else None
    variables.update(env or {})
    with _env(variables):
        scheduler: Any = cls(
            vllm_config=config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(config),
            block_size=scheduler_block_size,
            hash_block_size=hash_block_size,
            include_finished_set=False,
            log_stats=False,
        )
    if plugin and scheduler.ttl.policy is None:
        raise SimulationError(
            f"the TTL scheduler did not load its bundle: {'; '.join(scheduler.ttl_warnings)}"
        )
    hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(hash_block_size, hash_fn)
    return Built(scheduler, hasher, config, num_gpu_blocks)
