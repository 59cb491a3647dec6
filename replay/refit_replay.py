"""``ttlctl refit``'s replay: the log's programs on an engine sized like the server's, or,
for the logs of several replicas, on the fleet they came from.

One replica (or a log that names none): one engine, sized by
:func:`replay.refit_sizing.size`, at the loads given or the log's mean concurrency.

Several replicas (the trace's ``replica`` column names two or more): a fleet replay
(:mod:`replay.fleet`) with one replica per name (in sorted order), each an engine of its
own size (:func:`replay.refit_sizing.by_replica`, from its own engine facts), every call
routed where the log says it ran (``as-logged``; a call the log does not place goes where
its program's previous call went), at the loads given or the whole log's mean concurrency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from fitting.fit_doc import FitDoc
from profiles.schema import ProfileDoc
from replay.fleet.routers import AS_LOGGED, RouterSettings, replica_order
from replay.fleet.run import FleetSpec, replicas_of
from replay.policies import PolicySpec
from replay.progress import RunsDone
from replay.refit_settings import RefitSettings, default_load
from replay.refit_sizing import Sized, by_replica, replicas, size
from replay.sim import ReplayConfig
from replay.tune.context import TuneContext, load_json
from replay.tune.judge import HeldReplays, replay_held_back
from replay.workload import from_frame
from ttlctl.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Part:
    """The replay: its engines (one, or one per replica of the fleet) and its context."""

    engines: tuple[Sized, ...]
    ctx: TuneContext
    load_source: str
    #: per engine: (programs whose first call it served, calls it served) in the log
    served: tuple[tuple[int, int], ...]

    @property
    def programs(self) -> int:
        return len(self.ctx.workload.programs)


def plan(
    frame: pl.DataFrame,
    engines: Sequence[Mapping[str, Any]],
    settings: RefitSettings,
    base: ReplayConfig,
    base_source: str,
    fit: FitDoc,
    profile: ProfileDoc,
) -> Part:
    """The replay's engines: one, or the fleet of the replicas the trace names."""
    given = {
        "kv_tokens": settings.kv_tokens,
        "block_size": settings.block_size,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_model_len": settings.max_model_len,
        "long_prefill_token_threshold": settings.long_prefill_token_threshold,
        "long_prefill_token_threshold_adaptive": settings.long_prefill_token_threshold_adaptive,
        "watermark": settings.watermark,
    }
    facts = replicas(engines)
    names = _replicas_in(frame)
    if len(names) < 2:
        entries = [e for group in facts.values() for e in group]
        sized = size(given, entries, base.engine, base_source, names[0] if names else None)
        return _part(frame, (sized,), None, settings, base, fit, profile)
    fleet = by_replica(names, engines, given, base.engine, base_source)
    sizes = {s.engine.block_size for s in fleet}
    if len(sizes) > 1:
        stated = ", ".join(
            f"{s.replica} {s.engine.block_size}"
            + ("" if s.block_source.startswith("the log's") else f" ({s.block_source})")
            for s in fleet
        )
        raise ConfigError(
            f"the replicas' engines have different block sizes ({stated}): "
            "give --block-size to replay them as one fleet"
        )
    spec = FleetSpec(
        len(names),
        RouterSettings(AS_LOGGED),
        replicas_of(frame),
        tuple(s.engine for s in fleet),
    )
    return _part(frame, tuple(fleet), spec, settings, base, fit, profile)


def _part(
    frame: pl.DataFrame,
    engines: tuple[Sized, ...],
    fleet: FleetSpec | None,
    settings: RefitSettings,
    base: ReplayConfig,
    fit: FitDoc,
    profile: ProfileDoc,
) -> Part:
    workload = from_frame(frame)
    loads, note = (
        (list(settings.loads), "as given") if settings.loads else default_load(frame, workload)
    )
    ctx = TuneContext(
        workload=workload,
        fit=fit,
        profile=profile,
        config=ReplayConfig(
            engine=engines[0].engine, offload_tokens=base.offload_tokens, truncate=base.truncate
        ),
        loads=tuple(loads),
        seeds=settings.seeds,
        fleet=fleet,
    )
    served = (
        ((len(workload.programs), workload.calls),)
        if fleet is None
        else _served(frame, [s.replica for s in engines])
    )
    return Part(engines, ctx, note, served)


def _served(frame: pl.DataFrame, names: Sequence[str | None]) -> tuple[tuple[int, int], ...]:
    """Per replica: the programs whose first call it served, and the calls it served."""
    calls = frame.filter(pl.col("replica").is_not_null())
    first = calls.sort("program_id", "turn").group_by("program_id", maintain_order=True).first()
    return tuple(
        (
            first.filter(pl.col("replica") == name).height,
            calls.filter(pl.col("replica") == name).height,
        )
        for name in names
    )


def _replicas_in(frame: pl.DataFrame) -> list[str]:
    if "replica" not in frame.columns:
        return []
    # in the as-logged router's replica order: engine i is the router's replica i
    return replica_order(str(x) for x in frame["replica"].drop_nulls().unique().to_list())


def replay(
    part: Part, specs: Mapping[str, PolicySpec], done: RunsDone | None = None
) -> HeldReplays:
    """Each policy on every load × seed: each replay's mean JCT and its p95, and the calls
    the replays rejected; ``done`` is told the replays done of all of them."""
    return replay_held_back(part.ctx, specs, done=done)


def engines_doc(part: Part) -> list[dict[str, Any]]:
    """Each engine of the replay, for the report and the bundle's provenance."""
    return [
        {
            "replica": sized.replica,
            "engine": sized.engine.to_json(),
            "sized_from_log": sized.from_log,
            "programs": programs,
            "calls": calls,
            "loads": [load_json(t) for t in part.ctx.loads],
            "load_source": part.load_source,
            "line": sized.line,
            "notes": list(sized.notes),
        }
        for sized, (programs, calls) in zip(part.engines, part.served, strict=True)
    ]
