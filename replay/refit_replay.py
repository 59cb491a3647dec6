"""``ttlctl refit``'s replays: the log's programs on an engine sized like the server's, or,
for the logs of several replicas, each replica's programs on an engine of its own size.

One replica (or a log that names none): one engine, sized by
:func:`replay.refit_sizing.size`, at the loads given or the log's mean concurrency.

Several replicas (the trace's ``replica`` column names two or more): until a fleet
replay with the routing as logged exists, each program is replayed on the replica
that served most of its calls (the first call's on a tie; a program with no replica
recorded goes to the first replica), on an engine of that replica's size, at that
replica's own mean concurrency (or at each load given, per replica). A replay's mean
JCT is then the mean over all programs: each replica's mean weighted by its
programs. The p95 of the whole is not the weighted p95s, so it is left out (null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from fitting.fit_doc import FitDoc
from profiles.schema import ProfileDoc
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.refit_settings import RefitSettings, default_load
from replay.refit_sizing import Sized, by_replica, replicas, size
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.tune.context import TuneContext, load_json
from replay.tune.judge import replay_held_back
from replay.workload import from_frame


@dataclass(frozen=True, slots=True)
class Part:
    """One engine of the replay and the programs it runs."""

    sized: Sized
    ctx: TuneContext
    load_source: str

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
) -> list[Part]:
    """The replay's engines: one, or one per replica the trace names."""
    given = {
        "kv_tokens": settings.kv_tokens,
        "block_size": settings.block_size,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_model_len": settings.max_model_len,
    }
    facts = replicas(engines)
    names = _replicas_in(frame)
    if len(names) < 2:
        entries = [e for group in facts.values() for e in group]
        sized = size(given, entries, base.engine, base_source, names[0] if names else None)
        return [_part(frame, sized, settings, base, fit, profile)]
    owner = _owners(frame, names)
    parts = []
    for name, sized in zip(
        names, by_replica(names, engines, given, base.engine, base_source), strict=True
    ):
        sub = frame.join(owner.filter(pl.col("_owner") == name), on="program_id", how="semi")
        parts.append(_part(sub, sized, settings, base, fit, profile))
    return parts


def _part(
    frame: pl.DataFrame,
    sized: Sized,
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
            engine=sized.engine, offload_tokens=base.offload_tokens, truncate=base.truncate
        ),
        loads=tuple(loads),
        seeds=settings.seeds,
    )
    return Part(sized, ctx, note)


def _replicas_in(frame: pl.DataFrame) -> list[str]:
    if "replica" not in frame.columns:
        return []
    return sorted(str(x) for x in frame["replica"].drop_nulls().unique().to_list())


def _owners(frame: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """Each program's replica: the one that served most of its calls, the first call's on
    a tie; the first replica for a program with none recorded."""
    calls = (
        frame.filter(pl.col("replica").is_not_null())
        .group_by("program_id", "replica")
        .agg(pl.len().alias("n"), pl.col("turn").min().alias("first"))
        .sort("program_id", "n", "first", descending=[False, True, False])
        .group_by("program_id", maintain_order=True)
        .first()
        .select("program_id", pl.col("replica").alias("_owner"))
    )
    everyone = frame.select("program_id").unique()
    return everyone.join(calls, on="program_id", how="left").with_columns(
        pl.col("_owner").fill_null(names[0])
    )


def replay(
    parts: Sequence[Part], specs: Mapping[str, PolicySpec]
) -> tuple[dict[str, list[float]], dict[str, list[float | None]]]:
    """Each policy on every part's load × seed: each replay's mean JCT over all programs
    (the parts' means weighted by their programs) and its p95 (None with several parts)."""
    if len(parts) == 1:
        return replay_held_back(parts[0].ctx, specs)
    total = sum(p.programs for p in parts)
    by: dict[str, list[float]] = {}
    for part in parts:
        mine, _ = replay_held_back(part.ctx, specs)
        for name, values in mine.items():
            weighted = [v * part.programs / total for v in values]
            by[name] = (
                [a + b for a, b in zip(by[name], weighted, strict=True)]
                if (name in by)
                else weighted
            )
    p95: dict[str, list[float | None]] = {name: [None] * len(v) for name, v in by.items()}
    return by, p95


def engines_doc(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """Each engine of the replay, for the report and the bundle's provenance."""
    return [
        {
            "replica": p.sized.replica,
            "engine": _engine_json(p.sized.engine),
            "sized_from_log": p.sized.from_log,
            "programs": p.programs,
            "calls": p.ctx.workload.calls,
            "loads": [load_json(t) for t in p.ctx.loads],
            "load_source": p.load_source,
            "line": p.sized.line,
            "notes": list(p.sized.notes),
        }
        for p in parts
    ]


def _engine_json(engine: SimSchedulerConfig) -> dict[str, Any]:
    return {k: getattr(engine, k) for k in engine.__dataclass_fields__}


def loads_of(parts: Sequence[Part]) -> list[Load]:
    return list(parts[0].ctx.loads)
