"""A small profile with given prefill and decode coefficients, for the pricing tests."""

from __future__ import annotations

from typing import Any

from profiles.schema import Decode, Prefill, Profile, Reload


def quadratic_profile(
    a: float,
    b: float,
    q: float,
    step_s: float,
    *,
    includes_step: bool,
    points: tuple[tuple[int, float], ...] = (),
    source: dict[str, Any] | None = None,
) -> Profile:
    """Prefill ``a + b·c + q·c²`` (``includes_step`` as given), decode ``step_s`` plus
    1e-4 s per sequence and 1e-8 s per KV token; reloads free."""
    return Profile(
        "p",
        "d",
        "m",
        1024,
        65536,
        Prefill(a, b, q, points, 0.0 if points else None, includes_step),
        Reload(1e10, 0.0),
        Decode(step_s, 1e-4, 1e-8),
        source=source or {},
    )
