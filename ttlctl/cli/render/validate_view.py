"""A validation: the simulator against live servers, metric by metric."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ttlctl.cli.render.cells import show
from ttlctl.cli.render.measured_view import (
    cpu_line,
    measurements_line,
    placement_lines,
    span_error,
)
from ttlctl.nouns import counted


def _value(kind: str, metric: str, v: Any) -> str:
    if v is None:
        return "—"
    if metric == "prefix_hit_rate":
        return f"{v:.1%}"
    if metric == "preemptions":
        return f"{v:,.0f}"
    return f"{v:.3f} s"


def _error(kind: str, e: Any) -> str:
    if e is None:
        return "—"
    if kind == "relative":
        return f"{e:+.1%}"
    if kind == "points":
        return f"{e:+.1f} pt"
    return f"{e:+,.0f}"


def _range(kind: str, metric: str, span: Any) -> str:
    if not span:
        return "—"
    return f"{_value(kind, metric, span[0])} – {_value(kind, metric, span[1])}"


def validate_table(console: Console, doc: dict[str, Any]) -> None:
    # imported when the table is shown: `ttlctl --help` and the light commands stay light
    from replay.validation import COMPARED

    repeats = int(doc.get("config", {}).get("repeats") or 1)
    runs = f", {repeats} live runs per policy" if repeats > 1 else ""
    table = Table(
        title=f"validate: simulator vs live, {counted(doc['programs'], 'program')}, "
        f"{counted(doc['calls'], 'call')}" + runs
    )
    live_col = "live (mean)" if repeats > 1 else "live"
    cols = ["metric", "policy", "simulated", live_col, "error (sim − live)"]
    if repeats > 1:
        cols.append("live range")
    for col in cols:
        table.add_column(col, justify="left" if col in ("metric", "policy") else "right")
    for i, (key, label, kind) in enumerate(COMPARED):
        for name in doc["policies"]:
            row = next(r for r in doc["rows"][name] if r["metric"] == key)
            cells = [
                label if name == doc["policies"][0] else "",
                name,
                _value(kind, key, row["sim"]),
                _value(kind, key, row["live"]),
                _error(kind, row["error"]),
            ]
            if repeats > 1:
                cells.append(_range(kind, key, row.get("live_range")))
            table.add_row(
                *cells,
                end_section=name == doc["policies"][-1] and i < len(COMPARED) - 1,
            )
    show(console, table)
    rank = doc["ranking"]
    if len(doc["policies"]) > 1:
        same = {True: "the same", False: "DIFFERENT", None: "unknown"}[rank["same"]]
        console.print(
            f"ranking by mean JCT (≈: within {rank['tie_within']:.0%}): simulator "
            f"{_order(rank['sim'])}, live {_order(rank['live'])}: {same}",
            highlight=False,
        )
    for name, goal in doc["goals"].items():
        jct = {True: "yes", False: "no", None: "—"}[goal["jct_within_10pct"]]
        hit = {True: "yes", False: "no", None: "—"}[goal["hit_rate_within_5_points"]]
        console.print(
            f"{name}: mean JCT within 10%: {jct}; prefix-hit rate within 5 points: {hit}",
            highlight=False,
        )
    p95 = [r for rows in doc["rows"].values() for r in rows if r["metric"] == "jct_p95_s"]
    if any(r["sim"] is None or r["live"] is None for r in p95):
        console.print("p95 JCT needs at least 20 finished programs", highlight=False)
    taken = doc.get("profile", {}).get("measurements") or []
    if len(taken) > 1:
        console.print(measurements_line(taken, doc["profile"]["doc"]), highlight=False)


def _order(groups: list[list[str]] | None) -> str:
    return "?" if groups is None else " < ".join(" ≈ ".join(g) for g in groups)


def _fleet_value(metric: str, v: Any) -> str:
    if v is None:
        return "—"
    if metric in ("hit_rate", "returned_share"):
        return f"{v:.1%}"
    return f"{v:.3f} s"


def _spread(counts: dict[str, int] | None) -> str:
    return "—" if not counts else " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def _placements(runs: list[dict[str, Any]]) -> str:
    """Each run's calls per replica, live; where the simulation on the trace's timing
    placed them otherwise, its counts beside them (``sim …``), and in how many runs it put
    as many calls on each replica (a count per replica: not which programs went where)."""
    placed, simulated, alike = [], 0, 0
    for r in runs:
        live, sim = r.get("calls_per_replica"), r.get("sim_calls_per_replica")
        simulated += bool(sim)
        alike += bool(sim) and sim == live
        placed.append(_spread(live) + (f" (sim {_spread(sim)})" if sim and sim != live else ""))
    text = ", ".join(placed)
    if not simulated:
        return text
    of = counted(simulated, "run")
    # counts alike: the same calls on each replica, not always the same programs
    return f"{text}; simulated on the trace's timing, as many calls per replica in {alike} of {of}"


def _drawn(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The perturbed timings' settings of the first row that has them (None: none)."""
    for by_router in (doc.get("rows") or {}).values():
        for row in by_router.values():
            if row.get("sim_timings"):
                drawn: dict[str, Any] = row["sim_timings"]
                return drawn
    return None


def fleet_table(console: Console, doc: dict[str, Any]) -> None:
    """``validate --replicas N --router R``: per policy and router, simulated against live
    (with ``--repeats K``: the live mean over K runs and its range)."""
    repeats = int(doc.get("repeats") or 1)
    table = Table(
        title=f"{counted(doc['programs'], 'program')} ({counted(doc['calls'], 'call')}) on "
        f"{counted(doc['replicas'], 'replica')} behind vllm-router: simulated against live"
        + (f", {repeats} live runs per router" if repeats > 1 else "")
    )
    cols = ["policy", "router", "metric", "simulated", "live (mean)" if repeats > 1 else "live"]
    cols += ["error", "live range"] if repeats > 1 else ["error"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("policy", "router", "metric") else "right")
    for policy, by_router in doc["rows"].items():
        for router, row in by_router.items():
            for i, c in enumerate(row["compare"]):
                cells = [
                    policy if i == 0 else "",
                    router if i == 0 else "",
                    c["label"],
                    _fleet_value(c["metric"], c["sim"]),
                    _fleet_value(c["metric"], c["live"]),
                    _error(c["kind"], c["error"]),
                ]
                if repeats > 1:
                    span = c.get("live_range")
                    cells.append(
                        "—"
                        if not span
                        else f"{_fleet_value(c['metric'], span[0])} – "
                        f"{_fleet_value(c['metric'], span[1])}"
                    )
                table.add_row(*cells)
    show(console, table)
    for policy, by_router in doc["rows"].items():
        rank = doc["ranking"][policy]
        same = {True: "same", False: "DIFFERENT", None: "not compared"}[rank["same"]]
        if rank["routers"]:
            console.print(
                f"{policy}: routers by mean JCT, simulated {_order(rank['sim'])}; live "
                f"{_order(rank['live'])} ({same})",
                highlight=False,
            )
        for router, row in by_router.items():
            note = f"; {row['sim_note']}" if row.get("sim_note") else ""
            routed = {c["metric"]: c for c in row.get("compare_as_routed") or []}
            if routed:
                jct = routed["jct_mean_s"]
                note += (
                    f"; simulated with the live placement: mean JCT "
                    f"{_fleet_value('jct_mean_s', jct['sim'])} ({_error('relative', jct['error'])})"
                )
            one = {c["metric"]: c for c in row.get("compare_one_timing") or []}
            if one and row.get("sim_timings"):
                jct = one["jct_mean_s"]
                note += (
                    f"; simulated on the trace's own timing alone: mean JCT "
                    f"{_fleet_value('jct_mean_s', jct['sim'])} ({_error('relative', jct['error'])})"
                )
            runs = row.get("runs") or [row]
            spread = _placements(runs)
            if len(runs) > 1:
                within = row.get("runs_within_10pct")
                note += (
                    f"; single runs within 10%: {'—' if within is None else within} of {len(runs)}"
                )
            console.print(f"  {router}: calls per replica {spread}{note}", highlight=False)
            engines = row.get("engines_pooled")
            if engines:
                console.print(f"    {_engines(engines)}", highlight=False)
            used = cpu_line(doc, policy, router)
            if used:
                console.print(f"    {used}", highlight=False)
        goal = (doc.get("goal") or {}).get(policy)
        if goal is not None:
            met = {True: "met", False: "NOT met", None: "not judged"}
            text = f"{policy}: goal (every router's mean JCT within 10%, the same ranking): "
            text += met[goal["met"]] + (" on the means" if repeats > 1 else "")
            if repeats > 1:
                each = goal["runs"]
                text += f"; on single runs: met in {sum(1 for g in each if g)} of {len(each)}"
            repriced = goal.get("pooled_profile")
            if repriced:
                errors = ", ".join(
                    f"{r} {_error('relative', e)}" for r, e in repriced["errors"].items()
                )
                differs = (repriced.get("ranking") or {}).get("same") is False
                text += (
                    f"; with every run priced by the pooled profile: {met[repriced['met']]} "
                    f"({errors}{'; the ranking differs' if differs else ''})"
                )
            console.print(text, highlight=False)
    for line in placement_lines(doc):
        console.print(line, highlight=False)
    drawn = _drawn(doc)
    if drawn:
        console.print(
            f"simulated: the mean over {drawn['draws']} seeded arrival timings (each pause "
            f"× 1 ± {drawn['pause_rel']:.0%}, each program's start + 0–{drawn['start_s'] * 1e3:.0f}"
            " ms)",
            highlight=False,
        )
    elif doc.get("timing_draws") == 0:
        console.print(
            "simulated: on the trace's own timing alone (--timing-draws 0)", highlight=False
        )
    if doc.get("profile", {}).get("source"):
        each = doc["profile"].get("pricing") == "per repeat"
        console.print(
            "profile: "
            + (
                "each repeat's runs priced by that repeat's own measurement; beside it, the "
                "profile "
                if each
                else ""
            )
            + doc["profile"]["source"],
            highlight=False,
        )
    taken = doc.get("profile", {}).get("measurements") or []
    if len(taken) > 1:
        console.print(measurements_line(taken, doc["profile"]["doc"]), highlight=False)
    console.print(
        "returned: follow-up calls that reached the replica of their program's previous "
        "call (live: from the replicas' arrivals); errors: (simulated − live) / live, "
        "rates in points; the live placement: each call simulated on the replica it reached",
        highlight=False,
    )


def _engines(pooled: dict[str, Any]) -> str:
    """The replicas' own steps and TTFT against the simulator's on the live placement,
    over a router's runs, the TTFT's two parts (queued; scheduled to first token) and the
    decode after it (first token to last)."""
    steps, ttft = pooled["engine_steps"], pooled["ttft_mean_s"]
    runs = f"{pooled['runs']} runs" if pooled["runs"] > 1 else "the run"
    compared = (
        f"({_error('relative', steps['error'])})"
        if pooled.get("steps_comparable", True)
        else "(not compared: prompts longer than the step budget take steps vLLM does not count)"
    )
    text = (
        f"engines over {runs} (their /metrics; simulated on the live placement): steps "
        f"{steps['live']:,} live, {steps['sim']:,} simulated {compared}"
    )
    if ttft["live"] is not None and ttft["sim"] is not None:
        text += (
            f"; TTFT at the replica {_fleet_value('ttft_mean_s', ttft['live'])} live, "
            f"{_fleet_value('ttft_mean_s', ttft['sim'])} simulated "
            f"({_error('relative', ttft['error'])})"
        )
    parts = [
        f"{label} {_fleet_value('ttft_mean_s', pair['live'])} live, "
        f"{_fleet_value('ttft_mean_s', pair['sim'])} simulated "
        f"({span_error(pair)})"
        for label, pair in (
            ("queued", pooled.get("queue_mean_s") or {}),
            ("scheduled to first token", pooled.get("prefill_mean_s") or {}),
            ("first token to last", pooled.get("decode_mean_s") or {}),
        )
        if pair.get("live") is not None and pair.get("sim") is not None
    ]
    if parts:
        text += "; on the engine core's clock: " + ", ".join(parts)
    return text
