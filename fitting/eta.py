"""η = −Corr(k, N − k): how much serving old programs first approximates shortest-remaining-first.

Over finished programs, each decision point of a program of N calls is a pair
(k, N − k) for k = 1 … N − 1 (calls served so far, calls left); η is minus the
correlation of the pooled pairs. Fixed-length programs give η = 1, geometric
(memoryless) lengths η ≈ 0, heavy tails η < 0. Programs of one call have no
decision point; when every pair is the same (all programs of length 2) the
correlation is undefined and η is None.

The per-program sums have closed forms, so an estimate needs only five running
sums: :class:`EtaSums` (standard library; the engine updates it online) and the
vectorised :func:`estimate` with a bootstrap interval (numpy; offline).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Used where η cannot be estimated (no data): the paper's cold-start assumption.
DEFAULT_ETA = 1.0


def _program_sums(n_calls: int) -> tuple[int, int, int, int]:
    """(pairs, Σk, Σk², Σk(N−k)) over k = 1 … N−1; Σ(N−k) = Σk and Σ(N−k)² = Σk²."""
    m = n_calls - 1
    if m <= 0:
        return 0, 0, 0, 0
    s1 = m * (m + 1) // 2
    s2 = m * (m + 1) * (2 * m + 1) // 6
    return m, s1, s2, n_calls * s1 - s2


def eta_from_sums(n: float, s1: float, s2: float, sxy: float) -> float | None:
    """η from pooled sums (x and y share Σ and Σ², so the variances are equal)."""
    if n <= 0:
        return None
    var = n * s2 - s1 * s1
    if var <= 1e-12 * max(1.0, n * s2):
        return None
    return -(n * sxy - s1 * s1) / var


@dataclass(slots=True)
class EtaSums:
    """Running sums over finished programs, with an optional prior weight."""

    n: float = 0.0
    s1: float = 0.0
    s2: float = 0.0
    sxy: float = 0.0
    programs: int = 0

    def add(self, n_calls: int, weight: float = 1.0) -> None:
        m, s1, s2, sxy = _program_sums(n_calls)
        self.n += weight * m
        self.s1 += weight * s1
        self.s2 += weight * s2
        self.sxy += weight * sxy
        self.programs += 1

    def eta(self) -> float | None:
        return eta_from_sums(self.n, self.s1, self.s2, self.sxy)


@dataclass(frozen=True, slots=True)
class EtaEstimate:
    value: float | None
    ci_low: float | None
    ci_high: float | None
    programs: int
    pairs: int
    bootstrap: int

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": 0.95,
            "programs": self.programs,
            "pairs": self.pairs,
            "bootstrap": self.bootstrap,
        }


def estimate(lengths: Any, *, bootstrap: int = 1000, seed: int = 0) -> EtaEstimate:
    """η over programs of the given lengths, with a 95% percentile bootstrap interval.

    Programs are resampled with replacement; the number of resamples shrinks for
    very many programs so that the work stays under ~2·10⁷ gathers.
    """
    import numpy as np

    n_calls = np.asarray(lengths, dtype=np.int64)
    m = np.clip(n_calls - 1, 0, None).astype(np.float64)
    s1 = m * (m + 1) / 2
    s2 = m * (m + 1) * (2 * m + 1) / 6
    sxy = n_calls * s1 - s2
    value = eta_from_sums(m.sum(), s1.sum(), s2.sum(), sxy.sum())
    programs = int(n_calls.size)
    if value is None or programs < 2 or bootstrap <= 0:
        return EtaEstimate(value, None, None, programs, int(m.sum()), 0)
    reps = int(min(bootstrap, max(200, 20_000_000 // programs)))
    rng = np.random.default_rng(seed)
    stats = np.stack([m, s1, s2, sxy])
    draws = np.empty(reps)
    chunk = max(1, 5_000_000 // programs)
    for start in range(0, reps, chunk):
        stop = min(reps, start + chunk)
        idx = rng.integers(0, programs, size=(stop - start, programs))
        sums = stats[:, idx].sum(axis=2)  # (4, chunk)
        var = sums[0] * sums[2] - sums[1] ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            draws[start:stop] = -(sums[0] * sums[3] - sums[1] ** 2) / var
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return EtaEstimate(value, None, None, programs, int(m.sum()), reps)
    low, high = np.quantile(finite, [0.025, 0.975])
    return EtaEstimate(value, float(low), float(high), programs, int(m.sum()), reps)


def clamp(value: float) -> float:
    """η is a correlation: keep it in [−1, 1] against rounding (not finite: the default)."""
    return max(-1.0, min(1.0, value)) if math.isfinite(value) else DEFAULT_ETA


def from_fit(fit: Mapping[str, Any]) -> float:
    """The η a fit document estimated, clamped; :data:`DEFAULT_ETA` when it has none."""
    value = (fit.get("eta") or {}).get("value")
    return DEFAULT_ETA if value is None else clamp(float(value))
