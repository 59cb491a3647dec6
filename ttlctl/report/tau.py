"""The "τ* against context length" section: the bundle's τ* (and the benefit B) from 256
to 256k tokens of context, for all tools and for each tool with its own CDF, at T = 0
and at the replay's queueing delay; then the policy's parameters."""

from __future__ import annotations

import numpy as np

from profiles import profile_read
from ttlctl.report.files import BUNDLE
from ttlctl.report.markup import absent, e, kv
from ttlctl.report.png import figure, img, label
from ttlctl.report.rundir import MAX_TOOL_PLOTS, RunInputs, ranked_tools

CONTEXT_GRID = tuple(float(c) for c in np.geomspace(256, 262_144, 41))
TICKS = (256, 1024, 4096, 16384, 65536, 262144)
TICK_LABELS = ("256", "1k", "4k", "16k", "64k", "256k")


def budget_note(run: RunInputs) -> str:
    """Which step budget the rebuild in B is priced in (a prefill of a longer context
    takes several steps, each paying its fixed cost)."""
    if run.engine_budget is not None:
        return (
            f"in steps of {run.engine_budget:,} tokens (the serving engine's "
            "--max-num-batched-tokens, as given)"
        )
    assert run.bundle is not None
    measured = profile_read.from_json(run.bundle["profile"]).chunk_tokens
    if measured is None:
        return "in one step (the bundle's profile records no budget)"
    return (
        f"in steps of {measured:,} tokens (the budget the bundle's profile was measured "
        "with; --max-num-batched-tokens gives the serving engine's)"
    )


def section(run: RunInputs) -> str:
    if run.policy is None:
        name = run.names[BUNDLE]
        return absent(name if BUNDLE not in run.problems else f"usable {name}")
    t_ref = run.queue_delay_s
    tvals = [0.0] if t_ref == 0 else [0.0, t_ref]
    ranked = [name for name, _ in ranked_tools(run.fit)] if run.fit is not None else []
    # the tools with their own CDF, all counted; the most frequent drawn
    uses_own = [n for n in ranked if run.decide(n, 1000.0, 0.0).source == "tool"]
    own = uses_own[:MAX_TOOL_PLOTS]
    fig = figure(5.6 * len(tvals) + 0.6, 4.2)
    axes = fig.subplots(1, len(tvals), squeeze=False)[0]
    for ax, t in zip(axes, tvals, strict=True):
        glob = [run.decide(None, c, t) for c in CONTEXT_GRID]
        ax.plot(CONTEXT_GRID, [d.benefit_s for d in glob], color="0.6", ls=":", label="B (s)")
        ax.plot(
            CONTEXT_GRID,
            [d.ttl_s for d in glob],
            color="k",
            ls="--",
            lw=1.6,
            label=f"all tools ({glob[0].source})",
        )
        for i, name in enumerate(own):
            ax.plot(
                CONTEXT_GRID,
                [run.decide(name, c, t).ttl_s for c in CONTEXT_GRID],
                color=f"C{i % 10}",
                lw=1.4,
                label=label(name, 32),
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_xticks(TICKS, TICK_LABELS)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("τ* (s)")
        ax.set_title(f"T = {t:.3g} s", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    params = run.policy.params
    parts = [
        f"<p>τ* = argmax P(τ)·B − τ with B = T·η + reload(context); η = {params.eta:.3g}, "
        f"K = {params.k}. Tools with at most K pauses use the all-tools curve "
        f"({len(ranked) - len(uses_own)} of {len(ranked)}). The reload is a rebuild priced "
        f"{e(budget_note(run))}.</p>",
        img(fig, "tau* against context length"),
        "<p>The bundle's policy parameters:</p>",
        kv(params.to_json()),
    ]
    return "".join(parts)
