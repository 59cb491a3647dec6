"""``--kv-cache-memory-bytes`` too small for one KV block, refused before any server starts.

vLLM 0.32 refuses to start a server whose KV memory, less the null block its block pool
keeps, does not hold one request of ``max_model_len`` tokens, one block at least
(``check_enough_kv_cache_memory``, vllm/v1/core/kv_cache_utils.py), but only once the
model is loaded and profiled: minutes on a GPU, and then validate could only quote the
server's log. Where the arguments tell what a block takes, validate refuses memory for
fewer than two blocks first (:func:`check_kv_memory`): a local ``--model`` folder's
``config.json`` gives the KV values a token keeps
(:func:`profiles.models.kv_bytes_per_token`), the KV cache's dtype their bytes, vLLM's
arguments the block size (``--block-size``, else at least
:data:`~replay.scheduler_config.BLOCK_SIZE` tokens, vLLM's smallest default) and the
memory (read as vLLM's ``human_readable_int`` reads it: ``8M`` is 8 × 2**20, ``8m`` is
8 × 10**6).

Deliberate differences: every guess errs towards starting the server, which says what
it has when it answers (:func:`~replay.validation.sizing.kv_tokens_of`). Left to the
server:

- a model whose KV is not 2 × layers × KV heads × head dim values a token: MLA's latent
  KV (``kv_lora_rank``), sliding-window, chunked or per-layer attention types, a config
  nested per modality, or a ``model_type`` not in :data:`PLAIN_MODELS`;
- arguments that change what one device holds or how a token is stored: the parallel
  sizes, ``--hf-overrides``, speculative decoding, quantization, and a model or KV cache
  dtype ttlctl does not know (the model's own ``float32`` counts as 2 bytes, since vLLM
  serves a float32 model in 16 bits unless told);
- a quantized checkpoint (``quantization_config`` in its config) without
  ``--kv-cache-dtype``: vLLM then keeps the KV in the checkpoint's KV scheme, fp8 for
  ModelOpt's ``kv_cache_quant_algo`` and llm-compressor's ``kv_cache_scheme``
  (``resolve_kv_cache_dtype_string``, vllm/utils/torch_utils.py), half the bytes;
- ``--kv-cache-memory-bytes 0``: a GPU server takes it as not given (its KV sized by
  ``--gpu-memory-utilization``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from profiles import models
from replay.scheduler_config import BLOCK_SIZE
from replay.validation.error import ValidateError
from replay.validation.sizing import given_block_size
from ttlctl.server import vllm_config

#: vLLM's option that sizes the KV cache in bytes
KV_MEMORY_FLAG = "--kv-cache-memory-bytes"
#: the model types whose every layer keeps 2 × KV heads × head dim values a token
PLAIN_MODELS = frozenset({"llama", "mistral", "qwen2", "qwen3"})
#: config keys of a KV laid out otherwise (with ``sliding_window`` when it is set)
OTHER_LAYOUTS = ("kv_lora_rank", "layer_types", "attention_chunk_size", "text_config")
#: vLLM options after which a device holds another share of the KV, or stores it otherwise
RESHAPING = (
    "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
    "--prefill-context-parallel-size", "-pcp", "--decode-context-parallel-size", "-dcp",
    "--hf-overrides", "--speculative-config", "--quantization", "-q",
)  # fmt: skip
#: the config key of a quantized checkpoint, whose KV scheme vLLM's ``auto`` KV dtype follows
QUANTIZED = "quantization_config"
#: bytes a value takes in the dtypes vLLM's ``--dtype`` and ``--kv-cache-dtype`` name
DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4}
#: vLLM's ``human_readable_int`` suffixes
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_bytes(text: str) -> int | None:
    """``text`` read as vLLM 0.32's ``human_readable_int`` reads it (None: vLLM refuses
    it, at once, as it parses its arguments)."""
    text = text.strip()
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if found is None:
        try:  # vLLM's own int(): a sign, underscores between digits ("16_384")
            return int(text)
        except ValueError:
            return None
    number, suffix = found.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    return int(number) * _BINARY[suffix] if number.isdigit() else None


def _value(args: vllm_config.VllmArgs, name: str) -> str | None:
    found = args.value(name)
    return None if found is None else found[1]


def kv_element_bytes(args: vllm_config.VllmArgs, config: Mapping[str, Any]) -> int | None:
    """Bytes of one KV value: ``--kv-cache-dtype`` (``fp8…``: 1), else the model's dtype
    (``--dtype``, else the config's, a float32 model served in 16 bits); None: one ttlctl
    does not know, or a quantized checkpoint's (vLLM follows its KV scheme)."""
    kv = (_value(args, "--kv-cache-dtype") or "auto").lower()
    if kv != "auto":
        return 1 if kv.startswith("fp8") and kv != "fp8_ds_mla" else DTYPE_BYTES.get(kv)
    if config.get(QUANTIZED):
        return None
    dtype = (_value(args, "--dtype") or "auto").lower()
    if dtype != "auto":
        return DTYPE_BYTES.get(dtype)
    named = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower()
    size = DTYPE_BYTES.get(named)
    return None if size is None else min(size, 2)


@dataclass(frozen=True, slots=True)
class Block:
    """What one KV block of a server takes, as its arguments and model config tell."""

    #: its tokens: ``--block-size``, else vLLM's smallest default
    tokens: int
    #: the KV bytes a token takes on the server
    token_bytes: int
    #: whether ``tokens`` is the arguments' ``--block-size`` (else a lower bound)
    given: bool

    @property
    def bytes(self) -> int:
        return self.tokens * self.token_bytes

    def __str__(self) -> str:
        if self.given:
            return f"{self.bytes:,} bytes ({self.tokens} tokens × {self.token_bytes:,} bytes)"
        return (
            f"at least {self.bytes:,} bytes (vLLM's smallest default block, {self.tokens} "
            f"tokens, × {self.token_bytes:,} bytes)"
        )


def block_of(args: Sequence[str], config: Mapping[str, Any] | None) -> Block | None:
    """One KV block of a server started with vLLM's ``args``, the model's ``config``
    (a local model folder's); None where they do not tell (see the module)."""
    if config is None or str(config.get("model_type")) not in PLAIN_MODELS:
        return None
    if any(key in config for key in OTHER_LAYOUTS) or config.get("sliding_window"):
        return None
    read = vllm_config.read(args, RESHAPING)
    if any(read.sets(name) for name in RESHAPING):
        return None
    element = kv_element_bytes(read, config)
    if element is None:
        return None
    try:  # the K and V values a token keeps, each of ``element`` bytes
        values = models.kv_bytes_per_token(dict(config), "float16") // DTYPE_BYTES["float16"]
    except (KeyError, TypeError, ValueError):
        return None
    given = given_block_size(args)
    if given is None:
        return Block(BLOCK_SIZE, values * element, given=False)
    return Block(given[1], values * element, given=True)


def check_kv_memory(args: Sequence[str] | None, config: Mapping[str, Any] | None) -> None:
    """Before any server starts: :class:`ValidateError` naming ``--kv-cache-memory-bytes``
    when vLLM's ``args`` give the servers less KV memory than two blocks take: no block
    beside the null block (vLLM would refuse them once the model is loaded). ``args``
    None: validate starts no server; ``config``: the model's ``config.json`` (None: not
    known)."""
    if args is None:
        return
    given = vllm_config.read(args, (KV_MEMORY_FLAG,)).value(KV_MEMORY_FLAG)
    if given is None:
        return
    shown, text = given
    memory = memory_bytes(text)
    block = block_of(args, config)
    # 0: a GPU server sizes its KV by --gpu-memory-utilization, as if it were not given
    if memory is None or memory == 0 or block is None or memory >= 2 * block.bytes:
        return
    raise ValidateError(
        f"{shown} {text} holds no KV block beside vLLM's null block: a block of the model "
        f"takes {block}; give at least {2 * block.bytes:,} (vLLM refuses to start with "
        "less, once the model is loaded)"
    )
