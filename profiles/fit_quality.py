"""How well a measured profile's models fit its own timings.

Each model (the prefill quadratic, the decode step, the prefill on a cached prefix, the host
copy) is fitted on medians of repeated timings; on a quiet machine it stays within a few
percent of every point it was fitted on. A fit that misses a point by much more says the
timings were stretched by other work (a shared CPU, a busy GPU), and a replay priced on that
profile misprices every step: :func:`misfits` names those models, for the command to warn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: a model that misses one of its own points by more than this share is called noisy
NOISY = 0.2

#: the models a profile's ``source.fit`` may report, and what they are called in a warning
_MODELS = (
    ("prefill", "prefill"),
    ("decode", "decode step"),
    ("cached_prefill", "prefill on a cached prefix"),
    ("reload", "host-to-device copy"),
)


def misfits(source: Mapping[str, Any], limit: float = NOISY) -> list[tuple[str, float]]:
    """The models of a profile's ``source`` whose fit misses a measured point by more than
    ``limit`` (a share), with that miss, in the order of :data:`_MODELS`. Both shapes of
    ``source.fit`` are read: flat (``prefill_max_rel_error``: the in-process profilers) and
    nested (``prefill.max_rel_error``: a live server's). A CPU profile's copy is left out:
    there is no host tier to price on a CPU."""
    fit = source.get("fit")
    if not isinstance(fit, Mapping):
        return []
    out: list[tuple[str, float]] = []
    for key, name in _MODELS:
        if key == "reload" and source.get("cpu_profile"):
            continue
        error = fit.get(f"{key}_max_rel_error")
        nested = fit.get(key)
        if error is None and isinstance(nested, Mapping):
            error = nested.get("max_rel_error")
        if isinstance(error, (int, float)) and not isinstance(error, bool) and error > limit:
            out.append((name, float(error)))
    return out
