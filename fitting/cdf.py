"""Empirical CDFs of tool durations, their compression, and the exponential fit.

A CDF is kept as two parallel tuples: durations ``x`` (strictly increasing, ≥ 0)
and ``p`` = the fraction of samples ≤ x (strictly increasing, last = 1). That
step function is all the TTL decision needs (docs/method.md: the optimum is 0 or an
observed duration).

Compression keeps at most ``MAX_POINTS`` points of the step function, chosen
so that it is never above the full CDF and never more than
``δ = 2/(MAX_POINTS − 2)`` below it (Kolmogorov distance ≤ 0.00196 with 1,024
points). For any benefit B, P(τ)·B − τ then moves by at most δ·B at every τ, so
the decision taken on the compressed CDF is worth at most ``2·δ·B`` (0.4% of B)
less than the best decision on the full CDF. Up to 1,024 distinct durations are
kept exactly.

This module uses numpy and scipy (the offline side). The engine-side maths in
:mod:`fitting.policy` reads the resulting tuples with the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from fitting.fit_doc import CdfDoc, ExponentialDoc

MAX_POINTS = 1024


@dataclass(frozen=True, slots=True)
class CDF:
    x: tuple[float, ...]
    p: tuple[float, ...]
    #: number of samples the CDF was built from (before compression)
    n: int

    def __post_init__(self) -> None:
        if len(self.x) != len(self.p):
            raise ValueError("x and p differ in length")
        if self.n < 0 or (self.n == 0) != (len(self.x) == 0):
            raise ValueError("n must be positive exactly when the CDF has points")
        if self.x:
            xs, ps = np.asarray(self.x), np.asarray(self.p)
            if not (np.all(np.diff(xs) > 0) and np.all(np.diff(ps) > 0)):
                raise ValueError("x and p must be strictly increasing")
            if xs[0] < 0 or ps[0] <= 0 or abs(ps[-1] - 1.0) > 1e-12:
                raise ValueError("x must be >= 0 and p must end at 1")

    def at(self, tau: float) -> float:
        """P(duration ≤ tau) under this step function."""
        if not self.x:
            return 0.0
        i = int(np.searchsorted(np.asarray(self.x), tau, side="right"))
        return 0.0 if i == 0 else float(self.p[i - 1])

    def to_json(self) -> CdfDoc:
        return {"n": self.n, "x": list(self.x), "p": list(self.p)}

    @staticmethod
    def from_json(data: CdfDoc) -> CDF:
        return CDF(tuple(map(float, data["x"])), tuple(map(float, data["p"])), int(data["n"]))


def empirical(samples: ArrayLike) -> CDF:
    """The full empirical CDF of non-negative, finite samples."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size and (not np.all(np.isfinite(values)) or np.any(values < 0)):
        raise ValueError("durations must be finite and non-negative")
    if values.size == 0:
        return CDF((), (), 0)
    values = np.sort(values)
    # the last index of each run of equal values carries the CDF's height there
    last = np.flatnonzero(np.r_[values[1:] != values[:-1], True])
    p = (last + 1) / values.size
    return CDF(tuple(values[last].tolist()), tuple(p.tolist()), int(values.size))


def compress(cdf: CDF, max_points: int = MAX_POINTS) -> CDF:
    """At most ``max_points`` points; see the module docstring for the bound.

    Greedy from the left: from the last kept point (height h), keep the last
    point whose height is ≤ h + δ, or the next point when it alone jumps further
    (a jump is kept exactly). Every point passed over is within δ of the kept
    point below it, and every two kept points climb more than δ, so at most
    2/δ + 2 = ``max_points`` points are kept with δ = 2/(max_points − 2).
    """
    if len(cdf.x) <= max_points:
        return cdf
    p = np.asarray(cdf.p)
    bound = compression_bound(max_points)
    # half the bound usually fits (smooth CDFs); the full bound always does
    for delta in (bound * 0.51, bound):
        idx = _greedy(p, delta)
        if idx.size <= max_points:
            break
    return CDF(tuple(np.asarray(cdf.x)[idx].tolist()), tuple(p[idx].tolist()), cdf.n)


def _greedy(p: NDArray[np.float64], delta: float) -> NDArray[np.int64]:
    keep: list[int] = []
    height, start = 0.0, 0
    while start < p.size:
        i = max(int(np.searchsorted(p, height + delta, side="right")) - 1, start)
        keep.append(i)
        height, start = float(p[i]), i + 1
        if len(keep) > 4 * (1.0 / delta + 2):  # cannot happen; a guard against a loop
            raise AssertionError("compression did not terminate")
    return np.asarray(keep, dtype=np.int64)


def ks_distance(a: CDF, b: CDF) -> float:
    """sup over x of |A(x) − B(x)| for two step CDFs."""
    grid = np.union1d(np.asarray(a.x), np.asarray(b.x))
    if grid.size == 0:
        return 0.0
    return float(np.max(np.abs(_steps(a, grid) - _steps(b, grid))))


def _steps(cdf: CDF, grid: NDArray[np.float64]) -> NDArray[np.float64]:
    if not cdf.x:
        return np.zeros_like(grid)
    i = np.searchsorted(np.asarray(cdf.x), grid, side="right")
    return np.where(i == 0, 0.0, np.asarray(cdf.p)[np.maximum(i - 1, 0)])


def compression_bound(max_points: int = MAX_POINTS) -> float:
    """The largest Kolmogorov distance :func:`compress` may introduce."""
    return 2.0 / (max_points - 2)


@dataclass(frozen=True, slots=True)
class ExpFit:
    """Maximum-likelihood exponential fit (location 0) and how well it fits."""

    rate: float  # 1 / mean, per second
    mean_s: float
    ks: float  # Kolmogorov–Smirnov statistic against the samples
    ks_pvalue: float

    def to_json(self) -> ExponentialDoc:
        return {
            "rate": self.rate,
            "mean_s": self.mean_s,
            "ks": self.ks,
            "ks_pvalue": self.ks_pvalue,
        }


def exponential_fit(samples: ArrayLike) -> ExpFit | None:
    """Fit Exp(rate) with scipy; None for no samples or all-zero samples."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0 or float(values.mean()) <= 0:
        return None
    _, scale = stats.expon.fit(values, floc=0.0)
    test = stats.kstest(values, "expon", args=(0.0, scale))
    return ExpFit(1.0 / scale, float(scale), float(test.statistic), float(test.pvalue))
