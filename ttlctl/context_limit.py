"""Contexts a bundle is asked about beyond its profile's ``max_context``: the model serves
no such context, so τ* and the benefit there are priced past the measured model (an
extrapolation of its prefill curve), which ``bundle query`` and ``bundle inspect`` say in
one line rather than refuse."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def beyond_limit(profile: Mapping[str, Any], contexts: Iterable[int]) -> str | None:
    """One line naming the ``contexts`` over ``profile``'s ``max_context``, or None when
    every one is within it (or the profile states no limit)."""
    limit = profile.get("max_context")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return None
    over = [c for c in contexts if c > limit]
    if not over:
        return None
    shown = ", ".join(f"{c:,}" for c in over)
    return (
        f"{shown} tokens {'is' if len(over) == 1 else 'are'} beyond profile "
        f"{profile.get('name')}'s max_context ({limit:,} tokens): the model serves no such "
        "context, and τ* and benefit_s there extrapolate its prefill cost"
    )
