"""``validate --replicas``'s table: each router's figures simulated beside live, the
routers' ranking on both sides, and why a router was not simulated."""

from __future__ import annotations

from rich.console import Console

from replay.validation.fleet_sim import compare_fleet, router_ranking
from ttlctl.cli.render import fleet_table


def test_fleet_table_shows_sim_live_error_and_ranking() -> None:
    live = {
        "consistent_hash": {
            "jct_mean_s": 20.0,
            "ttft_mean_s": 1.0,
            "hit_rate": 0.6,
            "returned_share": 1.0,
            "calls_per_replica": {"r1": 5, "r2": 7},
        },
        "program_scheduling": {
            "jct_mean_s": 18.0,
            "ttft_mean_s": 0.9,
            "hit_rate": 0.62,
            "returned_share": 1.0,
            "calls_per_replica": {"r1": 6, "r2": 6},
        },
    }
    sim = {
        "consistent_hash": {
            "jct_mean_s": 22.0,
            "ttft_mean_s": 1.0,
            "prefix_hit_rate": 0.5,
            "returned_share": 1.0,
        },
        "program_scheduling": None,
    }
    for router, row in live.items():
        row["compare"] = compare_fleet(sim[router], row)  # type: ignore[assignment]
    live["program_scheduling"]["sim_note"] = "not simulated: no model"  # type: ignore[assignment]
    live["consistent_hash"]["compare_as_routed"] = compare_fleet(  # type: ignore[assignment]
        {**sim["consistent_hash"], "jct_mean_s": 19.0}, live["consistent_hash"]
    )
    doc = {
        "programs": 4,
        "calls": 12,
        "replicas": 2,
        "rows": {"vllm": live},
        "ranking": {"vllm": router_ranking(sim, live)},
    }
    console = Console(record=True, width=200)
    fleet_table(console, doc)
    text = console.export_text()
    assert "22.000 s" in text and "20.000 s" in text and "+10.0%" in text
    assert "-10.0 pt" in text  # hit rate 50% simulated against 60% live
    assert "simulated consistent_hash; live consistent_hash (not compared)" in text
    assert "program_scheduling: calls per replica r1:6 r2:6; not simulated: no model" in text
    assert "r1:5 r2:7; simulated with the live placement: mean JCT 19.000 s (-5.0%)" in text
    assert "pinned" not in text and "profile:" not in text
    pinned = {**doc, "cpu_sets": [[0], [1]], "profile": {"source": "measured, pinned"}}
    console = Console(record=True, width=200)
    fleet_table(console, pinned)
    text = console.export_text()
    assert "replicas pinned to CPUs 0 | 1" in text and "profile: measured, pinned" in text
    assert "GPUs" not in text
    console = Console(record=True, width=200)
    fleet_table(console, {**doc, "gpu_sets": [["0", "1"], ["GPU-2c3d", "3"]]})
    assert "replicas on GPUs 0,1 | GPU-2c3d,3" in console.export_text()


def test_fleet_table_shows_the_engines_own_steps_and_ttft() -> None:
    live = {
        "jct_mean_s": 10.0,
        "ttft_mean_s": 0.4,
        "hit_rate": 0.6,
        "returned_share": 1.0,
        "calls_per_replica": {"r1": 40, "r2": 45},
    }
    sim = {"jct_mean_s": 9.0, "ttft_mean_s": 0.3, "prefix_hit_rate": 0.6, "returned_share": 1.0}
    live["compare"] = compare_fleet(sim, live)  # type: ignore[assignment]
    live["engines_pooled"] = {  # type: ignore[assignment]
        "runs": 3,
        "engine_steps": {"live": 1288, "sim": 1287, "error": -1 / 1288},
        "ttft_mean_s": {"live": 0.379, "sim": 0.309, "error": 0.309 / 0.379 - 1},
    }
    doc = {
        "programs": 8,
        "calls": 85,
        "replicas": 2,
        "rows": {"vllm": {"cache_aware": live}},
        "ranking": {"vllm": router_ranking({"cache_aware": sim}, {"cache_aware": live})},
    }
    console = Console(record=True, width=250)
    fleet_table(console, doc)
    text = console.export_text()
    assert (
        "engines over 3 runs (their /metrics; simulated on the live placement): steps 1,288 "
        "live, 1,287 simulated (-0.1%); TTFT at the replica 0.379 s live, 0.309 s simulated "
        "(-18.5%)"
    ) in text
    assert "queued" not in text  # no engine-core times in these figures
    live["engines_pooled"] |= {  # type: ignore[operator]
        "queue_mean_s": {"live": 0.02, "sim": 0.015, "error": -0.25},
        "prefill_mean_s": {"live": 0.25, "sim": 0.2, "error": -0.2},
        "decode_mean_s": {"live": 0.5, "sim": 0.45, "error": -0.1},
        "steps_comparable": False,
    }
    console = Console(record=True, width=600)
    fleet_table(console, doc)
    text = console.export_text()
    assert "steps 1,288 live, 1,287 simulated (not compared: prompts longer than" in text
    assert (
        "; on the engine core's clock: queued 0.020 s live, 0.015 s simulated (-25.0%), "
        "scheduled to first token 0.250 s live, 0.200 s simulated (-20.0%), "
        "first token to last 0.500 s live, 0.450 s simulated (-10.0%)"
    ) in text
    # nothing queued on either side (the live mean 22 µs): no relative error of it
    live["engines_pooled"]["queue_mean_s"] = {"live": 2.2e-5, "sim": 0.0, "error": -1.0}  # type: ignore[index]
    console = Console(record=True, width=600)
    fleet_table(console, doc)
    assert "queued 0.000 s live, 0.000 s simulated (—)" in console.export_text()
    live["engines_pooled"]["queue_mean_s"] = {"live": 2.1e-5, "sim": 0.011, "error": 535.0}  # type: ignore[index]
    console = Console(record=True, width=600)
    fleet_table(console, doc)
    assert "queued 0.000 s live, 0.011 s simulated (+11.0 ms)" in console.export_text()
    live["engines_pooled"] = None  # type: ignore[assignment]
    console = Console(record=True, width=250)
    fleet_table(console, doc)
    assert "engines over" not in console.export_text()
