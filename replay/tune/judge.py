"""Held-back judgement: the tuned policy, the paper's defaults, the never-pin policy (and,
in the simulator, stock vLLM) replayed on seeds or programs no trial saw, and their figures
(each policy's mean JCT, paired against the others). The guard that decides from them which
policy is shipped is :mod:`replay.tune.guard`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from fitting.policy_params import PolicyParams
from replay.fleet.routers import AS_LOGGED, RouterSettings
from replay.fleet.run import FleetSpec
from replay.policies import PolicySpec
from replay.progress import RunsDone, each_told
from replay.tune.context import (
    LIVE_BASELINE_NOTE,
    TuneContext,
    continuum,
    jct_mean,
    load_json,
    replay_once,
)
from replay.tune.live_trial import live_brief, live_replay


def stock_fleet(ctx: TuneContext) -> FleetSpec | None:
    """The stock stack of a fleet study: its replicas behind vllm-router's default
    (``cache-aware`` with its default settings), or, in a study on the logged placement
    (``as-logged``), that placement: the routing stock vLLM had. None: one engine."""
    if ctx.fleet is None:
        return None
    if ctx.fleet.router.name == AS_LOGGED:
        return ctx.fleet
    return replace(ctx.fleet, router=RouterSettings())


def held_back(
    ctx: TuneContext,
    policies: Mapping[str, PolicyParams],
    fleets: Mapping[str, FleetSpec | None] | None = None,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Each policy (and stock vLLM) on ``ctx``'s seeds: flat figures (``<name>_jct_mean_s``,
    ``gain_vs_default`` …, as a report shows them) and each replay's mean JCT by policy.
    On a fleet, each policy behind its router in ``fleets`` (default: the study's) and
    stock vLLM as :func:`stock_fleet` places it (``cache-aware``, or the logged placement)."""
    specs = {name: continuum(ctx, p) for name, p in policies.items()} | {"vllm": PolicySpec("vllm")}
    routed = {**(fleets or {}), "vllm": stock_fleet(ctx)}
    replays = replay_held_back(ctx, specs, routed)
    by = replays.by
    out = held_figures(ctx, by, replays.p95, ("default", "vllm"), "vllm") | replays.refused()
    if ctx.fleet is not None:
        out["routers"] = {name: (routed.get(name) or ctx.fleet).describe() for name in specs}
    return out, by


class HeldReplays(NamedTuple):
    """What the held-back replays of several policies give (:func:`replay_held_back`)."""

    #: each replay's mean JCT, and its p95, by policy name
    by: dict[str, list[float]]
    p95: dict[str, list[float | None]]
    #: the most calls one replay rejected (longer than the model or its engine's KV cache:
    #: the same for every policy on one engine), and the most programs it cut short so
    rejected_calls: int = 0
    programs_cut_short: int = 0

    def refused(self) -> dict[str, int]:
        """The held-back figures' ``rejected_calls`` and ``programs_cut_short``."""
        return {
            "rejected_calls": self.rejected_calls,
            "programs_cut_short": self.programs_cut_short,
        }


def replay_held_back(
    ctx: TuneContext,
    specs: Mapping[str, PolicySpec],
    fleets: Mapping[str, FleetSpec | None] | None = None,
    done: RunsDone | None = None,
) -> HeldReplays:
    """Each policy on every load × seed of ``ctx`` in the simulator (on a fleet: behind
    its router in ``fleets``, default the study's): each replay's mean JCT and its p95,
    by policy name, and the calls the replays rejected. ``done`` is told the replays done
    of all of them."""
    by: dict[str, list[float]] = {name: [] for name in specs}
    p95: dict[str, list[float | None]] = {name: [] for name in specs}
    rejected = cut = 0
    runs = [(timing, name, spec) for timing in ctx.replays() for name, spec in specs.items()]
    for timing, name, spec in each_told(runs, done):
        r = replay_once(ctx, spec, timing, (fleets or {}).get(name))
        by[name].append(jct_mean(r))
        p95[name].append(r["jct_p95_s"])
        rejected = max(rejected, r["rejected_calls"])
        cut = max(cut, r["programs_cut_short"])
    return HeldReplays(by, p95, rejected, cut)


def held_back_live(
    ctx: TuneContext, policies: Mapping[str, PolicyParams]
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """:func:`held_back` against the server, on ``ctx.live``'s (held-back) programs: each
    policy's bundle swapped in, then one live run per load × seed. No stock vLLM: the
    server runs the TTL scheduler; ``never-pin`` is the baseline."""
    by: dict[str, list[float]] = {name: [] for name in policies}
    p95: dict[str, list[float | None]] = {name: [] for name in policies}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in policies}
    for timing in ctx.replays():
        for name, params in policies.items():
            r = live_replay(ctx, params, timing, f"held-back {name}")
            by[name].append(float(r["jct_mean_s"]))
            p95[name].append(r["jct_p95_s"])
            runs[name].append(live_brief(r))
    out = held_figures(ctx, by, p95, ("default", "never-pin"), "never-pin")
    out["note"] = LIVE_BASELINE_NOTE
    out["live_runs"] = runs
    return out, by


def held_figures(
    ctx: TuneContext,
    by: Mapping[str, Sequence[float]],
    p95: Mapping[str, Sequence[float | None]],
    compare: Sequence[str],
    baseline: str,
    candidate: str = "tuned",
) -> dict[str, Any]:
    """Flat figures of the held-back replays: ``<name>_jct_mean_s`` and ``_p95_s`` for each
    policy, and ``gain_vs_<other>`` (with the paired difference and its noise) of
    ``candidate`` against each policy in ``compare``."""
    out: dict[str, Any] = {
        "seeds": list(ctx.seeds),
        "loads": [load_json(t) for t in ctx.loads],
        "replays": len(ctx.replays()),
        "baseline": baseline,
    }
    if ctx.live is not None:
        out["programs"] = [p.program_id for p in ctx.replayed().programs]
    for name, values in by.items():
        key = name.replace("-", "_")
        out[f"{key}_jct_mean_s"] = float(np.mean(values))
        known = [p for p in p95[name] if p is not None]
        out[f"{key}_jct_p95_s"] = float(np.mean(known)) if len(known) == len(p95[name]) else None
    for name in compare:
        other = name.replace("-", "_")
        if candidate in by and name in by:
            p = paired(by[candidate], by[name])
            out[f"gain_vs_{other}"] = p["gain"]
            out[f"diff_vs_{other}_s"] = p["diff_s"]  # tuned − other, per replay
            out[f"diff_sem_vs_{other}_s"] = p["diff_sem_s"]
            out[f"within_noise_vs_{other}"] = p["within_noise"]
    return out


def paired(tuned: Sequence[float], other: Sequence[float]) -> dict[str, Any]:
    """``gain`` = other / tuned mean JCT (>1: tuned is faster); the paired difference
    tuned − other with its standard error (the noise across replays)."""
    diff = np.asarray(tuned) - np.asarray(other)
    sem = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else None
    return {
        "gain": float(np.mean(other) / np.mean(tuned)),
        "diff_s": float(diff.mean()),
        "diff_sem_s": sem,
        "within_noise": None if sem is None else bool(abs(diff.mean()) <= 2 * sem),
    }
