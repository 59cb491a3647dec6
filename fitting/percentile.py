"""The percentile every figure uses: linear interpolation, and None below enough samples.

The p-th percentile of fewer than ``round(100 / (100 − p))`` samples says little (a
p99 needs 100, a p95 20, a median 2), so it is None there instead of a number.
Used by the trace summary, the fit, and the simulated and live replay results.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def min_samples(p: float) -> int:
    """Fewest samples for which the p-th percentile means something (p99 needs 100)."""
    return max(1, round(100 / (100 - p)))


def percentile(values: ArrayLike, p: float) -> float | None:
    """The p-th percentile of ``values`` (numpy's linear rule), or None with too few."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, p)) if arr.size >= min_samples(p) else None
