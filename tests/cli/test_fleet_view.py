"""``replay --replicas N``'s per-replica table at any fleet size: every replica up to
``MAX_REPLICA_ROWS``; past that the busiest and the least busy of those that served calls,
and a count of the rest. Regression: a 10,000-replica replay printed a 10,000-row table
(9,936 rows of zeros)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from replay.fleet.records import MAX_REPLICA_ROWS, shown_phrase, shown_replicas
from replay.fleet.routers import RouterSettings
from tests.cli.fleet_result import fleet_result
from ttlctl.cli import app
from ttlctl.cli.render.fleet_view import (
    SETTINGS_PHRASE_MAX,
    fleet_tables,
    router_settings,
)


def _replicas(busy: list[float]) -> list[dict[str, float]]:
    return [{"engine_busy_s": b, "llm_calls": 1 if b else 0} for b in busy]


def test_a_small_fleet_shows_every_replica_in_order() -> None:
    busy = [3.0, 0.0, 5.0] + [1.0] * (MAX_REPLICA_ROWS - 3)
    assert shown_replicas(_replicas(busy)) == list(range(MAX_REPLICA_ROWS))


def test_a_large_fleet_shows_its_busiest_and_least_busy() -> None:
    busy = [float(i % 50) for i in range(1000)]  # 20 idle (busy 0), 980 that served
    rows = shown_replicas(_replicas(busy))
    half = MAX_REPLICA_ROWS // 2
    assert len(rows) == MAX_REPLICA_ROWS + 2
    assert rows[half] == f"… {980 - MAX_REPLICA_ROWS:,} more"
    assert rows[-1] == "… 20 served no call"
    top, bottom = rows[:half], rows[half + 1 : -1]
    assert [busy[i] for i in top] == [49.0] * half  # the busiest, ties by index
    assert top == sorted(top) and top[0] == 49
    assert [busy[i] for i in bottom] == [1.0] * half  # the least busy that served calls


def test_a_large_fleet_of_few_busy_replicas_lists_those_and_counts_the_idle() -> None:
    busy = [0.0] * 100
    busy[7], busy[3] = 2.0, 9.0
    assert shown_replicas(_replicas(busy)) == [3, 7, "… 98 served no call"]


def test_the_cli_table_of_a_largefleet_result(tmp_path: Path) -> None:
    trace, out = tmp_path / "t.parquet", tmp_path / "replay.json"
    runner = CliRunner()
    res = runner.invoke(app, ["synth", "--workload", "bfcl", "--programs", "40", "-o", str(trace)])
    assert res.exit_code == 0, res.output
    replicas = MAX_REPLICA_ROWS + 76
    args = ["replay", str(trace), "--profile", "llama-3.1-8b-h100", "--policy", "vllm"]
    args += ["--replicas", str(replicas), "--router", "consistent-hash", "--concurrency", "40"]
    res = runner.invoke(app, [*args, "--no-timing", "--json", str(out)], terminal_width=200)
    assert res.exit_code == 0, res.output
    (result,) = json.loads(out.read_text())["results"]
    served = sum(1 for p in result["per_replica"] if p["llm_calls"])
    assert MAX_REPLICA_ROWS < served < replicas  # 40 programs hashed over 100 replicas
    text = res.output
    assert (
        f"per replica: of {replicas}, the 12 busiest and the 12 least busy of those that "
        "served calls, the rest counted (--json has each one)"
    ) in text
    assert f"… {replicas - served} served no call" in text
    assert f"… {served - MAX_REPLICA_ROWS} more" in text
    table = text[text.index("per replica") :]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == MAX_REPLICA_ROWS + 2


def test_one_replica_over_the_rows_is_listed_not_counted() -> None:
    """A line counting one replica would save no row: 25 replicas that served calls are
    all listed (busiest first), and the tables' titles say so."""
    per = _replicas([float(b) for b in range(1, MAX_REPLICA_ROWS + 2)])
    rows = shown_replicas(per)
    assert rows == list(range(MAX_REPLICA_ROWS, -1, -1))
    assert shown_phrase(per) == "of 25, busiest first"
    per.append({"engine_busy_s": 0.0, "llm_calls": 0})
    assert shown_replicas(per)[-1] == "… 1 served no call"  # the idle one is counted
    assert shown_phrase(per) == "of 26, those that served calls, busiest first, the rest counted"
    assert shown_phrase(per[:MAX_REPLICA_ROWS]) == ""  # every replica, in order


def test_a_large_fleet_of_few_busy_replicas_is_titled_as_it_is_shown() -> None:
    """30 replicas of which 12 served calls: the table lists those 12 and counts the 18
    idle, and the line under it says so. Regression: its title read "the busiest and the
    least busy of 30 that served calls", a count of replicas that had not, and a selection
    of the busy that was none."""
    busy = [0.0] * 30
    for i in range(12):
        busy[2 * i] = 0.3 + i / 10  # replica 22 the busiest: 1.4 s
    console = Console(record=True, width=200)
    fleet_tables(console, [fleet_result("vllm", _replicas(busy))])
    text = console.export_text()
    assert (
        "per replica: of 30, those that served calls, busiest first, the rest counted "
        "(--json has each one)"
    ) in text
    table = text[text.index("per replica") :].splitlines()
    rows = [line.split("│")[2:4] for line in table if line.startswith("│")]
    assert len(rows) == 13
    assert [r[0].strip() for r in rows[:2]] == ["22", "20"] and rows[0][1].strip() == "1"
    assert rows[-1][0].strip() == "… 18 served no call"
    # engine-busy seconds with a decimal: a short replay's replicas do not all read 0 or 1
    assert "│             1.4 │" in text and "│             0.3 │" in text


def test_a_long_settings_phrase_names_only_what_differs_from_the_routers_defaults() -> None:
    """Program scheduling's two dozen settings made a 900-character title: past the limit
    the title names the settings that differ from the router's defaults, and says the rest
    are at them; a short phrase (cache-aware's three) still names every value."""
    stock = RouterSettings("program-scheduling").resolved()
    phrase = router_settings({"name": "program-scheduling", "settings": stock})
    # the replay's default calibration is the profile's, not the router's reference one:
    # the title says which it ran on, whichever
    assert phrase == "calibration=profile, the rest at the router's defaults; --json has each"
    changed = {**stock, "max_segment_rounds": 3, "calibration": "reference"}
    phrase = router_settings({"name": "program-scheduling", "settings": changed})
    assert phrase.startswith("max_segment_rounds=3, calibration=reference, the rest at")
    assert len(phrase) <= SETTINGS_PHRASE_MAX
    short = RouterSettings("cache-aware", cache_threshold=0.5).resolved()
    assert router_settings({"name": "cache-aware", "settings": short}) == ", ".join(
        f"{k}={v}" for k, v in short.items()
    )
    assert "cache_threshold=0.5" in router_settings({"name": "cache-aware", "settings": short})


def test_the_rows_line_speaks_per_policy_when_the_policies_rows_are_chosen_differently() -> None:
    """One policy whose 30 replicas all served calls (cut to the busiest and least busy)
    beside one whose calls reached 12: one line for both would misstate one of them."""
    cut = fleet_result("vllm", _replicas([1.0 + i / 10 for i in range(30)]))
    few = fleet_result("continuum", _replicas([1.0 if i < 12 else 0.0 for i in range(30)]))
    console = Console(record=True, width=300)
    fleet_tables(console, [cut, few])
    text = console.export_text()
    want_cut, want_few = shown_phrase(cut["per_replica"]), shown_phrase(few["per_replica"])
    assert want_cut != want_few and "12 busiest" in want_cut
    assert f"per replica: vllm: {want_cut}; continuum: {want_few} (--json has each one)" in text
