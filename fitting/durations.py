"""What the policy knows of one tool's durations (or of all tools'): the fit's step CDF
as a prior (:class:`Prior`), the recent observations, and the CDF's hull, rebuilt when
the CDF becomes trusted and then whenever it misses ``min(refresh_every, the records it
was built from)`` samples, built lazily when a decision first reads it
(:class:`Durations`; the schedule is :mod:`fitting.policy`'s docstring).

Standard library only: the engine process imports it.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import truediv

from fitting import hull as hull_mod
from fitting.fit_doc import CdfDoc, FitDoc


@dataclass(frozen=True, slots=True)
class Prior:
    """A step CDF from the fit: points (x, p) standing for ``n`` samples."""

    x: tuple[float, ...]
    p: tuple[float, ...]
    n: int

    @staticmethod
    def from_json(data: CdfDoc) -> Prior:
        return Prior(tuple(map(float, data["x"])), tuple(map(float, data["p"])), int(data["n"]))


@dataclass(slots=True)
class Durations:
    """One tool's (or all tools') prior plus recent observations, and its cached hull."""

    prior: Prior | None
    prior_weight: float
    recent: deque[float]
    _hull: hull_mod.Hull = hull_mod.EMPTY
    observed: int = 0
    #: the records the hull was built from (0: never built)
    built: int = 0
    prior_points: list[tuple[float, float]] | None = None
    #: the recent samples the hull is due to be built from (None: built)
    _due: tuple[float, ...] | None = None
    #: the prior's records plus those observed: kept with ``observed`` (set once from the
    #: prior, then counted by :meth:`add`), a plain attribute since every decision reads it
    records: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.records = (self.prior.n if self.prior else 0) + self.observed

    @property
    def hull(self) -> hull_mod.Hull:
        """The hull of the last rebuild (built now from its samples if not yet)."""
        if self._due is not None:
            self._hull = self._build(self._due)
            self._due = None
        return self._hull

    def add(self, seconds: float, k: int, refresh_every: int) -> None:
        """Record one sample; rebuild the hull when the CDF becomes trusted or has
        missed ``min(refresh_every, built)`` samples since its last build."""
        self.recent.append(seconds)
        self.observed += 1
        self.records = records = self.records + 1
        if records > k and records - self.built >= min(refresh_every, self.built):
            self.rebuild()

    def rebuild(self) -> None:
        """Rebuild the hull from the prior and the recent samples held now (built when
        :attr:`hull` is first read)."""
        self._due = tuple(self.recent)
        self.built = self.records

    def _build(self, recent: tuple[float, ...]) -> hull_mod.Hull:
        """Merge the prior (as weighted points) with ``recent``; the hull of the result."""
        if self.prior_points is None:
            self.prior_points = self._prior_points()
        if not self.prior_points:
            # samples of weight 1 each: the sums below are the integers, exactly
            if not recent:
                return hull_mod.EMPTY
            if len(set(recent)) == len(recent):  # distinct
                return hull_mod.build_equal_weights(sorted(recent))
            counts = Counter(recent)
            values = sorted(counts)
            cum = list(accumulate(map(counts.__getitem__, values)))
            return hull_mod.build(values, list(map(truediv, cum, repeat(float(cum[-1])))))
        samples = sorted(recent)
        merged = heapq.merge(self.prior_points, ((x, 1.0) for x in samples))
        xs: list[float] = []
        ws: list[float] = []
        for x, w in merged:
            if xs and xs[-1] == x:
                ws[-1] += w
            else:
                xs.append(x)
                ws.append(w)
        total = sum(ws)
        if total <= 0:
            return hull_mod.EMPTY
        acc = 0.0
        ps: list[float] = []
        for w in ws:
            acc += w
            ps.append(acc / total)
        ps[-1] = 1.0
        return hull_mod.build(xs, ps)

    def _prior_points(self) -> list[tuple[float, float]]:
        if self.prior is None or self.prior.n <= 0 or self.prior_weight <= 0:
            return []
        points: list[tuple[float, float]] = []
        last = 0.0
        for x, p in zip(self.prior.x, self.prior.p, strict=True):
            points.append((x, (p - last) * self.prior_weight))
            last = p
        return points


def priors_from_fit(fit: FitDoc) -> tuple[dict[str, Prior], Prior | None]:
    """The per-tool and global priors stored in a fit document."""
    tools = {name: Prior.from_json(t["cdf"]) for name, t in fit.get("tools", {}).items()}
    g = fit.get("global")
    return tools, (Prior.from_json(g["cdf"]) if g else None)
