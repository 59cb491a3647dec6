"""Fits used by profiling: prefill time as a quadratic in context, decode step as linear,
and the grid of contexts a profiler measures by default.

Both fits are non-negative least squares on relative error (each point weighted by
1/its time), so short contexts count as much as long ones and no coefficient
goes negative (a negative term would predict negative times somewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from ttlctl.errors import TtlctlError


class FitMathError(TtlctlError, ValueError):
    """Too few timings, or timings a fit cannot use: one line."""


@dataclass(frozen=True, slots=True)
class QuadraticFit:
    a: float
    b: float
    q: float
    rmse_s: float
    max_rel_error: float

    def __call__(self, tokens: float) -> float:
        return self.a + self.b * tokens + self.q * tokens * tokens


def fit_quadratic(tokens: Sequence[float], seconds: Sequence[float]) -> QuadraticFit:
    """``seconds ≈ a + b·tokens + q·tokens²`` with a, b, q ≥ 0."""
    c = np.asarray(tokens, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if c.size < 3 or c.size != y.size:
        raise FitMathError("a quadratic needs at least 3 (tokens, seconds) points")
    if np.any(y <= 0) or not np.all(np.isfinite(y)):
        raise FitMathError("timings must be positive and finite")
    scale = np.array([1.0, c.max(), c.max() ** 2])  # condition the columns
    design = np.stack([np.ones_like(c), c, c * c], axis=1) / scale
    weights = 1.0 / y
    coef, _ = nnls(design * weights[:, None], y * weights)
    a, b, q = coef / scale
    pred = a + b * c + q * c * c
    return QuadraticFit(
        float(a),
        float(b),
        float(q),
        float(np.sqrt(np.mean((pred - y) ** 2))),
        float(np.max(np.abs(pred - y) / y)),
    )


@dataclass(frozen=True, slots=True)
class DecodeFit:
    step_s: float
    per_seq_s: float
    per_kv_token_s: float
    max_rel_error: float


def fit_decode(
    seqs: Sequence[float], kv_tokens: Sequence[float], seconds: Sequence[float]
) -> DecodeFit:
    """``seconds ≈ step + per_seq·seqs + per_kv_token·kv_tokens``, all ≥ 0."""
    s = np.asarray(seqs, dtype=np.float64)
    k = np.asarray(kv_tokens, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if y.size < 3:
        raise FitMathError("the decode model needs at least 3 timings")
    scale = np.array([1.0, max(s.max(), 1.0), max(k.max(), 1.0)])
    design = np.stack([np.ones_like(s), s, k], axis=1) / scale
    weights = 1.0 / y
    coef, _ = nnls(design * weights[:, None], y * weights)
    c0, c1, c2 = coef / scale
    pred = c0 + c1 * s + c2 * k
    return DecodeFit(float(c0), float(c1), float(c2), float(np.max(np.abs(pred - y) / y)))


def fit_prefill_steps(
    contexts: Sequence[float],
    chunks: Sequence[float],
    seconds: Sequence[float],
    fixed_s: float = 0.0,
) -> QuadraticFit:
    """Engine steps of a chunked prefill: ``seconds ≈ fixed + a + b·chunk + q·Δ``, a, b, q ≥ 0.

    A step prefills ``chunk`` tokens on top of ``context`` already in KV; ``Δ =
    (context + chunk)² − context²`` is the quadratic's increment that
    ``profiles/cost.py`` charges for it, and ``fixed_s`` what it adds to every
    prefill-only step besides ``a`` (the decode model's ``step_s``). With every
    context 0 this is :func:`fit_quadratic` of ``seconds − fixed_s``. The errors
    are those of the predicted step times against ``seconds``.
    """
    ctx = np.asarray(contexts, dtype=np.float64)
    n = np.asarray(chunks, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if y.size < 3 or not (ctx.size == n.size == y.size):
        raise FitMathError("the prefill steps fit needs at least 3 (context, chunk, seconds) steps")
    if np.any(y <= 0) or not np.all(np.isfinite(y)) or np.any(n <= 0) or np.any(ctx < 0):
        raise FitMathError("steps need positive chunks, non-negative contexts and positive times")
    delta = (ctx + n) ** 2 - ctx**2
    scale = np.array([1.0, n.max(), delta.max()])
    design = np.stack([np.ones_like(n), n, delta], axis=1) / scale
    weights = 1.0 / y
    coef, _ = nnls(design * weights[:, None], (y - fixed_s) * weights)
    a, b, q = coef / scale
    pred = fixed_s + a + b * n + q * delta
    return QuadraticFit(
        float(a),
        float(b),
        float(q),
        float(np.sqrt(np.mean((pred - y) ** 2))),
        float(np.max(np.abs(pred - y) / y)),
    )


@dataclass(frozen=True, slots=True)
class CachedFit:
    """A prefill on a cached prefix beyond the fresh-prompt fit's price of its new tokens
    alone: ``per_cached_token_s·cached + per_context_pair_s·cached·new``."""

    per_cached_token_s: float
    per_context_pair_s: float
    max_rel_error: float


def fit_cached_prefill(
    cached: Sequence[float], new: Sequence[float], seconds: Sequence[float], fresh: QuadraticFit
) -> CachedFit:
    """``seconds − fresh(new) ≈ h·cached + r·cached·new`` with h, r ≥ 0 (non-negative least
    squares on relative error, as the other fits): ``fresh(new) = a + b·new + q·new²`` is
    the chunk's own price, ``h`` what each cached token costs however many new tokens
    follow it, ``r`` each new token's attention over each cached one. Both need prefixes
    timed with at least two numbers of new tokens to be told apart."""
    c = np.asarray(cached, dtype=np.float64)
    n = np.asarray(new, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if y.size < 2 or not (c.size == n.size == y.size):
        raise FitMathError("the cached-prefix fit needs at least 2 (cached, new, seconds) points")
    if np.any(y <= 0) or not np.all(np.isfinite(y)) or np.any(c <= 0) or np.any(n <= 0):
        raise FitMathError("cached-prefix points need cached and new tokens and positive times")
    own = fresh.a + fresh.b * n + fresh.q * n * n
    pair = c * n
    scale = np.array([c.max(), pair.max()])
    design = np.stack([c, pair], axis=1) / scale
    weights = 1.0 / y
    coef, _ = nnls(design * weights[:, None], (y - own) * weights)
    h, r = coef / scale
    pred = own + h * c + r * pair
    return CachedFit(float(h), float(r), float(np.max(np.abs(pred - y) / y)))
