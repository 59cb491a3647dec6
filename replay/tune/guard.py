"""The guard: which policy a bundle ships, from the held-back figures
(:mod:`replay.tune.judge`). ``ttlctl tune`` ships the tuned policy only if it beats stock vLLM
(live: the never-pin bundle); ``ttlctl refit`` replaces the bundle in service only if the
refitted one beats it (``guard(..., baseline="old")``), by the same rule (:func:`beats`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

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
    nothing is written (``refit --dry-run``), and the verdict says what a real run would
    do (a kept bundle: not a refusal to override with ``--force``)."""
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
            f"the tuned policy beats stock vLLM on the held-back seeds: mean JCT {tuned:,.2f} s "
            f"vs {vllm:,.2f} s ({vllm / tuned:.2f}x)"
        )
    elif force:
        shipped = "tuned"
        message = (
            f"the tuned policy does NOT beat stock vLLM{by} on the held-back seeds (mean "
            f"JCT {tuned:,.2f} s vs {vllm:,.2f} s{short}); shipping it anyway, as asked (--force)"
        )
    else:
        shipped = "never-pin"
        message = (
            f"the tuned policy does NOT beat stock vLLM{by} on the held-back seeds (mean "
            f"JCT {tuned:,.2f} s vs {vllm:,.2f} s{short}): the bundle written never pins "
            "(program FCFS only); pass --force to ship the tuned policy anyway"
        )
    if shipped == "never-pin" and not never_beats:
        message += (
            f". Program FCFS alone does not beat stock vLLM either ({never:,.2f} s): "
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
    figures = f"mean JCT {tuned:,.2f} s vs {never:,.2f} s{short}"
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
    figures = f"mean JCT {new:,.2f} s vs {old:,.2f} s"
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
        if dry_run:  # nothing was refused: say what the run would do, not what to pass
            kept = "a real run would keep the bundle in service" + (
                "" if elsewhere is None else f" and write nothing to {elsewhere}"
            )
        else:
            kept = "the bundle in service is kept" + (
                "; pass --force to replace it anyway"
                if elsewhere is None
                else f" and nothing is written; pass --force to write it to {elsewhere} anyway"
            )
        message = (
            f"{what} does NOT beat the bundle in service on the held-back seeds ({figures}"
            f"{tie if new == old else ''}): {kept}"
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
