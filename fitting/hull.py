"""The TTL decision as a query: argmax over τ of P(τ)·B − τ, in O(log n).

P is a step CDF with points (x_j, p_j); the candidates are τ = 0 and the x_j (the
method: the optimum is 0 or an observed duration). The value B·p − x is linear in the
point (x, p), so its maximum over the candidates lies on their upper concave hull,
and along that hull the edge slopes fall: the best vertex is the first whose outgoing
edge has slope ≤ 1/B. Precompute the hull once per CDF; each query is then one binary
search.

Exact on its inputs: τ* is the argmax in exact arithmetic over the float x, p and B
given, ties to the smallest τ (pin for less time when it is worth the same), as a
brute force in ``fractions.Fraction`` finds it. Floats decide only where their
rounding provably cannot change the answer; elsewhere integers do (every float is an
integer times a power of two):

- construction drops a point that lies on or below the chord of its neighbours (a
  collinear one too: ties then go to the left end of a flat run, the smaller τ). The
  floating cross product decides unless it is within its rounding error bound of zero;
  then the cross product is computed exactly. The vertices are exactly the extreme
  points, and the exact slopes fall strictly along the hull;
- each edge j carries a guard band around its floating −slope, wide enough (relative
  1e-12) to hold the exact −slope. A query bisects −1/B among the bands: between two
  bands the floats decide; inside one (a near-tie) it searches the edges again with
  the exact test (p_{j+1} − p_j)·B ≤ x_{j+1} − x_j, O(log n) integer comparisons.

Away from near-ties a query is one bisect, as a plain floating one.

Standard library only: the engine process imports this.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import le, mul, sub

#: relative error bound of the floating 2×2 cross product of differences (Shewchuk's
#: orientation bound (3 + 16ε)ε with ε = 2^-53 is 3.3e-16; a wide margin on it)
_CROSS_REL = 1e-15
#: products below this size may have lost bits to underflow: decide exactly
_TINY = 1e-280
#: half-width of an edge's guard band, relative to its −slope (rounding is ~4e-16)
_SLOPE_REL = 1e-12
#: where a guard band ends for a slope that overflowed to ±inf
_HUGE = 1e308


@dataclass(frozen=True, slots=True)
class Hull:
    """Upper concave hull of the candidates (0, P(0)) and (x_j, p_j)."""

    x: tuple[float, ...]
    p: tuple[float, ...]
    #: −inf, then the low and high end of each edge's guard band (around the edge's
    #: −slope, from vertex j to j+1, which increases along the hull): non-decreasing
    guards: tuple[float, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.x


EMPTY = Hull((), ())


def build(x: Sequence[float], p: Sequence[float]) -> Hull:
    """Hull of a step CDF given by strictly increasing x ≥ 0 and p in (0, 1]."""
    if not x:
        return EMPTY
    if len(x) != len(p):
        raise ValueError("x and p differ in length")
    hx = [0.0]
    hp = [float(p[0]) if x[0] == 0.0 else 0.0]
    # x is monotone and p lies in [0, 1], so each product of differences is at most
    # 4·max|x|·max(1, |p|): one bound on the cross product's rounding for the whole chain
    top = max(1.0, abs(p[0]), abs(p[-1]))
    margin = _CROSS_REL * 8.0 * float(max(abs(x[0]), abs(x[-1]))) * top + _TINY
    low = -margin
    # the chain's last two vertices live in locals (hot loop): (ax, ay) then (bx, by)
    ax = ay = 0.0
    bx, by = hx[0], hp[0]
    n = 1
    for a, b in zip(map(float, x), map(float, p), strict=True):
        if a <= 0.0:
            continue
        # pop while the last vertex lies on or below the chord from the one before it
        # to (a, b): the monotone-chain test, inlined, floats where certain
        while n >= 2:
            cross = (bx - ax) * (b - ay) - (by - ay) * (a - ax)
            if cross < low:  # certainly a right turn: the last vertex stays
                break
            if cross > margin or _not_right_turn(ax, ay, bx, by, a, b):
                hx.pop()
                hp.pop()
                n -= 1
                bx, by = ax, ay
                if n >= 2:
                    ax, ay = hx[-2], hp[-2]
            else:
                break
        hx.append(a)
        hp.append(b)
        n += 1
        ax, ay, bx, by = bx, by, a, b
    neg = [-(hp[i + 1] - hp[i]) / (hx[i + 1] - hx[i]) for i in range(len(hx) - 1)]
    return Hull(tuple(hx), tuple(hp), _guards(neg))


def build_equal_weights(x: Sequence[float]) -> Hull:
    """:func:`build` of the step CDF of distinct samples ``x`` (sorted, ≥ 0), each of weight
    1/n: p_i = i/n as floats.

    The same hull, faster: with equal steps of p, an interior point lies below the chord
    of its neighbours exactly when the gap before it exceeds the gap after it, and such a
    point is never a vertex. The gaps are compared in one pass at C speed, and a point is
    dropped only when its gap before exceeds its gap after by more than every rounding
    involved (the gaps' own, and that of p_i = i/n, relative n·ε at most); the chain then
    decides the rest exactly.
    """
    n = len(x)
    p = _equal_steps(n)
    if n <= 2:
        return build(x, p)
    gaps = list(map(sub, x[1:], x[:-1]))
    slack = 1.0 + (n * 1e-15 + 1e-14)
    keep = [True, *map(le, gaps[:-1], map(mul, gaps[1:], repeat(slack))), True]
    return build(list(compress(x, keep)), list(compress(p, keep)))


@functools.lru_cache(maxsize=8)
def _equal_steps(n: int) -> tuple[float, ...]:
    """p_i = i/n for i = 1..n (a CDF of n samples)."""
    total = float(n)
    return tuple(i / total for i in range(1, n + 1))


def _guards(neg: list[float]) -> tuple[float, ...]:
    """−inf (it catches −1/B = −inf: B so small that 1/B overflowed), then each edge's
    band (low, high) around its −slope, raised where needed to stay non-decreasing."""
    guards = [-math.inf]
    for s in neg:
        if math.isinf(s):  # a slope past the largest float: only exact arithmetic knows
            lo, hi = (-math.inf, -_HUGE) if s < 0 else (_HUGE, math.inf)
        else:
            half = _SLOPE_REL * abs(s) + _TINY
            lo, hi = s - half, s + half
        lo = max(lo, guards[-1])
        guards += (lo, max(lo, hi))
    return tuple(guards)


def _not_right_turn(ax: float, ay: float, bx: float, by: float, cx: float, cy: float) -> bool:
    """b lies on or below the chord a–c, decided exactly (the cross product was near 0).

    First the floating cross product against its own error bound (relative to this
    triple's products, tighter than the chain's), then integers.
    """
    left = (bx - ax) * (cy - ay)
    right = (by - ay) * (cx - ax)
    cross = left - right
    bound = _CROSS_REL * (abs(left) + abs(right)) + _TINY
    if cross > bound:
        return True
    if cross < -bound:
        return False
    return _exact_cross(ax, ay, bx, by, cx, cy) >= 0


def _exact_cross(ax: float, ay: float, bx: float, by: float, cx: float, cy: float) -> int:
    """(b − a) × (c − a) times a positive integer, exactly: ≥ 0 when b is on or below a–c.

    Each float is n/d with d a power of two, so the cross product is a ratio of
    integers. Neighbouring points usually differ exactly in floats (for q ≥ r ≥ 0,
    Fast2Sum's error term r − (q − fl(q − r)) is then 0): four differences to convert,
    not six values.
    It runs for every collinear triple, which rounded durations make common.
    """
    u, v, w, z = bx - ax, cy - ay, by - ay, cx - ax
    if (
        0.0 <= ax <= bx
        and ax <= cx
        and 0.0 <= ay <= by
        and ay <= cy
        and not (ax - (bx - u) or ay - (cy - v) or ay - (by - w) or ax - (cx - z))
    ):
        nu, du = u.as_integer_ratio()
        nv, dv = v.as_integer_ratio()
        nw, dw = w.as_integer_ratio()
        nz, dz = z.as_integer_ratio()
        return nu * nv * dw * dz - nw * nz * du * dv
    nax, dax = ax.as_integer_ratio()
    nbx, dbx = bx.as_integer_ratio()
    ncx, dcx = cx.as_integer_ratio()
    nay, day = ay.as_integer_ratio()
    nby, dby = by.as_integer_ratio()
    ncy, dcy = cy.as_integer_ratio()
    dx = max(dax, dbx, dcx)
    dy = max(day, dby, dcy)
    iax, ibx, icx = nax * (dx // dax), nbx * (dx // dbx), ncx * (dx // dcx)
    iay, iby, icy = nay * (dy // day), nby * (dy // dby), ncy * (dy // dcy)
    return (ibx - iax) * (icy - iay) - (iby - iay) * (icx - iax)


def _integers(*values: float) -> tuple[list[int], int]:
    """Integers n_i and one power of two d with values[i] = n_i / d exactly (finite floats)."""
    ratios = [v.as_integer_ratio() for v in values]
    d = max(den for _, den in ratios)
    return [num * (d // den) for num, den in ratios], d


def best(hull: Hull, benefit: float) -> tuple[float, float]:
    """(τ*, value) maximising P(τ)·benefit − τ; (0, 0) for an empty hull.

    τ* is exact (see the module docstring); the value is its floating P(τ*)·B − τ*.
    A benefit ≤ 0 (or NaN) never pays for a pin: τ* = 0.
    """
    xs = hull.x
    if not xs:
        return 0.0, 0.0
    if not benefit > 0.0:
        return xs[0], hull.p[0] * benefit
    # k = 2j + 1: between the bands of edges j − 1 and j, so vertex j; else a near-tie
    k = bisect_left(hull.guards, -1.0 / benefit)
    j = k >> 1 if k & 1 else _exact_index(hull, benefit, max(0, (k >> 1) - 1))
    tau = xs[j]
    return tau, hull.p[j] * benefit - tau


def _exact_index(hull: Hull, benefit: float, guess: int) -> int:
    """The first vertex whose outgoing edge does not pay at ``benefit``, exactly.

    Along a hull whose exact slopes fall strictly, "edge j does not pay", (p_{j+1} −
    p_j)·B ≤ x_{j+1} − x_j, is false and then true; the answer is its first true edge
    (or the last vertex). ``guess`` is the edge of the guard band −1/B fell in.
    """
    edges = len(hull.x) - 1
    if math.isinf(benefit):  # only the largest P counts: the last vertex
        return edges
    num, den = benefit.as_integer_ratio()
    xs, ps = hull.x, hull.p

    def stops(j: int) -> bool:
        (x0, x1), dx = _integers(xs[j], xs[j + 1])
        (p0, p1), dp = _integers(ps[j], ps[j + 1])
        # (p1 − p0)/dp · num/den ≤ (x1 − x0)/dx, every denominator positive
        return (p1 - p0) * num * dx <= (x1 - x0) * dp * den

    if (guess == edges or stops(guess)) and (guess == 0 or not stops(guess - 1)):
        return guess
    lo, hi = 0, edges
    while lo < hi:
        mid = (lo + hi) // 2
        if stops(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def brute_force(x: Sequence[float], p: Sequence[float], benefit: float) -> tuple[float, float]:
    """The same argmax by scanning every candidate in floats: the bench's baseline.

    Floating values: where candidates are within rounding of one another it may pick
    another τ than :func:`best` (the tests' reference is a rational brute force).
    """
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
