"""The "KV held by pins over time" section: each policy's pinned KV tokens through the
replay (the peak of each slice), in seconds or hours of simulated time."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from ttlctl.report.markup import absent, note
from ttlctl.report.png import figure, img, label
from ttlctl.report.rundir import RunInputs


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
        ax.set_ylabel("KV tokens held by pins")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
        parts.append(img(fig, "KV occupied by pins over time"))
        parts.append(note("Each point is the peak over its slice of the replay."))
    else:
        parts.append(note("No policy held any pin in this replay."))
    if idle:
        parts.append(note("No pins (or no timeline): " + ", ".join(idle)))
    return "".join(parts)
