"""The "Tuning history and parameter importance" section, from ``tune.json``: each
trial's value with the best so far, the parameters' importance, the best trial and the
held-back evaluation. Read defensively: any key may be missing or odd."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ttlctl.report.files import SUMMARY
from ttlctl.report.markup import absent, e, is_num, kv, note, num, ratio
from ttlctl.report.png import figure, img, label
from ttlctl.report.rundir import RunInputs


def history_chart(trials: list[dict[str, Any]], maximize: bool) -> Figure | None:
    """Each completed trial's value and the best so far, by trial number (whole numbers
    on the axis: a study of 4 trials had ticks at 0.5, 1.5 …); None when no trial
    completed with a value."""
    done = [
        (int(t["number"]) if is_num(t.get("number")) else i, float(t["value"]))
        for i, t in enumerate(trials)
        if is_num(t.get("value"))
        and math.isfinite(t["value"])
        and str(t.get("state", "COMPLETE")).upper() == "COMPLETE"
    ]
    if not done:
        return None
    done.sort()
    nums = [n for n, _ in done]
    vals = [v for _, v in done]
    best = np.maximum.accumulate(vals) if maximize else np.minimum.accumulate(vals)
    fig = figure(6.5, 3.6)
    ax = fig.subplots()
    ax.scatter(nums, vals, s=14, color="C0", label="trial value")
    ax.step(nums, best, where="post", color="C3", lw=1.6, label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel("objective (mean JCT, s)")
    ax.set_title("each trial's objective and the best so far", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _history(trials: list[dict[str, Any]], maximize: bool) -> str:
    fig = history_chart(trials, maximize)
    if fig is None:
        return note("No completed trial with a value.")
    return img(fig, "Optuna optimisation history")


def _importance(importance: Any, why_not: Any, quantile: Any = None) -> str:
    pairs = (
        sorted(
            ((str(k), float(v)) for k, v in importance.items() if is_num(v)),
            key=lambda kv: kv[1],
        )
        if isinstance(importance, dict)
        else []
    )
    if not pairs:
        if isinstance(why_not, str) and why_not:  # tune.json says why
            return note(f"Parameter importance: {why_not}.")
        return note("Parameter importance: not in this run (not computed).")
    fig = figure(6.5, 0.8 + 0.35 * len(pairs))
    ax = fig.subplots()
    ax.barh([label(k, 32) for k, _ in pairs], [v for _, v in pairs], color="C2")
    ax.set_xlabel("importance")
    ax.set_title("parameter importance", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    chart = img(fig, "parameter importance")
    if not is_num(quantile):
        return chart
    return chart + note(
        f"Parameter importance: what the top {float(quantile) * 100:.3g}% of the completed trials "
        "share (Optuna's PED-ANOVA; that top holds at least 5 trials)."
    )


def section(run: RunInputs) -> str:
    if run.tune is None:
        if SUMMARY in run.set_aside:
            return note(f"{run.names[SUMMARY]} not used: {run.set_aside[SUMMARY]}", missing=True)
        return absent(run.names[SUMMARY])
    tune = run.tune
    trials = [t for t in tune.get("trials") or [] if isinstance(t, dict)]
    maximize = str(tune.get("direction", "minimize")).lower().startswith("max")
    states: dict[str, int] = {}
    for t in trials:
        states[str(t.get("state", "?"))] = states.get(str(t.get("state", "?")), 0) + 1
    parts = [
        f"<p>{len(trials)} trial(s) ({e(', '.join(f'{k}: {v}' for k, v in states.items()))}); "
        f"objective {'maximised' if maximize else 'minimised'}.</p>",
        _history(trials, maximize),
        _importance(
            tune.get("importance"), tune.get("importance_note"), tune.get("importance_quantile")
        ),
    ]
    best_doc = tune.get("best")
    if isinstance(best_doc, dict):
        parts.append("<p>Best trial:</p>" + kv(dict(flat(best_doc))))
    held = tune.get("held_back")
    if isinstance(held, dict):
        # the gains as tune prints them, all alike (0.9998 and 1.0 are 1.000x and 1.000x)
        shown = {k: ratio(v) if str(k).startswith("gain_") else v for k, v in held.items()}
        parts.append("<p>Held-back evaluation:</p>" + kv(dict(flat(shown))))
    return "".join(parts)


def flat(doc: dict[str, Any], prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """A summary's rows: nested records as dotted keys (``policy.eta``), a router as one
    phrase (``cache-aware, 4 replicas: cache_threshold 0.3, …``), so that the best trial's
    policy and router read in full where a table cell cut their JSON at 200 characters;
    lists, and records nested deeper than three, stay as they are."""
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and _is_router(value):
            yield name, router_phrase(value)
        elif isinstance(value, dict) and value and depth < 3:
            yield from flat(value, f"{name}.", depth + 1)
        else:
            yield name, value


def _is_router(value: dict[str, Any]) -> bool:
    return isinstance(value.get("name"), str) and isinstance(value.get("settings"), dict)


def router_phrase(router: dict[str, Any]) -> str:
    """A router's description (name, replicas, settings, and anything else it holds, such
    as its workers' URLs) in one line."""
    replicas = router.get("replicas")
    head = str(router["name"]) + (f", {num(replicas)} replicas" if is_num(replicas) else "")
    settings = ", ".join(f"{k} {num(v)}" for k, v in router["settings"].items())
    rest = "".join(
        f"; {k} {num(v)}" for k, v in router.items() if k not in ("name", "replicas", "settings")
    )
    return head + (f": {settings}" if settings else "") + rest
