"""Tick values for the report's log axes, dense enough to read a value off the axis.

matplotlib's own log ticks label the powers of ten (with ``subs=(1, 2, 5)``, also 2× and
5×): an axis from 180 to 780 s, as a JCT tail of one replay spans, was labelled 200 and
500 only, and a pause axis from 10 ms to 1 s read "10⁻²" and "10⁻¹". Here the ticks are
the densest of a few sets of mantissas whose neighbours stay a given share of the axis
apart (so labels do not run into each other), and an axis too narrow for two of them
(69 to 95 s) gets evenly spaced ticks instead.
"""

from __future__ import annotations

import math
from itertools import pairwise

from matplotlib.ticker import MaxNLocator

#: the mantissas per decade, densest first
MANTISSAS = (
    (1, 2, 3, 4, 5, 6, 7, 8, 9),
    (1, 2, 3, 4, 5, 7),
    (1, 2, 3, 5),
    (1, 2, 5),
    (1, 3),
    (1,),
)
#: an axis with fewer ticks than this takes evenly spaced ones
LEAST = 4


def _decade_ticks(lo: float, hi: float, mantissas: tuple[int, ...]) -> list[float]:
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    # written as decimals ("5e-3"), so a tick is the number its label reads
    values = (float(f"{m}e{k}") for k in range(first, last + 1) for m in mantissas)
    return [v for v in values if lo <= v <= hi]


def _closest(ticks: list[float]) -> float:
    """The smallest gap between neighbouring ticks, in decades (inf for one tick)."""
    gaps = [math.log10(b) - math.log10(a) for a, b in pairwise(ticks)]
    return min(gaps, default=math.inf)


def log_ticks(lo: float, hi: float, apart: float) -> list[float]:
    """Ticks within [lo, hi] (both > 0) of a log axis on which neighbours are at least
    ``apart`` of the span ``log10(hi / lo)`` apart: the densest set of :data:`MANTISSAS`
    that keeps them so; evenly spaced ticks where that gives fewer than :data:`LEAST`."""
    # logs apart, not of the ratio: 1e300 / 1e-300 overflows to inf (and ceil(inf) raises)
    span = math.log10(hi) - math.log10(lo) if hi > lo else 0.0
    ticks: list[float] = []
    for mantissas in MANTISSAS:
        ticks = _decade_ticks(lo, hi, mantissas)
        if _closest(ticks) >= apart * span:
            break
    else:  # many decades: every n-th power of ten
        ticks = ticks[:: math.ceil(apart * span)]
    if len(ticks) < LEAST:
        even = MaxNLocator(nbins=max(LEAST, round(1 / apart) - 1), steps=[1, 2, 2.5, 5, 10])
        spaced = [float(v) for v in even.tick_values(lo, hi) if lo <= v <= hi and v > 0]
        if len(spaced) > len(ticks) and _closest(spaced) >= apart * span:
            ticks = spaced
        elif not ticks:  # no two ticks far enough apart: one, mid-axis (2.37 to 2.417 s)
            ticks = [spaced[len(spaced) // 2]] if spaced else [lo]
    return ticks
