"""Held-back judgement: the tuned policy, the paper's defaults, the never-pin policy (and,
in the simulator, stock vLLM) replayed on seeds or programs no trial saw, and the guard
that decides which policy is shipped. ``ttlctl refit`` is judged here too: the refitted
bundle against the bundle in service (``guard(..., baseline="old")``), by the same rule."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

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
    by, p95 = replay_held_back(ctx, specs, routed)
    out = held_figures(ctx, by, p95, ("default", "vllm"), "vllm")
    if ctx.fleet is not None:
        out["routers"] = {name: (routed.get(name) or ctx.fleet).describe() for name in specs}
    return out, by


def replay_held_back(
    ctx: TuneContext,
    specs: Mapping[str, PolicySpec],
    fleets: Mapping[str, FleetSpec | None] | None = None,
    done: RunsDone | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float | None]]]:
    """Each policy on every load × seed of ``ctx`` in the simulator (on a fleet: behind
    its router in ``fleets``, default the study's): each replay's mean JCT and its p95,
    by policy name. ``done`` is told the replays done of all of them."""
    by: dict[str, list[float]] = {name: [] for name in specs}
    p95: dict[str, list[float | None]] = {name: [] for name in specs}
    runs = [(timing, name, spec) for timing in ctx.replays() for name, spec in specs.items()]
    for timing, name, spec in each_told(runs, done):
        r = replay_once(ctx, spec, timing, (fleets or {}).get(name))
        by[name].append(jct_mean(r))
        p95[name].append(r["jct_p95_s"])
    return by, p95


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


#: simulated times are sums whose order depends on how the decode steps were merged: two
#: replays that schedule alike agree to this relative precision, not bit for bit
TIE_REL = 1e-9


def beats(held: Mapping[str, Any], candidate: str, baseline: str, min_gain: float = 1.0) -> bool:
    """The guard's one rule: ``candidate`` beats ``baseline`` when its mean JCT over the
    held-back replays is lower (a tie does not, nor a difference within ``TIE_REL``: the
    same schedule priced in another order) and the gain (baseline / candidate mean JCT)
    is at least ``min_gain`` (``ttlctl tune --min-gain``; 1: any win)."""
    mine = held[f"{candidate.replace('-', '_')}_jct_mean_s"]
    theirs = held[f"{baseline.replace('-', '_')}_jct_mean_s"]
    wins = mine < theirs and not math.isclose(mine, theirs, rel_tol=TIE_REL)
    return bool(wins and theirs >= min_gain * mine)


def short_of(
    held: Mapping[str, Any], candidate: str, baseline: str, min_gain: float
) -> tuple[str, str]:
    """Why a win does not count, as two fragments of the guard's message: ("", "") when
    ``candidate`` does not beat ``baseline`` at all or beats it by ``min_gain``, else
    (" by the --min-gain of X", ", a gain of Yx")."""
    if beats(held, candidate, baseline, min_gain) or not beats(held, candidate, baseline):
        return "", ""
    mine = held[f"{candidate.replace('-', '_')}_jct_mean_s"]
    theirs = held[f"{baseline.replace('-', '_')}_jct_mean_s"]
    return f" by the --min-gain of {min_gain:g}x", f", a gain of {theirs / mine:.3f}x"


def guard(
    held: Mapping[str, Any],
    force: bool,
    baseline: str = "vllm",
    min_gain: float = 1.0,
    *,
    elsewhere: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Ship the tuned policy only if it beats the baseline on the held-back seeds (by at
    least ``min_gain``): stock vLLM (simulator), or in live mode the never-pin bundle
    (``baseline="never-pin"``: the server runs the TTL scheduler, so stock vLLM is not
    measured there). With ``baseline="old"`` (``ttlctl refit``): the refitted bundle
    (``new``) replaces the bundle in service (``old``) only if it beats it; ``elsewhere``:
    the file it is written to instead (``refit -o``), which the verdict names; ``dry_run``:
    nothing is written (``refit --dry-run``), and the verdict says what would be."""
    if baseline == "never-pin":
        return _guard_live(held, force, min_gain)
    if baseline == "old":
        return _guard_refit(held, force, elsewhere, dry_run)
    tuned, vllm, never = (held[f"{n}_jct_mean_s"] for n in ("tuned", "vllm", "never_pin"))
    tuned_beats = beats(held, "tuned", "vllm", min_gain)
    never_beats = beats(held, "never-pin", "vllm")
    by, short = short_of(held, "tuned", "vllm", min_gain)
    if tuned_beats:
        shipped = "tuned"
        message = (
            f"the tuned policy beats stock vLLM on the held-back seeds: mean JCT {tuned:.2f} s "
            f"vs {vllm:.2f} s ({vllm / tuned:.2f}x)"
        )
    elif force:
        shipped = "tuned"
        message = (
            f"the tuned policy does NOT beat stock vLLM{by} on the held-back seeds (mean "
            f"JCT {tuned:.2f} s vs {vllm:.2f} s{short}); shipping it anyway, as asked (--force)"
        )
    else:
        shipped = "never-pin"
        message = (
            f"the tuned policy does NOT beat stock vLLM{by} on the held-back seeds (mean "
            f"JCT {tuned:.2f} s vs {vllm:.2f} s{short}): the bundle written never pins "
            "(program FCFS only); pass --force to ship the tuned policy anyway"
        )
    if shipped == "never-pin" and not never_beats:
        message += (
            f". Program FCFS alone does not beat stock vLLM either ({never:.2f} s): "
            "serve this workload without a bundle"
        )
    return {
        "baseline": "vllm",
        "beats_baseline": tuned_beats,
        "beats_vllm": tuned_beats,
        "never_pin_beats_vllm": never_beats,
        "min_gain": min_gain,
        "forced": bool(force and not tuned_beats),
        "shipped": shipped,
        "message": message,
    }


def _guard_live(held: Mapping[str, Any], force: bool, min_gain: float) -> dict[str, Any]:
    tuned, never = held["tuned_jct_mean_s"], held["never_pin_jct_mean_s"]
    tuned_beats = beats(held, "tuned", "never-pin", min_gain)
    what = "the never-pin bundle (program FCFS, no pins; the live baseline)"
    by, short = short_of(held, "tuned", "never-pin", min_gain)
    what += by
    figures = f"mean JCT {tuned:.2f} s vs {never:.2f} s{short}"
    if tuned_beats:
        shipped = "tuned"
        message = (
            f"the tuned policy beats {what} on the held-back programs: {figures} "
            f"({never / tuned:.2f}x)"
        )
    elif force:
        shipped = "tuned"
        message = (
            f"the tuned policy does NOT beat {what} on the held-back programs ({figures}); "
            "shipping it anyway, as asked (--force)"
        )
    else:
        shipped = "never-pin"
        message = (
            f"the tuned policy does NOT beat {what} on the held-back programs ({figures}): "
            "the bundle written never pins; pass --force to ship the tuned policy anyway"
        )
    message += ". Stock vLLM was not measured (the server runs the TTL scheduler)"
    return {
        "baseline": "never-pin",
        "beats_baseline": tuned_beats,
        "beats_vllm": None,
        "never_pin_beats_vllm": None,
        "min_gain": min_gain,
        "forced": bool(force and not tuned_beats),
        "shipped": shipped,
        "message": message,
    }


def _guard_refit(
    held: Mapping[str, Any], force: bool, elsewhere: str | None, dry_run: bool
) -> dict[str, Any]:
    new, old, vllm = (held[f"{n}_jct_mean_s"] for n in ("new", "old", "vllm"))
    new_beats = beats(held, "new", "old")
    what = "the refitted bundle"
    figures = f"mean JCT {new:.2f} s vs {old:.2f} s"
    if new_beats:
        shipped = "new"
        message = (
            f"{what} beats the bundle in service on the held-back seeds: {figures} "
            f"({old / new:.3f}x)"
        )
    elif force:
        shipped = "new"
        if dry_run:  # nothing is written: say what the run would have done
            done = (
                "it would replace the bundle in service"
                if elsewhere is None
                else f"it would be written to {elsewhere}"
            )
        else:
            done = "replacing it" if elsewhere is None else f"writing it to {elsewhere}"
        message = (
            f"{what} does NOT beat the bundle in service on the held-back seeds ({figures}); "
            f"{done} anyway, as asked (--force)"
            + (", but a dry run writes nothing" if dry_run else "")
            + ("" if elsewhere is None else "; the bundle in service is left as it is")
        )
    else:
        shipped = "old"
        tie = ", a tie: the two bundles replay alike on this load"
        message = (
            f"{what} does NOT beat the bundle in service on the held-back seeds ({figures}"
            f"{tie if new == old else ''}): the bundle in service is kept"
            + (
                "; pass --force to replace it anyway"
                if elsewhere is None
                else f" and nothing is written; pass --force to write it to {elsewhere} anyway"
            )
        )
    return {
        "baseline": "old",
        "beats_baseline": new_beats,
        "beats_vllm": beats(held, "new", "vllm"),
        "old_beats_vllm": beats(held, "old", "vllm"),
        "vllm_jct_mean_s": vllm,
        "forced": bool(force and not new_beats),
        "shipped": shipped,
        "message": message,
    }
