"""Model configurations (Hugging Face ``config.json`` shape) and what their KV costs.

``--model`` takes a path to a ``config.json`` (or a folder holding one) or a
preset name below. There is no model hub here: presets are the published
configs of common models, written out, plus the tiny test models ttlctl builds
locally. Weights are always random: profiling times the shapes, not the values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttlctl.errors import TtlctlError
from ttlctl.filekind import mistaken
from ttlctl.jsonfile import JsonFileError, read_json_object

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "float8_e4m3fn": 1}
#: what a profiler (vLLM's or eager torch's) times a model in
DTYPES = ("bfloat16", "float16", "float32")
#: ``--dtype``'s short names
DTYPE_SHORT = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

PRESETS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": {
        **_LLAMA,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
    },
    "llama-3.1-70b": {
        **_LLAMA,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
    },
    "qwen3-8b": {
        **_LLAMA,
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1e6,
        "rms_norm_eps": 1e-6,
    },
    # the tests' small models (built locally, random weights)
    "tiny": {
        **_LLAMA,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 4096,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
    },
    "tiny-55m": {
        **_LLAMA,
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 192,
        "vocab_size": 4096,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
    },
}


class ModelConfigError(TtlctlError, ValueError):
    pass


#: what ``--model`` names, as an error says it is not
CONFIG = "a model's config.json"


def load_config(ref: str | Path) -> tuple[str, dict[str, Any]]:
    """(name, config) from a preset name, a config.json, or a folder holding one."""
    if str(ref) in PRESETS:
        return str(ref), dict(PRESETS[str(ref)])
    path = Path(ref)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():  # a folder that is not a model's (a run's, the wrong level)
            raise ModelConfigError(
                f"{ref}: the folder holds no config.json (give a model's folder, its "
                "config.json or a preset)"
            )
    if not path.is_file():
        raise ModelConfigError(
            f"{ref}: no such config.json or preset (presets: {', '.join(sorted(PRESETS))})"
        )
    try:
        config = read_json_object(path, CONFIG)
    except JsonFileError as exc:
        raise ModelConfigError(str(exc)) from None
    wrong = mistaken(config, CONFIG, CONFIG)  # a fit, a profile … given as the model
    if wrong is not None:
        raise ModelConfigError(f"{path}: {wrong}")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if not isinstance(config.get(key), int):
            raise ModelConfigError(f"{path}: {key} missing or not an integer")
    return path.parent.name, config


def head_dim(config: dict[str, Any]) -> int:
    explicit = config.get("head_dim")
    if isinstance(explicit, int) and explicit > 0:
        return explicit
    return int(config["hidden_size"]) // int(config["num_attention_heads"])


def kv_bytes_per_token(config: dict[str, Any], dtype: str | None = None) -> int:
    """2 (K and V) × layers × KV heads × head dim × bytes per element."""
    kv_heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
    name = dtype or str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if name not in DTYPE_BYTES:
        raise ModelConfigError(f"unknown dtype {name!r}")
    return 2 * int(config["num_hidden_layers"]) * kv_heads * head_dim(config) * DTYPE_BYTES[name]


def profile_dtype(config: dict[str, Any], dtype: str | None, where: str) -> str:
    """The dtype a profiler times ``config``'s model in: ``dtype`` (``--dtype``, short names
    taken), else the config's (``torch_dtype``, else ``dtype``, else bfloat16); one of
    :data:`DTYPES`, or a :class:`ModelConfigError` naming the flag, or ``where`` (the model
    as given) and the config's key."""
    expected = f"expected one of {', '.join(DTYPES)}"
    if dtype is not None:
        name = DTYPE_SHORT.get(dtype, dtype)
        if name not in DTYPES:
            raise ModelConfigError(f"--dtype {dtype}: {expected}")
        return name
    key = next((k for k in ("torch_dtype", "dtype") if config.get(k)), None)
    name = str(config[key]) if key else "bfloat16"
    if name not in DTYPES:
        raise ModelConfigError(f"{where}: {key} {name!r}: {expected}; give --dtype")
    return name


def max_context(config: dict[str, Any]) -> int:
    return int(config.get("max_position_embeddings") or 2048)


def parameters(config: dict[str, Any]) -> int:
    """Approximate parameter count of a Llama-shaped decoder (embeddings included)."""
    h = int(config["hidden_size"])
    inter = int(config.get("intermediate_size") or 4 * h)
    layers = int(config["num_hidden_layers"])
    d = head_dim(config)
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    vocab = int(config.get("vocab_size") or 32000)
    attn = h * d * heads * 2 + h * d * kv * 2
    mlp = 3 * h * inter
    embed = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return layers * (attn + mlp) + embed
