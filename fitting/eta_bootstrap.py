"""η over a trace's programs, with a 95% percentile bootstrap interval (numpy; offline).

The pooled sums of :mod:`fitting.eta`, vectorised over every program's length, and
resampled by program. ``ttlctl fit`` writes the result as the fit's ``eta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fitting.eta import eta_from_sums
from fitting.fit_doc import EtaDoc


@dataclass(frozen=True, slots=True)
class EtaEstimate:
    value: float | None
    ci_low: float | None
    ci_high: float | None
    programs: int
    pairs: int
    bootstrap: int

    def to_json(self) -> EtaDoc:
        return {
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": 0.95,
            "programs": self.programs,
            "pairs": self.pairs,
            "bootstrap": self.bootstrap,
        }


#: the programs the bootstrap draws in all, at most (its resamples are cut to fit) ...
MAX_DRAWS = 20_000_000
#: ... unless that leaves fewer resamples than this
MIN_RESAMPLES = 200


def estimate(lengths: Any, *, bootstrap: int = 1000, seed: int = 0) -> EtaEstimate:
    """η over programs of the given lengths, with a 95% percentile bootstrap interval.

    Programs are resampled with replacement; the number of resamples shrinks for
    very many programs so that at most :data:`MAX_DRAWS` programs are drawn in all (but
    never below :data:`MIN_RESAMPLES` resamples, nor above ``bootstrap``).
    """
    n_calls = np.asarray(lengths, dtype=np.int64)
    m = np.clip(n_calls - 1, 0, None).astype(np.float64)
    s1 = m * (m + 1) / 2
    s2 = m * (m + 1) * (2 * m + 1) / 6
    sxy = n_calls * s1 - s2
    value = eta_from_sums(m.sum(), s1.sum(), s2.sum(), sxy.sum())
    programs = int(n_calls.size)
    if value is None or programs < 2 or bootstrap <= 0:
        return EtaEstimate(value, None, None, programs, int(m.sum()), 0)
    reps = int(min(bootstrap, max(MIN_RESAMPLES, MAX_DRAWS // programs)))
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
