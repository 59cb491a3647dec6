"""``validate --replicas N --repeats K``: K live runs of each router made one row (the live
mean and range, the simulated mean's error against the live mean, every run kept), the
routers ranked on the means and run by run, and issue 19's goal judged on both; and the
table that shows it. On run rows shaped as ``validate`` writes them."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from profiles.shipped import resolve
from replay.validation.fleet_rows import fleet_row
from replay.validation.fleet_runs import goal, mean_sim, merge_fleet_runs, run_rankings
from replay.validation.fleet_sim import compare_fleet, jct_goal, router_ranking
from ttlctl.cli.render import fleet_table
from ttlctl.cli.render.validate_view import _placements


def run_row(
    live_jct: float, sim_jct: float, *, hit: float = 0.6, routed_jct: float | None = None
) -> dict[str, Any]:
    """One live run's row as ``validate --replicas`` writes it."""
    row: dict[str, Any] = {
        "jct_mean_s": live_jct,
        "ttft_mean_s": live_jct / 20,
        "hit_rate": hit,
        "returned_share": 0.5,
        "calls_per_replica": {"r1": 40, "r2": 45},
        "sim_calls_per_replica": {"r1": 42, "r2": 43},
    }
    sim = {
        "jct_mean_s": sim_jct,
        "ttft_mean_s": sim_jct / 20,
        "prefix_hit_rate": 0.5,
        "returned_share": 0.4,
    }
    row["compare"] = compare_fleet(sim, row)
    row["jct_within_10pct"] = jct_goal(row["compare"])
    row["compare_as_routed"] = (
        None if routed_jct is None else compare_fleet({**sim, "jct_mean_s": routed_jct}, row)
    )
    return row


def test_the_runs_of_a_router_become_one_row_on_their_mean() -> None:
    runs = [
        run_row(8.0, 10.0, routed_jct=9.0),
        run_row(10.0, 10.0, routed_jct=9.5),
        run_row(12.0, 10.0, hit=0.9, routed_jct=10.0),
    ]
    row = merge_fleet_runs(runs)
    assert row["jct_mean_s"] == pytest.approx(10.0)
    assert row["live_range"]["jct_mean_s"] == [8.0, 12.0]
    assert row["hit_rate"] == pytest.approx(0.7)
    by = {c["metric"]: c for c in row["compare"]}
    # the simulated 10.0 s against the live mean 10.0 s: 0%, though single runs miss by
    # +25% and −17%
    assert by["jct_mean_s"]["sim"] == 10.0 and by["jct_mean_s"]["error"] == pytest.approx(0.0)
    assert by["jct_mean_s"]["live_range"] == [8.0, 12.0]
    assert by["hit_rate"]["error"] == pytest.approx(-20.0)  # 50% against 70%, in points
    assert row["jct_within_10pct"] is True
    assert row["runs_within_10pct"] == 1  # only the 10.0 s run
    assert [r["jct_mean_s"] for r in row["runs"]] == [8.0, 10.0, 12.0]
    assert row["repeats"] == 3
    routed = {c["metric"]: c for c in row["compare_as_routed"]}
    assert routed["jct_mean_s"]["sim"] == pytest.approx(9.5)
    assert routed["jct_mean_s"]["error"] == pytest.approx(-0.05)
    # a router whose simulated side moves with the fleet's URLs: its simulated mean
    moved = merge_fleet_runs([run_row(10.0, 9.0), run_row(10.0, 12.0)])
    assert moved["compare"][0]["sim"] == pytest.approx(10.5)
    assert moved["compare_as_routed"] is None  # no run had the live placement
    # one run is the run itself
    # one run is its own row (no replica figures in these: none pooled)
    assert merge_fleet_runs(runs[:1]) == {**runs[0], "engines_pooled": None}
    with pytest.raises(ValueError):
        merge_fleet_runs([])


def test_a_router_not_simulated_stays_out_of_the_mean_and_the_ranking() -> None:
    bare = {"jct_mean_s": 5.0, "ttft_mean_s": 0.1, "hit_rate": 0.5, "returned_share": 1.0}
    runs = [{**bare, "compare": compare_fleet(None, bare), "jct_within_10pct": None}] * 2
    row = merge_fleet_runs(runs)
    assert mean_sim(runs) is None and row["jct_within_10pct"] is None
    assert row["runs_within_10pct"] is None


def test_the_goal_is_judged_on_the_means_and_on_each_run() -> None:
    # run 1: a 9.5 / b 20 live, simulated a 10 / b 18 (both within 10%, same order);
    # run 2: a 12.5 live (sim 10: −20%), b 15 live (sim 18: +20%)
    rows = {
        "a": merge_fleet_runs([run_row(9.5, 10.0), run_row(12.5, 10.0)]),
        "b": merge_fleet_runs([run_row(20.0, 18.0), run_row(15.0, 18.0)]),
    }
    ranking = router_ranking({r: mean_sim(row["runs"]) for r, row in rows.items()}, rows)
    assert ranking["live"] == [["a"], ["b"]] and ranking["same"] is True
    # on the means: a 11.0 live against 10.0 (−9.1%), b 17.5 against 18.0 (+2.9%)
    assert goal(rows, ranking) is True
    by_run = run_rankings(rows, 2)
    assert [r["same"] for r in by_run] == [True, True]
    each = [goal({r: row["runs"][k] for r, row in rows.items()}, by_run[k]) for k in range(2)]
    assert each == [True, False]
    # a ranking that differs fails the goal, even within 10%
    swapped = {**ranking, "same": False}
    assert goal(rows, swapped) is False
    # one router: the ranking is not in question
    assert goal({"a": rows["a"]}, {"same": None}) is True


def test_the_table_shows_the_live_range_and_the_goal_per_run() -> None:
    rows = {
        "a": merge_fleet_runs([run_row(9.5, 10.0), run_row(12.5, 10.0)]),
        "b": merge_fleet_runs([run_row(20.0, 18.0), run_row(15.0, 18.0)]),
    }
    ranking = router_ranking({r: mean_sim(row["runs"]) for r, row in rows.items()}, rows)
    by_run = run_rankings(rows, 2)
    doc = {
        "programs": 8,
        "calls": 85,
        "replicas": 2,
        "repeats": 2,
        "rows": {"vllm": rows},
        "ranking": {"vllm": ranking},
        "goal": {
            "vllm": {
                "met": goal(rows, ranking),
                "runs": [
                    goal({r: row["runs"][k] for r, row in rows.items()}, by_run[k])
                    for k in range(2)
                ],
            }
        },
    }

    shipped = resolve("llama-3.1-8b-h100")[0].to_json()

    def terms(a_ms: float, step_ms: float, kv_us: float) -> dict[str, Any]:
        """A whole profile document with these terms."""
        return {**shipped,
                "prefill": {**shipped["prefill"], "a": a_ms / 1e3, "b": 3e-4, "q": 0.0},
                "decode": {"step_s": step_ms / 1e3, "per_seq_s": 1e-3,
                           "per_kv_token_s": kv_us / 1e6}}  # fmt: skip

    doc["profile"] = {
        "source": "pooled over 2 measurements, one in each repeat",
        "doc": terms(12.0, 10.0, 2.0),
        "measurements": [{"doc": terms(10.0, 9.0, 1.0)}, {"doc": terms(20.0, 11.0, 3.0)}],
    }
    console = Console(record=True, width=220)
    fleet_table(console, doc)
    text = console.export_text()
    assert "profile: pooled over 2 measurements" in text
    # what each measurement's own fit predicts, against the pooled profile: a prefill of
    # 1,024 tokens (a + 0.3 ms × 1,024), a decode step of 1 and of 8 sequences
    assert (
        "the 2 measurements, each fitted alone: prefill of 1,024 tokens 317 – 327 ms (pooled "
        "319); decode step of 1 × 1,024 11 – 15.1 ms (pooled 13); of 8 × 512 21.1 – 31.3 ms "
        "(pooled 26.2)"
    ) in text
    assert "2 live runs per" in text and "live (mean)" in text
    assert "11.000 s" in text and "9.500 s – 12.500 s" in text and "-9.1%" in text
    assert (
        "calls per replica r1:40 r2:45 (sim r1:42 r2:43), r1:40 r2:45 (sim r1:42 r2:43); "
        "simulated on the trace's timing, as many calls per replica in 0 of 2 runs"
    ) in text
    assert "single runs within 10%: 1 of 2" in text
    assert "met on the means; on single runs: met in 1 of 2" in text
    assert "priced by the pooled profile" not in text and "own measurement" not in text
    assert "CPU used" not in text  # not read
    # as a saved JSON gives them back (keys sorted), one run without the router's figure
    doc["fleets"] = {
        "vllm": {
            "a": [
                {"cpu_s": {"client": 0.5, "r1": 10.0, "r2": 9.0, "router": 1.0}},
                {"cpu_s": {"client": 0.3, "r1": 12.0, "r2": 9.0, "router": None}},
            ]
        }
    }
    doc["live"] = {"vllm": {"a": [{"wall_s": 20.0}, {"wall_s": 24.0}]}}
    console = Console(record=True, width=220)
    fleet_table(console, doc)
    text = console.export_text()
    assert (
        "CPU used in a live run (mean over 2): r1 11.0 s, r2 9.0 s, router 1.0 s (1 of 2 "
        "runs), client 0.4 s over 22.0 s of wall time"
    ) in text
    # each repeat priced by its own measurement: the goal on the pooled pricing beside it
    doc["profile"]["pricing"] = "per repeat"
    doc["goal"]["vllm"]["pooled_profile"] = {
        "met": False,
        "errors": {"a": -0.15, "b": -0.05},
        "ranking": {"same": False},
    }
    console = Console(record=True, width=300)
    fleet_table(console, doc)
    text = console.export_text()
    assert (
        "met on the means; on single runs: met in 1 of 2; with every run priced by the "
        "pooled profile: NOT met (a -15.0%, b -5.0%; the ranking differs)"
    ) in text
    assert (
        "profile: each repeat's runs priced by that repeat's own measurement; beside it, the "
        "profile pooled over 2 measurements"
    ) in text


def test_a_replica_without_live_calls_counts_0_as_the_simulation_does() -> None:
    """Regression (a walker's find): the live counts left out a replica no call reached
    (``r1:12``) where the simulated ones name it (``r1:12 r2:0``), so identical placements
    read "placed alike in 0 of 1 run"."""
    order = {"p0": ["r1", "r1"], "p1": ["r1"]}
    row = fleet_row({"jct_mean_s": 1.0}, order, ["r1", "r2"])
    assert row["calls_per_replica"] == {"r1": 3, "r2": 0}
    row["sim_calls_per_replica"] = {"r1": 3, "r2": 0}
    console = Console(record=True, width=220)
    console.print(_placements([row]))
    text = console.export_text()
    assert (
        "r1:3 r2:0; simulated on the trace's timing, as many calls per replica in 1 of 1 run"
        in text
    )
