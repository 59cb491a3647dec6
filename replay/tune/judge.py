"""Held-back judgement: the tuned policy, the paper's defaults, the never-pin policy (and,
in the simulator, stock vLLM) replayed on seeds or programs no trial saw, and the guard
that decides which policy is shipped."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fitting.policy import PolicyParams
from replay.policies import PolicySpec
from replay.tune.context import LIVE_BASELINE_NOTE, TuneContext, continuum, load_json, replay_once
from replay.tune.live_trial import live_brief, live_replay


def held_back(
    ctx: TuneContext, policies: Mapping[str, PolicyParams]
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Each policy (and stock vLLM) on ``ctx``'s seeds: flat figures (``<name>_jct_mean_s``,
    ``gain_vs_default`` …, as a report shows them) and each replay's mean JCT by policy."""
    specs = {name: continuum(ctx, p) for name, p in policies.items()} | {"vllm": PolicySpec("vllm")}
    by: dict[str, list[float]] = {name: [] for name in specs}
    p95: dict[str, list[float | None]] = {name: [] for name in specs}
    for timing in ctx.replays():
        for name, spec in specs.items():
            r = replay_once(ctx, spec, timing)
            by[name].append(float(r["jct_mean_s"]))
            p95[name].append(r["jct_p95_s"])
    return _held_figures(ctx, by, p95, ("default", "vllm"), "vllm"), by


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
    out = _held_figures(ctx, by, p95, ("default", "never-pin"), "never-pin")
    out["note"] = LIVE_BASELINE_NOTE
    out["live_runs"] = runs
    return out, by


def _held_figures(
    ctx: TuneContext,
    by: Mapping[str, Sequence[float]],
    p95: Mapping[str, Sequence[float | None]],
    compare: Sequence[str],
    baseline: str,
) -> dict[str, Any]:
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
        if "tuned" in by and name in by:
            p = paired(by["tuned"], by[name])
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


def guard(held: Mapping[str, Any], force: bool, baseline: str = "vllm") -> dict[str, Any]:
    """Ship the tuned policy only if it beats the baseline on the held-back seeds: stock
    vLLM (simulator), or in live mode the never-pin bundle (``baseline="never-pin"``:
    the server runs the TTL scheduler, so stock vLLM is not measured there)."""
    if baseline == "never-pin":
        return _guard_live(held, force)
    tuned, vllm, never = (held[f"{n}_jct_mean_s"] for n in ("tuned", "vllm", "never_pin"))
    beats = tuned < vllm
    never_beats = never < vllm
    if beats:
        shipped = "tuned"
        message = (
            f"the tuned policy beats stock vLLM on the held-back seeds: mean JCT {tuned:.2f} s "
            f"vs {vllm:.2f} s ({vllm / tuned:.2f}x)"
        )
    elif force:
        shipped = "tuned"
        message = (
            f"the tuned policy does NOT beat stock vLLM on the held-back seeds (mean JCT "
            f"{tuned:.2f} s vs {vllm:.2f} s); shipping it anyway, as asked (--force)"
        )
    else:
        shipped = "never-pin"
        message = (
            f"the tuned policy does NOT beat stock vLLM on the held-back seeds (mean JCT "
            f"{tuned:.2f} s vs {vllm:.2f} s): the bundle written never pins (program FCFS "
            "only); pass --force to ship the tuned policy anyway"
        )
    if shipped == "never-pin" and not never_beats:
        message += (
            f". Program FCFS alone does not beat stock vLLM either ({never:.2f} s): "
            "serve this workload without a bundle"
        )
    return {
        "baseline": "vllm",
        "beats_baseline": beats,
        "beats_vllm": beats,
        "never_pin_beats_vllm": never_beats,
        "forced": bool(force and not beats),
        "shipped": shipped,
        "message": message,
    }


def _guard_live(held: Mapping[str, Any], force: bool) -> dict[str, Any]:
    tuned, never = held["tuned_jct_mean_s"], held["never_pin_jct_mean_s"]
    beats = tuned < never
    what = "the never-pin bundle (program FCFS, no pins; the live baseline)"
    figures = f"mean JCT {tuned:.2f} s vs {never:.2f} s"
    if beats:
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
        "beats_baseline": beats,
        "beats_vllm": None,
        "never_pin_beats_vllm": None,
        "forced": bool(force and not beats),
        "shipped": shipped,
        "message": message,
    }
