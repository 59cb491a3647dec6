"""The "Fleet" section: for a replay of several engines behind a router
(``ttlctl replay --replicas N --router R``), the router's outcome per policy (load
balance, follow-up calls that returned to their replica, pins wasted), why follow-up
calls missed the cache, and each replica's load: a chart
(:mod:`ttlctl.report.fleet_chart`) above the tables."""

from __future__ import annotations

from typing import Any

from replay.fleet.records import credit_phrase, replica_labels, shown_phrase, shown_replicas
from ttlctl.nouns import counted
from ttlctl.report.fleet_chart import MISSES, chart, record, replicas_of
from ttlctl.report.markup import absent, e, note, pct, table
from ttlctl.report.png import img
from ttlctl.report.rundir import RunInputs

#: up to this many policies the per-replica tables stand open; more fold
OPEN_TABLES = 2


def section(run: RunInputs) -> str:
    if run.replay is None:
        return absent("replay.json")
    # read defensively: a replay.json may be edited
    results: list[dict[str, Any]] = [
        dict(r) for r in run.results() if isinstance(r.get("router"), dict)
    ]
    if not results:
        return note("One engine, no router (a fleet is `ttlctl replay --replicas N --router R`).")
    router: dict[str, Any] = results[0]["router"]
    settings = router.get("settings") or {}
    replicas = router.get("replicas")
    uncredited = credit_phrase(router)
    head = (
        "<p>"
        + (counted(replicas, "replica") if isinstance(replicas, int) else f"{e(replicas)} replicas")
        + f" behind <code>{e(router.get('name'))}</code>"
        + (
            " (" + ", ".join(f"{e(k)} = {e(v)}" for k, v in settings.items()) + ")"
            if isinstance(settings, dict) and settings
            else ""
        )
        + ("" if uncredited is None else f"; {uncredited} (<code>--no-prefix-credit</code>)")
        + "</p>"
    )
    outcome = table(
        ("policy", "load max/mean", "returned", "pins made", "pins wasted", "wasted share"),
        (
            (
                r.get("policy"),
                r.get("load_balance"),
                pct(r.get("returned_share")),
                record(r.get("pins")).get("made"),
                r.get("pins_wasted"),
                pct(r.get("pins_wasted_share")),
            )
            for r in results
        ),
    )
    misses = table(
        ("policy", *(label for _, label in MISSES)),
        (
            (r.get("policy"), *(record(r.get("miss_reasons")).get(k) for k, _ in MISSES))
            for r in results
        ),
    )
    per = []
    # a table per policy: several policies' tables fold (each opens on a click), so that
    # eight policies of sixteen replicas are not 128 rows between the sections
    folded = len(results) > OPEN_TABLES
    for r in results:
        reps = replicas_of(r)
        labels = replica_labels(reps)  # as-logged: the trace's names
        rows = shown_replicas(reps)
        shown = shown_phrase(reps)
        heading = f"{e(r.get('policy'))}: per replica{': ' + shown if shown else ''}"
        per.append(f"<details{'' if folded else ' open'}><summary>{heading}</summary>")
        per.append(
            table(
                ("replica", "calls", "busy s", "JCT mean s", "TTFT mean s", "prefix hits",
                 "preemptions", "pins made"),
                (
                    (row, "", "", "", "", "", "", "")
                    if isinstance(row, str)  # the replicas left out, counted
                    else (
                        labels[row],
                        reps[row].get("llm_calls"),
                        reps[row].get("engine_busy_s"),
                        reps[row].get("jct_mean_s"),
                        reps[row].get("ttft_mean_s"),
                        pct(reps[row].get("prefix_hit_rate")),
                        reps[row].get("preemptions"),
                        reps[row].get("pins_made"),
                    )
                    for row in rows
                ),
                # each column at one precision, as the command line prints them
                (None, ",", ",.1f", ",.2f", ",.3f", None, ",", ","),
            )
            + "</details>"
        )  # fmt: skip
    return (
        head
        + img(chart(results), "each replica's load and why follow-up calls missed the cache")
        + outcome
        + note(
            "load max/mean: the busiest replica's engine-busy seconds over the mean; "
            "returned: follow-up calls sent to their previous call's replica; pins wasted: "
            "pins whose program's next call went to another replica."
        )
        + "<h3>Why follow-up calls missed the cache</h3>"
        + misses
        + note(
            "Calls whose prefix hit fell short of what they repeat of their previous call: "
            "sent to another replica; its previous call not pinned (evicted from the free "
            "list); it came after its pin's τ ran out (expired, whether or not the valve "
            "released the pin sooner) or within τ after the valve released it; or its pin "
            "was held when it came but the blocks were gone when it was admitted."
        )
        + "<h3>Per replica</h3>"
        + (note(f"One table per policy ({len(results)}): click a policy to open its table.")
           if folded else "")
        + "".join(per)
    )  # fmt: skip
