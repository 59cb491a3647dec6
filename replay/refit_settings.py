"""What ``ttlctl refit`` fits and replays with: the options given, else what the bundle in
service records, else the defaults.

- the fit: the settings recorded in the served bundle's fit (K, ``abandon_s``, bootstrap,
  seed, CDF points); a bundle without a fit (cold start) gives K and ``abandon_s`` from
  its policy (:func:`fit_config`);
- the loads: those given, else one closed population of the log's mean concurrency
  (:func:`default_load`);
- the simulated engine (KV size and the rest), offload tier and truncation: those given,
  else (the engine's size) as the engine log states it (:mod:`replay.refit_sizing`), else
  as the served bundle's last refit or its ``tune`` study recorded them, else the
  simulator's defaults (:func:`replay_settings`);
- the seeds: held-back seeds numbered as ``ttlctl tune`` numbers its own (1000, 1001, …).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import polars as pl

from fitting.fit import FitConfig
from fitting.policy_params import PolicyParams
from replay.client_tags import FULL
from replay.loads import check_seeds, load_list
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.scheduler_config import watermark_problem
from replay.sim import ReplayConfig
from replay.tune.session import default_loads
from replay.workload import Workload
from ttlctl.bundle_doc import Bundle
from ttlctl.errors import ConfigError

#: held-back seeds, as ``ttlctl tune`` numbers them (its trials use 0, 1, …)
HELD_BACK_FROM = 1000


@dataclass(frozen=True, slots=True)
class RefitSettings:
    """How to read the log and how to replay it; None: from the served bundle or defaults."""

    fmt: str = "auto"
    skip_bad: bool = False
    #: keep the ingested trace here (its rejects beside it with ``skip_bad``); None: temporary
    #: (the rejects then go beside the served bundle)
    trace: Path | None = None
    #: program starts for the replays; empty: :func:`default_load`
    loads: tuple[Load, ...] = ()
    seeds: tuple[int, ...] = (HELD_BACK_FROM, HELD_BACK_FROM + 1, HELD_BACK_FROM + 2)
    kv_tokens: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    long_prefill_token_threshold: int | None = None
    long_prefill_token_threshold_adaptive: bool | None = None
    #: vLLM's ``--watermark`` (None: the engine log's, else the bundle's record)
    watermark: float | None = None
    offload_tokens: int | None = None
    truncate: bool | None = None
    #: T (s) assumed for the τ* columns of the report (0: a fresh engine's)
    queue_delay_s: float = 0.0
    #: replace even when the new bundle does not beat the served one
    force: bool = False


def checked_settings(
    *,
    fmt: str = "auto",
    skip_bad: bool = False,
    trace: Path | None = None,
    jps: Sequence[float] = (),
    concurrency: Sequence[int] = (),
    seeds: int = 3,
    kv_tokens: int | None = None,
    block_size: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_model_len: int | None = None,
    long_prefill_token_threshold: int | None = None,
    long_prefill_token_threshold_adaptive: bool | None = None,
    watermark: float | None = None,
    offload_tokens: int | None = None,
    truncate: bool | None = None,
    queue_delay_s: float = 0.0,
    force: bool = False,
) -> RefitSettings:
    """:class:`RefitSettings` from ``ttlctl refit``'s options (``seeds``: how many held-back
    seeds); an option out of range is a :class:`~ttlctl.errors.ConfigError` naming it."""
    check_seeds("--seeds", seeds)
    for flag, value in (
        ("--kv-tokens", kv_tokens),
        ("--block-size", block_size),
        ("--max-num-seqs", max_num_seqs),
        ("--max-num-batched-tokens", max_num_batched_tokens),
        ("--max-model-len", max_model_len),
    ):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive")
    if offload_tokens is not None and offload_tokens < 0:
        raise ConfigError("--offload-tokens must be >= 0")
    if long_prefill_token_threshold is not None and long_prefill_token_threshold < 0:
        raise ConfigError("--long-prefill-token-threshold must be >= 0")
    problem = None if watermark is None else watermark_problem(watermark)
    if problem is not None:
        raise ConfigError(problem)
    if not queue_delay_s >= 0:
        raise ConfigError("--queue-delay-seconds must be >= 0")
    return RefitSettings(
        fmt=fmt,
        skip_bad=skip_bad,
        trace=trace,
        loads=load_list(jps, concurrency),
        seeds=tuple(range(HELD_BACK_FROM, HELD_BACK_FROM + seeds)),
        kv_tokens=kv_tokens,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        long_prefill_token_threshold=long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=long_prefill_token_threshold_adaptive,
        watermark=watermark,
        offload_tokens=offload_tokens,
        truncate=truncate,
        queue_delay_s=queue_delay_s,
        force=force,
    )


def fit_config(doc: Bundle) -> FitConfig:
    """The settings the served bundle's fit was made with; for a bundle without a fit
    (cold start), its policy's K and ``abandon_s`` and the defaults."""
    recorded = doc["fit"].get("config")
    known = {f.name for f in fields(FitConfig)}
    if isinstance(recorded, dict) and recorded:
        given: dict[str, Any] = {k: v for k, v in recorded.items() if k in known}
        return FitConfig(**given)
    params = PolicyParams.from_json(doc["policy"])
    return FitConfig(min_samples=params.k, abandon_s=params.abandon_s)


def replay_settings(doc: Bundle, settings: RefitSettings) -> tuple[ReplayConfig, str]:
    """The simulated engine of the replays, and where its settings came from: the options
    given, else the served bundle's last refit or its tuning study, else the defaults."""
    provenance = doc["provenance"]
    recorded: Mapping[str, Any] = {}
    source = "defaults"
    for where, found in (
        ("the bundle's last refit", (provenance.get("refit") or {}).get("replay")),
        ("the bundle's tuning", (provenance.get("tuning") or {}).get("objective")),
    ):
        if isinstance(found, dict) and isinstance(found.get("engine"), dict):
            recorded, source = found, where
            break
    known = {f.name for f in fields(SimSchedulerConfig)}
    engine = SimSchedulerConfig.from_json(
        {k: v for k, v in recorded.get("engine", {}).items() if k in known}
    )
    given: dict[str, Any] = {
        "kv_tokens": settings.kv_tokens,
        "block_size": settings.block_size,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_model_len": settings.max_model_len,
    }
    sizes = {k: v for k, v in given.items() if v is not None}
    if (
        settings.block_size is None
        and sizes.get("kv_tokens", engine.block_size) < engine.block_size
    ):
        # the block size is the engine log's, read later: the replay's sizing checks the
        # flag against it (:func:`~replay.refit_sizing.size`), not against this record's
        del sizes["kv_tokens"]
    engine = engine.resized(**sizes)
    config = ReplayConfig(
        engine=engine,
        offload_tokens=_given(settings.offload_tokens, recorded.get("offload_tokens"), 0),
        truncate=bool(_given(settings.truncate, recorded.get("truncate"), False)),
        # the clients the bundle was tuned for (refit takes no option: the engine log says
        # nothing of what they tag)
        client_tags=_given(None, recorded.get("client_tags"), FULL),
    )
    return config, source


def _given(value: Any, recorded: Any, default: Any) -> Any:
    return value if value is not None else recorded if recorded is not None else default


def default_load(frame: pl.DataFrame, workload: Workload) -> tuple[list[Load], str]:
    """One closed population: the log's mean concurrency (programs in flight, averaged over
    the log's span, from each program's first arrival to its last finish), rounded, at
    least 1. A trace without every arrival and call time: a quarter of its programs (at
    most 64), the smaller of ``ttlctl tune``'s default loads."""
    n = len(workload.programs)
    timed = frame.select(
        pl.col("arrival_s").is_not_null().all() & pl.col("llm_s").is_not_null().all()
    ).item()
    if timed and frame.height:
        spans = frame.group_by("program_id").agg(
            pl.col("arrival_s").min().alias("start"),
            (pl.col("arrival_s") + pl.col("llm_s")).max().alias("end"),
        )
        start, end = spans["start"].min(), spans["end"].max()
        busy = float((spans["end"] - spans["start"]).sum())
        if isinstance(start, float) and isinstance(end, float) and end > start:
            mean = busy / (end - start)
            level = max(1, min(n, round(mean)))
            return [Load(concurrency=level)], (
                f"the log's mean concurrency, {mean:.2f} programs running at once"
            )
    return [default_loads(n)[0]], "a quarter of the programs (the trace has no call times)"
