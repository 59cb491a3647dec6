"""What an eager-torch profile (:mod:`profiles.measure_torch`) is set up with before anything
is timed: the prompt lengths to time (:func:`resolve_contexts`), the device
(:func:`resolve_device`) and its free memory (:func:`free_bytes`), whether bfloat16 runs on
this CPU (:func:`cpu_bf16_works`), the dtype timed (:func:`resolve_dtype`), and the
transformers config the model is built from (:func:`hf_config`).

Each refusal is a :class:`MeasureError` (a ``ValueError``) saying why and what to do. torch
comes in as an argument and transformers is imported inside :func:`hf_config`, so importing
this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiles import host, models
from profiles.grid import default_contexts, grid_to_time
from ttlctl.errors import TtlctlError


class MeasureError(TtlctlError, ValueError):
    """The measurement cannot run as asked; the message says why and what to do."""


def resolve_contexts(
    contexts: Sequence[int] | None, model_limit: int, max_context: int | None
) -> list[int]:
    """The prefill contexts to time: ``contexts`` checked against the limit (the model's,
    or ``max_context`` below it), or the default grid up to it; at least 3."""
    limit = model_limit if max_context is None else min(model_limit, int(max_context))
    if limit < 1:
        raise MeasureError(f"--max-context must be positive, got {max_context}")
    model_bound = f"the model's max_position_embeddings {model_limit}"
    grid, fault = grid_to_time(contexts, limit, model_bound, max_context, default_contexts)
    if fault is not None:
        raise MeasureError(fault)
    return grid


def resolve_device(torch: Any, device: str) -> Any:
    """The torch device ``--device`` names (``auto``: CUDA when torch sees a GPU)."""
    want = device.strip().lower()
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cpu":
        return torch.device("cpu")
    if not want.startswith("cuda"):
        raise MeasureError(f"--device {device}: expected auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise MeasureError(
            f"--device {device}: torch {torch.__version__} sees no CUDA GPU "
            "(torch.cuda.is_available() is False); use --device cpu for a CPU profile"
        )
    try:
        dev = torch.device(want)
    except RuntimeError:
        raise MeasureError(f"--device {device}: expected auto, cpu, cuda or cuda:N") from None
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise MeasureError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) here")
    return dev


def free_bytes(torch: Any, dev: Any) -> int:
    """Bytes free on the device (the GPU's, or the host's available memory)."""
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    return host.available_bytes()


def cpu_bf16_works(torch: Any) -> bool:
    """Whether bfloat16 matmuls, softmax and SDPA run (and give finite numbers) on this CPU."""
    try:
        x = torch.ones(4, 8, 16, dtype=torch.bfloat16)
        y = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
        z = torch.softmax(y @ x.transpose(-1, -2), dim=-1)
        return bool(torch.isfinite(z).all())
    except (RuntimeError, TypeError):
        return False


def resolve_dtype(
    torch: Any, config: dict[str, Any], dtype: str | None, cuda: bool, where: str
) -> str:
    """The dtype to time in, as the vLLM profiler takes it (:func:`profiles.models.profile_dtype`:
    ``--dtype``, else the config's, else bfloat16); bfloat16 by default on a CPU where it
    does not run (:func:`cpu_bf16_works`) is float32."""
    try:
        name = models.profile_dtype(config, dtype, where)
    except models.ModelConfigError as exc:
        raise MeasureError(str(exc)) from None
    if dtype is None and name == "bfloat16" and not cuda and not cpu_bf16_works(torch):
        return "float32"
    return name


def hf_config(config: dict[str, Any], where: str = "config.json") -> Any:
    """The transformers config of ``config.json`` (a Llama-shaped one without a
    ``model_type`` is taken as Llama), refused (a :class:`MeasureError` naming ``where``,
    the model as given) when transformers does not know its ``model_type`` or builds no
    causal LM of it (``AutoModelForCausalLM``)."""
    import transformers  # heavy (2 s): only when a model is built

    kwargs = {
        k: v
        for k, v in config.items()
        if k
        not in (
            "model_type",
            "torch_dtype",
            "dtype",
            "_name_or_path",
            "transformers_version",
            "auto_map",
            "quantization_config",
        )
    }
    model_type = config.get("model_type")
    if not model_type:
        archs = " ".join(config.get("architectures") or [])
        if "Llama" in archs:
            model_type = "llama"
        else:
            # ``where`` is the --model given, often the config.json itself: not named twice
            kind = f"its architectures ({archs}) are not Llama's" if archs else "no architectures"
            raise MeasureError(
                f'{where}: the config has no model_type, and {kind}: add "model_type" '
                '(e.g. "llama")'
            )
    version = transformers.__version__
    if str(model_type) not in transformers.CONFIG_MAPPING:  # its error lists every type known
        raise MeasureError(f"{where}: transformers {version} knows no model_type {model_type!r}")
    try:
        built = transformers.AutoConfig.for_model(str(model_type), **kwargs)
    except (ValueError, KeyError) as exc:
        line = " ".join(str(exc).split())[:300]
        raise MeasureError(
            f"{where}: transformers cannot build model_type {model_type!r}: {line}"
        ) from None
    if type(built) not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise MeasureError(
            f"{where}: model_type {model_type!r} is not a causal LM in transformers "
            f"{version} (AutoModelForCausalLM builds none; expected e.g. llama)"
        )
    return built
