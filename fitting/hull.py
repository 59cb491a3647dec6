"""The TTL decision as a query: argmax over τ of P(τ)·B − τ, in O(log n).

P is a step CDF with points (x_j, p_j); the candidates are τ = 0 and the x_j
(METHOD.md). The value B·p − x is linear in the point (x, p), so its maximum over
the candidates lies on their upper concave hull, and along that hull the edge
slopes fall: the best vertex is the first whose outgoing edge has slope ≤ 1/B.
Precompute the hull once per CDF; each query is then one binary search.

Ties go to the smallest τ (pin for less time when it is worth the same).

Standard library only: the engine process imports this.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hull:
    """Upper concave hull of the candidates (0, P(0)) and (x_j, p_j)."""

    x: tuple[float, ...]
    p: tuple[float, ...]
    #: −slope of edge j (from vertex j to j+1): increasing along the hull
    neg_slopes: tuple[float, ...]

    @property
    def empty(self) -> bool:
        return not self.x


EMPTY = Hull((), (), ())


def build(x: Sequence[float], p: Sequence[float]) -> Hull:
    """Hull of a step CDF given by strictly increasing x ≥ 0 and p in (0, 1]."""
    if not x:
        return EMPTY
    if len(x) != len(p):
        raise ValueError("x and p differ in length")
    hx = [0.0]
    hp = [p[0] if x[0] == 0.0 else 0.0]
    for a, b in zip(x, p, strict=True):
        if a <= 0.0:
            continue
        # pop while the last vertex lies on or below the chord from the one before it
        # to (a, b): the monotone-chain test of _not_right_turn, inlined (hot loop)
        while len(hx) >= 2:
            ax, ay, bx, by = hx[-2], hp[-2], hx[-1], hp[-1]
            if (bx - ax) * (b - ay) - (by - ay) * (a - ax) >= 0.0:
                hx.pop()
                hp.pop()
            else:
                break
        hx.append(float(a))
        hp.append(float(b))
    neg = tuple(-(hp[i + 1] - hp[i]) / (hx[i + 1] - hx[i]) for i in range(len(hx) - 1))
    return Hull(tuple(hx), tuple(hp), neg)


def _not_right_turn(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> bool:
    """True when b lies on or below the chord a–c (b is not an upper-hull vertex)."""
    cross = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return cross >= 0.0


def best(hull: Hull, benefit: float) -> tuple[float, float]:
    """(τ*, value) maximising P(τ)·benefit − τ; (0, 0) for an empty hull."""
    if hull.empty:
        return 0.0, 0.0
    if benefit <= 0.0:
        return hull.x[0], hull.p[0] * benefit
    j = bisect_left(hull.neg_slopes, -1.0 / benefit)
    return hull.x[j], hull.p[j] * benefit - hull.x[j]


def brute_force(x: Sequence[float], p: Sequence[float], benefit: float) -> tuple[float, float]:
    """The same argmax by scanning every candidate: the reference for tests and benches."""
    if not x:
        return 0.0, 0.0
    best_tau = 0.0
    best_value = (p[0] if x[0] == 0.0 else 0.0) * benefit
    for tau, prob in zip(x, p, strict=True):
        value = prob * benefit - tau
        if value > best_value:
            best_tau, best_value = tau, value
    return best_tau, best_value


def cold_start(benefit: float) -> float:
    """τ for durations ~ Exp(1): argmax (1 − e^−τ)·B − τ = ln B for B > 1, else 0."""
    return math.log(benefit) if benefit > 1.0 else 0.0
