"""A profile's wake (``Profile.wake``): what an engine's first call after an idle spell
costs beyond the same call on a busy engine, as ``[idle seconds, extra seconds]`` points
(measured by ``ttlctl profile --engine``, :mod:`profiles.server_wake`).

Standard library only, as :mod:`profiles.schema`, which prices an idle spell with
:func:`wake_s`, and :mod:`profiles.profile_read`, which reads the points with
:func:`wake_points`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

#: the points' shape, for a refusal's message
WAKE_SHAPE = (
    "a list of [idle seconds, extra seconds] points, numbers, neither negative, "
    "idle seconds ascending"
)


def wake_points(raw: Any) -> tuple[tuple[float, float], ...] | None:
    """The JSON field's points (none when it is absent or null); None when they are not
    :data:`WAKE_SHAPE`."""
    if raw is None:
        return ()
    pairs = raw if isinstance(raw, list) else [raw]
    points = tuple(
        (float(p[0]), float(p[1]))
        for p in pairs
        if isinstance(p, list) and len(p) == 2 and all(_seconds(v) for v in p)
    )
    if len(points) != len(pairs) or any(b <= a for (a, _), (b, _) in itertools.pairwise(points)):
        return None
    return points


def _seconds(value: Any) -> bool:
    """Whether ``value`` is a JSON number of seconds: finite, not negative."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def wake_s(points: Sequence[tuple[float, float]], idle_s: float) -> float:
    """What the first step after ``idle_s`` seconds with nothing to run costs beyond its
    price on a busy engine: linear between the measured points and from (0, 0), the last
    point's beyond it (0 without points, or without an idle spell)."""
    if not points or idle_s <= 0:
        return 0.0
    x0, y0 = 0.0, 0.0
    for x, y in points:
        if idle_s <= x:
            return y0 + (y - y0) * (idle_s - x0) / (x - x0) if x > x0 else y
        x0, y0 = x, y
    return y0
