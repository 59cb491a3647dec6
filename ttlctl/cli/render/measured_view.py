"""What ``validate`` measured beside the calls, as lines of text: each profile measurement
against the pooled profile, the CPU a live fleet's processes used, and where and how its
replicas ran."""

from __future__ import annotations

from typing import Any

from profiles import profile_read
from profiles.cost import ProfileCostModel

#: (label, prompt tokens, decode sequences, their KV tokens) of the times each measured
#: profile predicts, shown measurement by measurement: a prefill, a decode step alone and
#: one of a batch (a fit's terms trade off against each other; its predictions do not)
_PREDICTED = (
    ("prefill of 1,024 tokens", 1024, 0, 0),
    ("decode step of 1 × 1,024", 0, 1, 1024),
    ("of 8 × 512", 0, 8, 4096),
)


def _predicted(doc: dict[str, Any], tokens: int, seqs: int, kv: int) -> float:
    """Milliseconds a profile document predicts for a prefill of ``tokens`` (``seqs`` 0)
    or a decode step of ``seqs`` sequences over ``kv`` KV tokens (the cost model's own
    terms)."""
    cost = ProfileCostModel(profile_read.from_json(doc))
    if seqs == 0:
        return 1e3 * cost.profile.prefill_s(tokens)
    return 1e3 * cost.decode_s(seqs, kv)


def measurements_line(taken: list[dict[str, Any]], pooled: dict[str, Any]) -> str:
    """What each measurement alone predicts (min – max) against the pooled profile."""
    parts = []
    for label, *at in _PREDICTED:
        each = [_predicted(m["doc"], *at) for m in taken]
        parts.append(
            f"{label} {min(each):.3g} – {max(each):.3g} ms (pooled {_predicted(pooled, *at):.3g})"
        )
    return f"  the {len(taken)} measurements, each fitted alone: " + "; ".join(parts)


def cpu_line(doc: dict[str, Any], policy: str, router: str) -> str | None:
    """The CPU seconds each process of the fleet used in a live run, a mean over the runs
    that read it (replicas, then the router, then the client), against the runs' mean wall
    time (None: read in no run)."""
    fleets = ((doc.get("fleets") or {}).get(policy) or {}).get(router)
    lives = ((doc.get("live") or {}).get(policy) or {}).get(router)
    if isinstance(fleets, dict):
        fleets, lives = [fleets], [lives]
    used = [f.get("cpu_s") or {} for f in fleets or []]
    last = {"router": 1, "client": 2}  # after the replicas, in this order
    names = sorted({n for u in used for n in u}, key=lambda n: (last.get(n, 0), n))
    parts = []
    for name in names:
        values = [u[name] for u in used if u.get(name) is not None]
        if values:
            some = f" ({len(values)} of {len(used)} runs)" if len(values) < len(used) else ""
            parts.append(f"{name} {sum(values) / len(values):.1f} s{some}")
    if not parts:
        return None
    walls = [float(lv["wall_s"]) for lv in lives or [] if lv and lv.get("wall_s") is not None]
    wall = f" over {sum(walls) / len(walls):.1f} s of wall time" if walls else ""
    return f"CPU used in a live run (mean over {len(used)}): {', '.join(parts)}{wall}"


def placement_lines(doc: dict[str, Any]) -> list[str]:
    """Where a fleet's replicas ran (their CPUs, their GPUs) and how they scheduled."""
    lines = []
    if doc.get("cpu_sets"):
        sets = " | ".join(",".join(str(c) for c in s) for s in doc["cpu_sets"])
        lines.append(f"replicas pinned to CPUs {sets}")
    if doc.get("gpu_sets"):
        lines.append(f"replicas on GPUs {' | '.join(','.join(s) for s in doc['gpu_sets'])}")
    if doc.get("async_scheduling"):
        lines.append(
            "async scheduling: the replicas served with vLLM's --async-scheduling, the "
            "simulated ones scheduling a step ahead as it does"
        )
    return lines


def span_error(pair: dict[str, Any]) -> str:
    """A span of the replicas' own times (queued, prefill, decode) against the simulated
    one: the relative error, or the gap in milliseconds where the live span is under half
    a millisecond (nothing queued: a relative error of it says nothing)."""
    if pair["live"] >= 5e-4:
        return "—" if pair["error"] is None else f"{pair['error']:+.1%}"
    gap_ms = 1e3 * (pair["sim"] - pair["live"])
    return f"{gap_ms:+.1f} ms" if abs(gap_ms) >= 0.05 else "—"
