"""The "KV held by pins over time" section: each policy's pinned KV tokens through the
replay (the peak of each slice), in seconds or hours of simulated time; in a fleet, the
pins of all its replicas together (what the replay records), which the axis and a note
say: a peak above one replica's cache is no error."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from ttlctl.report.markup import absent, is_num, note
from ttlctl.report.png import figure, img, label
from ttlctl.report.rundir import RunInputs


def fleet_size(run: RunInputs) -> int | None:
    """The replicas of the replay's fleet, when it is one of several (read defensively:
    the first result's ``router.replicas``), else None."""
    router = next((r.get("router") for r in run.results() if "router" in r), None)
    replicas = router.get("replicas") if isinstance(router, dict) else None
    return replicas if isinstance(replicas, int) and replicas > 1 else None


def _fleet_note(run: RunInputs, replicas: int) -> str:
    """What the lines of a fleet's replay add up, and one replica's cache to read them by."""
    config = run.replay.get("config") if run.replay is not None else None
    engine = config.get("engine") if isinstance(config, dict) else None
    kv = engine.get("kv_tokens") if isinstance(engine, dict) else None
    each = f" (each replica's cache holds {kv:,.0f} tokens)" if is_num(kv) else ""
    return note(f"A fleet: each line is the pins of all {replicas} replicas together{each}.")


def section(run: RunInputs) -> str:
    if run.replay is None:
        return absent("replay.json")
    lines, idle = [], []
    for r in run.results():
        tl = r.get("pinned_timeline")
        times = (tl.get("t_s") if isinstance(tl, dict) else None) or []
        tokens = (tl.get("pinned_tokens") if isinstance(tl, dict) else None) or []
        name = str(r.get("policy", "?"))
        if times and len(times) == len(tokens) and any(tokens):
            lines.append((name, np.asarray(times, dtype=float), np.asarray(tokens, dtype=float)))
        else:
            idle.append(name)
    parts = []
    if lines:
        span = max(float(t.max()) for _, t, _ in lines)
        unit, div = ("h", 3600.0) if span > 7200 else ("s", 1.0)
        fig = figure(9.0, 3.8)
        ax = fig.subplots()
        for i, (name, t, v) in enumerate(lines):
            ax.step(
                t / div,
                v,
                where="post",
                color=f"C{i % 10}",
                lw=1.2,
                alpha=0.85,
                label=label(name, 24),
            )
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlabel(f"simulated time ({unit})")
        replicas = fleet_size(run)
        held = "KV tokens held by pins"
        ax.set_ylabel(held if replicas is None else f"{held}\n(all {replicas} replicas)")
        ax.set_title("KV held by pins (the peak of each slice)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
        parts.append(img(fig, "KV occupied by pins over time"))
        parts.append(note("Each point is the peak over its slice of the replay."))
        if replicas is not None:
            parts.append(_fleet_note(run, replicas))
    else:
        parts.append(note("No policy held any pin in this replay."))
    if idle:
        parts.append(note("No pins (or no timeline): " + ", ".join(idle)))
    return "".join(parts)
