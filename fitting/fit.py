"""``ttlctl fit``: a canonical trace → per-tool pause distributions, the global one, and η.

The pause that follows a call is its ``tool_s`` when the log measured the tool,
else its ``gap_s`` (what an engine sees: next arrival − this finish). Only calls
followed by a tool count (``tool`` not null); pauses longer than ``abandon_s``
are abandoned programs, not durations, and are counted apart. Each tool's
samples give an empirical CDF (compressed to ≤ 1,024 points, see
:mod:`fitting.cdf`) and a maximum-likelihood exponential fit; η comes from the
programs' lengths (:mod:`fitting.eta_bootstrap`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from fitting import FIT_SCHEMA
from fitting import cdf as cdf_mod
from fitting.eta_bootstrap import estimate as estimate_eta
from fitting.fit_doc import FitDoc, FitSource, ToolFit
from fitting.percentile import percentile
from ttlctl.errors import ConfigError, TtlctlError
from ttlctl.nouns import counted


@dataclass(frozen=True, slots=True)
class FitConfig:
    min_samples: int = 100
    abandon_s: float = 3600.0
    bootstrap: int = 1000
    seed: int = 0
    max_points: int = cdf_mod.MAX_POINTS

    def __post_init__(self) -> None:
        if self.min_samples < 0:
            raise ConfigError(f"--min-samples must be >= 0, not {self.min_samples}")
        if self.abandon_s <= 0:
            raise ConfigError(f"--abandon-seconds must be > 0, not {self.abandon_s:g}")
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be >= 0, not {self.bootstrap}")
        if self.seed < 0:  # numpy's SeedSequence takes no negative seed
            raise ConfigError(f"--seed must be >= 0, not {self.seed}")
        if self.max_points < 2:
            raise ConfigError("max_points >= 2")


def pauses(trace: pl.LazyFrame) -> pl.DataFrame:
    """One row per call followed by a named tool: ``tool``, ``pause_s``, ``measured``; in
    the order of those columns, not the trace's rows (a fit's sums, and so its checksum, do
    not depend on how the trace's rows were ordered)."""
    return (
        trace.filter(pl.col("tool").is_not_null())
        .select(
            "tool",
            pl.coalesce("tool_s", "gap_s").alias("pause_s"),
            pl.col("tool_s").is_not_null().alias("measured"),
        )
        .filter(pl.col("pause_s").is_not_null())
        .sort("tool", "pause_s", "measured")
        .collect()
    )


def describe(samples: np.ndarray[Any, Any], config: FitConfig, measured: int) -> ToolFit:
    """Statistics, the compressed CDF and the exponential fit of one set of pauses."""
    full = cdf_mod.empirical(samples)
    small = cdf_mod.compress(full, config.max_points)
    exp = cdf_mod.exponential_fit(samples)
    return {
        "n": int(samples.size),
        "measured": int(measured),
        "mean_s": float(samples.mean()) if samples.size else None,
        "p50_s": percentile(samples, 50),
        "p90_s": percentile(samples, 90),
        "p99_s": percentile(samples, 99),
        "max_s": float(samples.max()) if samples.size else None,
        "trusted": bool(samples.size > config.min_samples),
        "cdf": small.to_json(),
        "cdf_ks_from_full": cdf_mod.ks_distance(full, small),
        "exponential": exp.to_json() if exp else None,
    }


class EmptyFitError(TtlctlError):
    """A trace with no pause to fit (no calls, or none followed by its program's next)."""


def fit_trace(
    trace: pl.LazyFrame | pl.DataFrame,
    config: FitConfig | None = None,
    *,
    source: FitSource | None = None,
    created: str | None = None,
    ttlctl_version: str | None = None,
    allow_empty: bool = False,
) -> FitDoc:
    """The fit document of a canonical trace (``ttlctl fit``; docs/method.md).

    ``source`` (the trace file's ``path`` and ``sha256``), ``created`` and
    ``ttlctl_version`` are written as given: this module reads no file and no clock.
    A trace without a single pause is an :class:`EmptyFitError` unless ``allow_empty``
    (its fit would leave every τ* to the cold start).
    """
    config = config or FitConfig()
    trace = trace.lazy()
    data = pauses(trace)
    if data.height == 0 and not allow_empty:
        calls = trace.select(pl.len()).collect().item()
        where = source["path"] if source is not None else "the trace"
        raise EmptyFitError(
            f"{where}: no tool pause to fit ({counted(calls, 'call')}, none with a tool and a "
            "recorded tool_s or gap_s); --allow-empty writes a fit of nothing"
        )
    abandoned = data.filter(pl.col("pause_s") > config.abandon_s)
    kept = data.filter(pl.col("pause_s") <= config.abandon_s)

    tools: dict[str, ToolFit] = {}
    for (name,), group in sorted(kept.group_by("tool"), key=lambda kv: str(kv[0][0])):
        values = group["pause_s"].to_numpy().astype(np.float64)
        tools[str(name)] = describe(values, config, int(group["measured"].sum()))
    everything = kept["pause_s"].to_numpy().astype(np.float64)
    # in program order: the bootstrap resamples by index, so the same seed must see the same list
    lengths = trace.group_by("program_id").len().sort("program_id").collect()["len"].to_numpy()
    eta = estimate_eta(lengths, bootstrap=config.bootstrap, seed=config.seed)
    calls = trace.select(pl.len()).collect().item()
    return {
        "schema": FIT_SCHEMA,
        "created": created,
        "ttlctl_version": ttlctl_version,
        "config": {
            "min_samples": config.min_samples,
            "abandon_s": config.abandon_s,
            "bootstrap": config.bootstrap,
            "seed": config.seed,
            "max_points": config.max_points,
            "compression_ks_bound": cdf_mod.compression_bound(config.max_points),
        },
        "input": {
            "path": None if source is None else source["path"],
            "sha256": None if source is None else source["sha256"],
            "programs": int(lengths.size),
            "calls": int(calls),
            "pauses": int(data.height),
            "abandoned_pauses": int(abandoned.height),
        },
        "k": config.min_samples,
        "eta": eta.to_json(),
        "global": describe(everything, config, int(kept["measured"].sum())),
        "tools": tools,
    }
