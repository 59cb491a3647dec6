"""The simulated side of ``validate --replicas N --router R``: vllm-router's policies mapped
to ttlctl's router models, the errors against live, the routers' ranking, and the fleet
replays themselves (fast: a few small programs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles.router_calibration import calibrate
from profiles.shipped import resolve
from replay.fit_context import fit_context
from replay.fleet.routers import ROUTERS, RouterSettings
from replay.fleet.routers.consistent_hash import HashRing
from replay.fleet.run import FleetSpec, runner
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.validation.fleet_routers import sim_settings
from replay.validation.fleet_sim import (
    compare_fleet,
    fleet_error,
    jct_goal,
    live_placement,
    router_ranking,
    sim_router,
    simulate_as_routed,
    simulate_fleets,
)
from replay.validation.sim_side import SimSide
from replay.workload import from_frame
from ttlctl.server.router import POLICIES


def _side() -> SimSide:
    """Two small replicas priced by the tiny CPU profile, every router on its defaults."""
    engine = SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048)
    return SimSide(replicas=2, profile=resolve("tiny-cpu")[0], engine=engine, timing=Load())


def test_every_vllm_router_policy_has_its_model() -> None:
    for policy in POLICIES:
        name, why = sim_router(policy)
        assert why is None and name in ROUTERS and name.replace("-", "_") == policy


def test_program_scheduling_is_simulated_only_where_its_model_exists() -> None:
    assert sim_router("program_scheduling", ("round-robin",)) == (
        None,
        "not simulated: no 'program-scheduling' router model in this ttlctl",
    )
    assert sim_router("program_scheduling", (*ROUTERS, "program-scheduling")) == (
        "program-scheduling",
        None,
    )
    name, why = sim_router("least_cost")
    assert name is None and why is not None and "least_cost" in why


def test_errors_relative_and_in_points() -> None:
    assert fleet_error("relative", 11.0, 10.0) == pytest.approx(0.1)
    assert fleet_error("relative", 9.0, 10.0) == pytest.approx(-0.1)
    assert fleet_error("relative", 1.0, 0.0) is None
    assert fleet_error("points", 0.30, 0.25) == pytest.approx(5.0)
    assert fleet_error("points", None, 0.25) is None
    assert fleet_error("relative", 1.0, None) is None


def test_compare_reads_each_side_under_its_own_name() -> None:
    live = {"jct_mean_s": 20.0, "ttft_mean_s": 2.0, "hit_rate": 0.5, "returned_share": 1.0}
    sim = {"jct_mean_s": 21.0, "ttft_mean_s": 1.5, "prefix_hit_rate": 0.4, "returned_share": 0.5}
    rows = {r["metric"]: r for r in compare_fleet(sim, live)}
    assert rows["jct_mean_s"]["error"] == pytest.approx(0.05)
    assert rows["ttft_mean_s"]["error"] == pytest.approx(-0.25)
    assert rows["hit_rate"]["sim"] == 0.4 and rows["hit_rate"]["error"] == pytest.approx(-10.0)
    assert rows["returned_share"]["error"] == pytest.approx(-50.0)
    assert jct_goal(list(rows.values())) is True
    none = compare_fleet(None, live)
    assert all(r["sim"] is None and r["error"] is None for r in none)
    assert jct_goal(none) is None
    assert jct_goal(compare_fleet({**sim, "jct_mean_s": 25.0}, live)) is False


def test_ranking_over_the_routers_both_sides_have() -> None:
    live = {"a": {"jct_mean_s": 10.0}, "b": {"jct_mean_s": 20.0}, "c": {"jct_mean_s": 5.0}}
    agree = router_ranking({"a": {"jct_mean_s": 11.0}, "b": {"jct_mean_s": 19.0}, "c": None}, live)
    assert agree["routers"] == ["a", "b"]
    assert agree["sim"] == [["a"], ["b"]] and agree["live"] == [["a"], ["b"]]
    assert agree["same"] is True
    differ = router_ranking({"a": {"jct_mean_s": 30.0}, "b": {"jct_mean_s": 19.0}}, live)
    assert differ["sim"] == [["b"], ["a"]] and differ["same"] is False
    # within 2% of each other: a tie, which agrees with any order
    tie = router_ranking({"a": {"jct_mean_s": 19.9}, "b": {"jct_mean_s": 20.0}}, live)
    assert tie["sim"] == [["a", "b"]] and tie["same"] is True
    alone = router_ranking({"a": {"jct_mean_s": 1.0}, "b": None}, live)
    assert alone["routers"] == ["a"] and alone["same"] is None


def test_simulated_fleets_route_as_their_routers() -> None:
    work = from_frame(fit_context(synth("swe-bench", 6, 0), 1900))
    routers = ["consistent_hash", "round_robin", "program_scheduling"]
    sim, notes = simulate_fleets(work, _side(), policies=["vllm"], routers=routers)
    hashed, rr = sim["vllm"]["consistent_hash"], sim["vllm"]["round_robin"]
    assert hashed is not None and rr is not None
    for r in (hashed, rr):
        assert r["replicas"] == 2 and r["llm_calls"] == work.calls
    assert hashed["returned_share"] == 1.0  # a program's calls hash to one replica
    assert rr["returned_share"] is not None and rr["returned_share"] < 0.75
    if "program-scheduling" in ROUTERS:
        assert sim["vllm"]["program_scheduling"] is not None and not notes
    else:
        assert sim["vllm"]["program_scheduling"] is None
        assert "program-scheduling" in notes["program_scheduling"]
    again, _ = simulate_fleets(work, _side(), policies=["vllm"], routers=routers)
    assert again == sim  # deterministic for a seed


def test_a_prompt_past_the_servers_length_is_clipped_not_refused() -> None:
    """The simulated replicas are as long as the live ones: a longer prompt is clipped to
    fit, as the live client clips it, and every call is still simulated."""
    work = from_frame(fit_context(synth("swe-bench", 2, 0), 1900))
    side = _side()
    short = replace(side, engine=replace(side.engine, max_model_len=1024))
    assert max(c.input_tokens for p in work.programs for c in p.calls) > 1024
    sim, _ = simulate_fleets(work, short, policies=["vllm"], routers=["round_robin"])
    result = sim["vllm"]["round_robin"]
    assert result is not None and result["llm_calls"] == work.calls


def test_async_scheduling_reaches_every_simulated_replica() -> None:
    """validate --replicas --async-scheduling: each simulated replica schedules a step
    ahead, as the fleet replay's --async-scheduling does (the same figures)."""
    work = from_frame(fit_context(synth("swe-bench", 6, 0), 1900))
    side = _side()
    ahead = replace(side, async_scheduling=True)
    assert ahead.config().async_scheduling and not side.config().async_scheduling
    sync, _ = simulate_fleets(work, side, policies=["vllm"], routers=["round_robin"])
    sim, _ = simulate_fleets(work, ahead, policies=["vllm"], routers=["round_robin"])
    stepped = sim["vllm"]["round_robin"]
    assert stepped is not None and stepped != sync["vllm"]["round_robin"]
    replay = runner(FleetSpec(2, RouterSettings("round-robin")))
    config = ReplayConfig(engine=side.engine, truncate=True, async_scheduling=True)
    alike = replay(work, side.spec("vllm"), side.cost(), config, side.timing, timed=False)
    assert alike["jct_mean_s"] == stepped["jct_mean_s"]
    assert alike["per_replica"] == stepped["per_replica"]


def test_the_live_placement_replayed_as_routed() -> None:
    work = from_frame(fit_context(synth("swe-bench", 4, 0), 1900))
    first, *rest = work.programs
    # the first program's calls alternate between replicas, the others stay on r2
    order = {first.program_id: [("r1", "r2")[i % 2] for i in range(len(first.calls))]}
    order.update({p.program_id: ["r2"] * len(p.calls) for p in rest})
    logged = live_placement(work, order)
    assert logged is not None and len(logged) == work.calls
    assert logged[(first.program_id, 1)] == "r2" and logged[(first.program_id, 0)] == "r1"
    short = {**order, first.program_id: order[first.program_id][:-1]}
    assert live_placement(work, short) is None  # a call the arrivals did not name
    result = simulate_as_routed(work, _side(), policy="vllm", logged=logged)
    per = {r["replica"]: r["llm_calls"] for r in result["per_replica"]}
    on_r1 = (len(first.calls) + 1) // 2
    assert sorted(per.values()) == sorted([on_r1, work.calls - on_r1])
    follow_ups = work.calls - len(work.programs)
    returned = follow_ups - (len(first.calls) - 1)
    assert result["returned_share"] == pytest.approx(returned / follow_ups)


def test_simulated_program_scheduling_is_set_as_the_live_router() -> None:
    assert sim_settings(["round_robin"], None, None) == {}
    reference = sim_settings(["program_scheduling"], None, None)["program_scheduling"]
    assert reference.name == "program-scheduling"
    assert reference.resolved()["calibration"] == "reference"
    assert reference.resolved()["program_scheduling_enable_key"] == "auto"
    cal = calibrate(resolve("tiny-cpu")[0])
    calibrated = sim_settings(["program_scheduling"], cal, None)["program_scheduling"]
    assert calibrated.resolved()["calibration"] == "profile"
    assert calibrated.program_scheduling()[1]  # the profile's calibration objects, as live


@pytest.mark.skipif("program-scheduling" not in ROUTERS, reason="no Program scheduling model")
def test_the_simulated_router_runs_on_the_settings_the_live_one_had() -> None:
    """The side's settings for a live router reach its model (here the reference
    calibration, where the model's own default is the profile's)."""
    work = from_frame(fit_context(synth("swe-bench", 2, 0), 1900))
    side = replace(_side(), settings=sim_settings(["program_scheduling"], None, None))
    sim, _ = simulate_fleets(work, side, policies=["vllm"], routers=["program_scheduling"])
    result = sim["vllm"]["program_scheduling"]
    assert result is not None
    assert result["router"]["settings"]["calibration"] == "reference"
    default, _ = simulate_fleets(work, _side(), policies=["vllm"], routers=["program_scheduling"])
    assert default["vllm"]["program_scheduling"]["router"]["settings"]["calibration"] == "profile"


def test_the_simulated_fleet_places_programs_by_the_live_replicas_urls() -> None:
    """Each live fleet has ports of its own; the simulated fleet beside it hashes the same
    URLs, so consistent_hash and Program scheduling's binding place every program on the
    replica the live router chose (:class:`HashRing` over those URLs)."""
    work = from_frame(fit_context(synth("swe-bench", 8, 0), 1900))
    side = _side()
    routers = ["consistent_hash", "program_scheduling"]
    # two port draws that split these 8 programs differently
    draws = [
        ("http://127.0.0.1:41001", "http://127.0.0.1:41002"),
        ("http://127.0.0.1:52113", "http://127.0.0.1:40877"),
    ]
    splits = []
    for urls in draws:
        ring = HashRing(urls)
        owners = [ring.owner(p.program_id) for p in work.programs]
        calls = [sum(len(p.calls) for p, o in zip(work.programs, owners, strict=True) if o == r)
                 for r in range(2)]  # fmt: skip
        given = {"vllm": {"consistent_hash": urls, "program_scheduling": urls}}
        sim, _ = simulate_fleets(work, side, policies=["vllm"], routers=routers, worker_urls=given)
        for router in ("consistent_hash", "program_scheduling"):
            result = sim["vllm"][router]
            assert result is not None and result["router"]["worker_urls"] == list(urls)
            per = {r["replica"]: r["llm_calls"] for r in result["per_replica"]}
            assert [per[0], per[1]] == calls, router
        splits.append(calls)
    assert splits[0] != splits[1]  # the URLs, not the simulator, decide the placement
    default, _ = simulate_fleets(work, side, policies=["vllm"], routers=routers)
    assert default["vllm"]["consistent_hash"] is not None
    assert "worker_urls" not in default["vllm"]["consistent_hash"]["router"]
