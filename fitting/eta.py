"""η = −Corr(k, N − k): how much serving old programs first approximates shortest-remaining-first.

Over finished programs, each decision point of a program of N calls is a pair
(k, N − k) for k = 1 … N − 1 (calls served so far, calls left); η is minus the
correlation of the pooled pairs. Fixed-length programs give η = 1, geometric
(memoryless) lengths η ≈ 0, heavy tails η < 0. Programs of one call have no
decision point; when every pair is the same (all programs of length 2) the
correlation is undefined and η is None.

The per-program sums have closed forms, so an estimate needs only five running
sums: :class:`EtaSums` (the engine updates it online). This module is standard
library only (the engine imports it); the vectorised offline estimate with a
bootstrap interval is :func:`fitting.eta_bootstrap.estimate` (numpy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fitting.fit_doc import FitDoc

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
    """Running sums over finished programs (one program at a time, as each ends)."""

    n: float = 0.0
    s1: float = 0.0
    s2: float = 0.0
    sxy: float = 0.0
    programs: int = 0

    def add(self, n_calls: int) -> None:
        m, s1, s2, sxy = _program_sums(n_calls)
        self.n += m
        self.s1 += s1
        self.s2 += s2
        self.sxy += sxy
        self.programs += 1

    def eta(self) -> float | None:
        return eta_from_sums(self.n, self.s1, self.s2, self.sxy)


#: how far past ±1 an estimate may lie from rounding alone (a correlation computed from sums)
ROUNDING = 1e-9


def in_range(value: float) -> bool:
    """Whether ``value`` is an η an estimate can be: a correlation, in [−1, 1] give or take
    :data:`ROUNDING` (what a fit document's ``eta.value`` is checked against)."""
    return math.isfinite(value) and abs(value) <= 1.0 + ROUNDING


def clamp(value: float) -> float:
    """η is a correlation: keep it in [−1, 1] against rounding (not finite: the default)."""
    return max(-1.0, min(1.0, value)) if math.isfinite(value) else DEFAULT_ETA


def fitted(fit: FitDoc) -> float | None:
    """The η a fit document estimated, as written; None when it has none."""
    eta = fit.get("eta")
    return eta.get("value") if eta else None


def from_fit(fit: FitDoc) -> float:
    """The η a fit document estimated, clamped against rounding (a document read through
    :func:`ttlctl.bundle_check.check_fit` has none further out); :data:`DEFAULT_ETA` when
    it has none."""
    value = fitted(fit)
    return DEFAULT_ETA if value is None else clamp(float(value))
