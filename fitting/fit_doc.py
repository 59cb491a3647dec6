"""The fit document (``ttlctl.fit/1``) as it is written: ``ttlctl fit``'s ``fit.json`` and
the ``fit`` of every bundle.

Types only (standard library ``typing``): :mod:`fitting.fit` writes these documents,
:mod:`fitting.policy` reads their CDFs on the engine side, and the bundle, the tuner,
refit, the report and the CLI read the rest. The keys and their nesting are those of
the JSON file; a field a reader may not find is ``NotRequired``.

A fit made by :func:`fitting.fit.fit_trace` has every key. The fit of a bundle that has
none (a cold-start bundle, :func:`ttlctl.bundle_make.empty_fit`) has only ``schema``,
``tools`` (empty) and ``global`` (None): the keys that fit lacks are ``NotRequired``.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class CdfDoc(TypedDict):
    """A step CDF (:class:`fitting.cdf.CDF`): durations ``x`` (s, strictly increasing),
    ``p`` = fraction of samples ≤ x (strictly increasing to 1), from ``n`` samples."""

    n: int
    x: list[float]
    p: list[float]


class ExponentialDoc(TypedDict):
    """The maximum-likelihood exponential fit of one set of pauses and its KS test."""

    rate: float
    mean_s: float
    ks: float
    ks_pvalue: float


class EtaDoc(TypedDict):
    """η over the trace's programs with its 95% bootstrap interval (None: undefined)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    programs: int
    pairs: int
    bootstrap: int


class ToolFit(TypedDict):
    """One tool's pauses (or all tools'): statistics, the compressed CDF, the Exp fit.
    The statistics are None where there are too few samples."""

    n: int
    #: pauses the log timed (``tool_s``), the rest are gaps
    measured: int
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    max_s: float | None
    #: more than K samples: the policy may use this CDF
    trusted: bool
    cdf: CdfDoc
    #: Kolmogorov distance between the full CDF and ``cdf``
    cdf_ks_from_full: float
    exponential: ExponentialDoc | None


class FitConfigDoc(TypedDict):
    """The settings the fit was made with (:class:`fitting.fit.FitConfig`)."""

    min_samples: int
    abandon_s: float
    bootstrap: int
    seed: int
    max_points: int
    compression_ks_bound: float


class FitSource(TypedDict):
    """The trace a fit was made from, as the caller names it (path and SHA-256)."""

    path: str
    sha256: str


class FitInput(TypedDict):
    """What the fit read: the trace (None when the caller named none) and its counts."""

    path: str | None
    sha256: str | None
    programs: int
    calls: int
    pauses: int
    abandoned_pauses: int


#: the fit document; functional syntax because ``global`` is a Python keyword
FitDoc = TypedDict(
    "FitDoc",
    {
        "schema": str,
        "created": NotRequired[str | None],
        "ttlctl_version": NotRequired[str | None],
        "config": NotRequired[FitConfigDoc],
        "input": NotRequired[FitInput],
        #: K (= ``config.min_samples``)
        "k": NotRequired[int],
        "eta": NotRequired[EtaDoc],
        #: all tools together; None in a bundle without a fit
        "global": ToolFit | None,
        "tools": dict[str, ToolFit],
    },
)
