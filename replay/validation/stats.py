"""Simulator against live, metric by metric: errors, several runs merged, rankings, goals.

Pure: plain result documents in, plain rows out. The compared metrics are
:data:`COMPARED`; a relative error is ``(sim − live) / live``, a hit-rate error is in
points, preemptions an absolute difference. Policies rank by mean JCT, in groups
that tie within :data:`TIE`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: goals of a validation (reported, not enforced)
JCT_GOAL = 0.10
HIT_GOAL_POINTS = 5.0
#: mean JCTs within 2% of each other rank as a tie
TIE = 0.02
#: (key, label, how the error is expressed)
COMPARED = (
    ("jct_mean_s", "mean JCT", "relative"),
    ("jct_p95_s", "p95 JCT", "relative"),
    ("ttft_mean_s", "mean TTFT", "relative"),
    ("prefix_hit_rate", "prefix hit rate", "points"),
    ("preemptions", "preemptions", "absolute"),
)


def _error(kind: str, s: Any, v: Any) -> float | None:
    if s is None or v is None:
        return None
    if kind == "relative":
        return float((s - v) / v) if v else None
    if kind == "points":
        return float((s - v) * 100.0)
    return float(s - v)


def compare(sim: Mapping[str, Any], live: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per compared metric: simulated, live (the mean of the live runs), the
    error, and the live runs' range (``live_range``: [min, max], None for one run)."""
    spread = live.get("live_range") or {}
    return [
        {
            "metric": key,
            "label": label,
            "kind": kind,
            "sim": sim.get(key),
            "live": live.get(key),
            "error": _error(kind, sim.get(key), live.get(key)),
            "live_range": spread.get(key),
        }
        for key, label, kind in COMPARED
    ]


def merge_runs(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several live runs of one policy as one result: the compared metrics are the
    runs' means (None if any run lacks one), ``live_range`` their [min, max], and
    ``runs`` the runs themselves; of the other keys only those equal in every run
    (the policy, the programs, …) are kept at the top. One run is returned as it is."""
    if len(runs) == 1:
        return dict(runs[0])
    merged = {k: v for k, v in runs[0].items() if all(r.get(k) == v for r in runs[1:])}
    spread: dict[str, list[float] | None] = {}
    for key, _, _ in COMPARED:
        values = [r.get(key) for r in runs]
        if any(v is None for v in values):
            merged[key], spread[key] = None, None
            continue
        nums = [float(v) for v in values]  # type: ignore[arg-type]
        merged[key] = sum(nums) / len(nums)
        spread[key] = [min(nums), max(nums)]
    merged["live_range"] = spread
    merged["runs"] = [dict(r) for r in runs]
    merged["repeats"] = len(runs)
    return merged


def ranking(
    results: Mapping[str, Mapping[str, Any]], key: str = "jct_mean_s", tie: float = TIE
) -> list[list[str]] | None:
    """Policies from best (lowest ``key``) to worst, in groups that tie within ``tie``.

    None when a value is missing.
    """
    values = {p: r.get(key) for p, r in results.items()}
    if any(v is None for v in values.values()):
        return None
    groups: list[list[str]] = []
    low = 0.0
    for p in sorted(values, key=lambda p: (values[p], p)):
        v = float(values[p])  # type: ignore[arg-type]
        if groups and v <= low * (1.0 + tie) + 1e-12:
            groups[-1].append(p)
        else:
            groups.append([p])
            low = v
    return groups


def same_ranking(a: list[list[str]] | None, b: list[list[str]] | None) -> bool | None:
    """Whether two rankings agree on every pair both of them order (ties agree with anything)."""
    if a is None or b is None:
        return None
    pos_a = {p: i for i, g in enumerate(a) for p in g}
    pos_b = {p: i for i, g in enumerate(b) for p in g}
    names = sorted(pos_a)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            da = (pos_a[x] > pos_a[y]) - (pos_a[x] < pos_a[y])
            db = (pos_b[x] > pos_b[y]) - (pos_b[x] < pos_b[y])
            if da and db and da != db:
                return False
    return True


def goals(rows: Sequence[Mapping[str, Any]]) -> dict[str, bool | None]:
    """Whether one policy's rows meet the goals: mean JCT within :data:`JCT_GOAL`,
    prefix-hit rate within :data:`HIT_GOAL_POINTS` (None: not measured)."""
    by = {r["metric"]: r for r in rows}
    jct, hit = by["jct_mean_s"]["error"], by["prefix_hit_rate"]["error"]
    return {
        "jct_within_10pct": None if jct is None else abs(jct) <= JCT_GOAL,
        "hit_rate_within_5_points": None if hit is None else abs(hit) <= HIT_GOAL_POINTS,
    }
