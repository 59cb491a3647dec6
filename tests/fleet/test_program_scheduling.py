"""``program-scheduling``: vllm-router 0.1.17's Program scheduling (Progress-TTL), its
decisions on hand-made cases against the router's rules (src/program_scheduling/
scheduler_admission.rs, scheduler_lifecycle.rs, policy.rs; docs/program_scheduling.md),
and in a replayed fleet."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from profiles.cost import ConstantCostModel, ProfileCostModel
from profiles.router_calibration import calibrate
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings, make_router
from replay.fleet.routers.base import HOLD, RoutedCall
from replay.fleet.routers.consistent_hash import ConsistentHash
from replay.fleet.routers.furc import fbi_hash
from replay.fleet.routers.program_scheduling import ProgramScheduling
from replay.fleet.routers.progress_ttl import (
    REFERENCE_PREFILL,
    ProgramSchedulingConfig,
    fitted_acting_ttl,
    normal_cdf,
)
from replay.fleet.run import FleetSpec, runner
from replay.policies import PolicySpec
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import Workload, from_frame
from tests.fleet.views import View, waiting
from tests.router_bin import FREE_PORT, router_outputs
from ttlctl import router_flags
from ttlctl.errors import ConfigError
from ttlctl.server.process import free_port


def call(program: str, prompt_tokens: int = 500, turn: int = 0) -> RoutedCall:
    return RoutedCall(program, turn, ((1, prompt_tokens),), prompt_tokens)


def router(replicas: int = 1, **config: Any) -> ProgramScheduling:
    settings = RouterSettings(
        "program-scheduling",
        program_scheduling_config_json=json.dumps(config),
        program_scheduling_calibration="reference",
    )
    r = make_router(settings, replicas, seed=0, block_size=16)
    assert isinstance(r, ProgramScheduling)
    return r


# ---------------------------------------------------------------- policy.rs's maths


def test_the_routers_normal_cdf() -> None:
    for z in (-3.0, -1.0, 0.0, 0.5, 2.0):
        assert normal_cdf(z) == pytest.approx(0.5 * (1 + math.erf(z / math.sqrt(2))), abs=2e-7)


def test_the_acting_ttl_is_zero_until_the_window_is_full() -> None:
    assert fitted_acting_ttl([1.0] * 99, 100, 10.0, 6.0) == 0.0
    assert fitted_acting_ttl([1.0] * 100, 100, 10.0, 6.0) > 0.0


def test_the_acting_ttl_covers_the_tool_calls_when_a_miss_costs_more() -> None:
    # every interval 1 s, a miss costs 6 s: any TTL past 1 s catches every call (utility
    # 6 − 1), and a later candidate wins a tie: the cap, min(max TTL, miss impact)
    assert fitted_acting_ttl([1.0] * 4, 4, 10.0, 6.0) == pytest.approx(6.0)
    assert fitted_acting_ttl([1.0] * 4, 4, 2.0, 6.0) == pytest.approx(2.0)
    # calls come back after 20 s but a miss costs 6 s: waiting never pays
    assert fitted_acting_ttl([20.0] * 4, 4, 10.0, 6.0) == 0.0
    # spread intervals: the best TTL lies between the shortest and the cap
    ttl = fitted_acting_ttl([0.2, 0.5, 1.0, 2.0, 8.0, 30.0], 6, 10.0, 3.0)
    assert 0.2 < ttl <= 3.0


def test_the_cache_miss_impact_is_the_routers() -> None:
    # docs/program_scheduling.md: prefill·(2 − alpha); 50k tokens: 13.93 s of prefill
    assert REFERENCE_PREFILL.cache_miss_impact_seconds(50_000) == pytest.approx(
        13.931349609649255 * 1.85
    )
    assert REFERENCE_PREFILL.cache_miss_impact_seconds(0) == 0.0


# ---------------------------------------------------------------- the router's decisions


def test_a_new_program_binds_by_consistent_hash_as_the_policy_does() -> None:
    r, ring = router(4, admission_waiting_request_threshold=0), ConsistentHash(4)
    view = waiting([0, 0, 0, 0])
    for i in range(20):
        assert r.route(call(f"p{i}"), view, 0.0) == ring.owner(f"p{i}")


def test_program_round_robin_binding_cycles() -> None:
    r = router(3, binding_strategy="program_round_robin", admission_waiting_request_threshold=0)
    view = waiting([0, 0, 0])
    assert [r.route(call(f"p{i}"), view, 0.0) for i in range(5)] == [0, 1, 2, 0, 1]


def test_the_waiting_gate_retains_a_call_until_a_poll_sees_the_engine_drained() -> None:
    r, view = router(1), waiting([1])  # threshold 1: one waiting request closes the rank
    assert r.route(call("a"), view, 0.2) == HOLD
    assert r.next_wake(0.2) == 1.0  # the next metrics poll
    view.waiting[0] = 0
    r.tick(0.6, view)  # no poll since 0.2: the router still sees 1 waiting
    assert r.released() == []
    r.tick(1.0, view)
    assert r.released() == [("a", 0)]
    assert r.next_wake(1.0) is None


def test_force_resume_passes_the_count_gate_after_its_timeout() -> None:
    """Past its force-resume deadline a call passes the count (and token) gates
    (scheduler_admission.rs ``rank_admission_plan``: ``forced``)."""
    r = router(1, force_resume_timeout_seconds=5.0, max_active_programs_per_target=1)
    view = waiting([0])
    assert r.route(call("x"), view, 0.0) == 0  # x active: the count gate is closed
    assert r.route(call("a"), view, 0.0) == HOLD
    assert r.next_wake(4.5) == 5.0
    r.tick(4.0, view)
    assert r.released() == []
    r.tick(5.0, view)
    assert r.released() == [("a", 0)]


def test_the_next_metrics_tick_is_after_now_at_every_tick() -> None:
    """Regression: at a tick that ``now / interval`` rounds below (4.3 / 0.1 is 42.99…) the
    router asked to wake at that same instant, and a replay at a 0.1 s interval never
    ended. Each tick's successor is the next tick, and a poll happens at each."""
    for interval in (0.1, 0.3, 0.001, 1.0, 0.7):
        # retained throughout: no force-resume deadline within the ticks asked
        late = {"force_resume_timeout_seconds": 1e6, "queue_timeout_seconds": 1e6}
        r, view = router(1, metrics_interval_seconds=interval, **late), waiting([1])
        assert r.route(call("a"), view, 0.0) == HOLD
        for k in range(0, 2000, 7):
            at = k * interval
            wake = r.next_wake(at)
            assert wake is not None and at < wake <= at + interval * (1 + 1e-9), (interval, k)
        polls = r._tick_index(0.0)
        for k in range(1, 200):
            r.tick(k * interval, view)  # a poll at each tick: none is read as the one before
            assert r._poll == polls + k, (interval, k)


def test_a_metrics_interval_below_the_models_floor_is_refused() -> None:
    """vllm-router takes any positive interval; the model runs each tick as an event while
    calls are retained, so it refuses intervals under 1 ms, naming the field (one line)."""
    for tiny in (1e-320, 0.0005):
        with pytest.raises(ConfigError) as caught:
            router(1, metrics_interval_seconds=tiny)
        message = str(caught.value)
        assert "metrics_interval_seconds below 0.001 is not modelled" in message
        assert "vllm-router takes it" in message and "\n" not in message
    assert router(1, metrics_interval_seconds=0.001).config.metrics_interval_seconds == 0.001


LONG = 40_000


def test_an_acting_program_continues_and_others_wait_for_its_ttl() -> None:
    # one active program per rank; a full window of 2 s intervals gives a TTL when a
    # miss costs more (40k tokens: 17 s at the router's reference coefficients)
    r = router(1, max_active_programs_per_target=1, stats_window_size=2,
               admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    assert r.route(call("a", LONG, turn=0), view, 0.0) == 0
    r.completed(0, call("a", LONG, turn=0), 1.0)  # TTL 0 (no intervals yet): paused at once
    assert r.route(call("b", LONG), view, 1.5) == 0  # the rank is free
    r.completed(0, call("b", LONG), 2.0)
    assert r.route(call("a", LONG, turn=1), view, 3.0) == 0  # interval 2 s (a's)
    r.completed(0, call("a", LONG, turn=1), 4.0)
    assert r.route(call("b", LONG, turn=1), view, 4.0) == 0  # b paused: admitted, interval 2 s
    r.completed(0, call("b", LONG, turn=1), 5.0)
    ttl = r.acting_ttl_s(0, LONG)
    assert ttl == pytest.approx(10.0)  # window full: the cap (max_acting_ttl_seconds)
    # b acts until 5 + ttl: a, paused, waits for it; b's own next call goes straight on
    assert r.route(call("a", LONG, turn=2), view, 6.0) == HOLD
    assert r.route(call("b", LONG, turn=2), view, 6.5) == 0
    r.completed(0, call("b", LONG, turn=2), 7.0)
    deadline = 7.0 + r.acting_ttl_s(0, LONG)
    r.tick(math.floor(deadline) - 1.0, view)
    assert r.released() == []
    r.tick(math.ceil(deadline), view)  # the first tick past b's TTL pauses b: a goes
    assert r.released() == [("a", 0)]


def test_token_capacity_admits_what_fits_under_the_low_watermark() -> None:
    r = router(1, token_capacity_per_target=1_000, decode_buffer_tokens=100,
               admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    assert r.route(call("a", 450), view, 0.0) == 0  # 550 of 1000
    assert r.route(call("b", 450), view, 0.0) == HOLD  # 550 + 550 > 1000
    assert r.route(call("c", 300), view, 0.0) == 0  # 550 + 400 fits: no head-of-line block
    r.completed(0, call("a", 450), 2.0)  # TTL 0: paused, 550 released
    assert r.released() == [("b", 0)]


@pytest.mark.parametrize(("order", "first"), [("mru", "a"), ("fcfs", "b")])
def test_resume_order(order: str, first: str) -> None:
    r = router(1, resume_order=order, max_active_programs_per_target=1,
               admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    assert r.route(call("b"), view, 0.0) == 0
    r.completed(0, call("b"), 1.0)
    assert r.route(call("a"), view, 1.0) == 0
    r.completed(0, call("a"), 2.0)  # a finished last
    assert r.route(call("x"), view, 2.0) == 0  # x holds the rank
    assert r.route(call("b", turn=1), view, 3.0) == HOLD  # b queued first
    assert r.route(call("a", turn=1), view, 4.0) == HOLD
    r.completed(0, call("x"), 5.0)
    assert r.released() == [(first, 0)]


def test_binding_only_never_retains() -> None:
    r, view = router(2, binding_only=True), waiting([5, 5])
    assert all(r.route(call(f"p{i}"), view, 0.0) != HOLD for i in range(10))


def test_config_refusals_name_the_field() -> None:
    cases = {
        '{"global_queue": true}': "global_queue true",
        '{"program_scheduling_enable_key": "vllm_xargs.agentic_context"}': "must be auto",
        '{"program_scheduling_enable_key": "header"}': "takes auto or vllm_xargs.* not 'header'",
        '{"stats_window_size": "a"}': "stats_window_size must be a whole number .*, got 'a'",
        '{"stats_window_size": true}': "stats_window_size must be a whole number .*, got True",
        '{"stats_window_size": 0}': "stats_window_size must be a whole number from 1 to .*, got 0",
        # a count is a whole number, as the router's unsigned fields are (3.5 used to reach
        # the hash ring's range() as a TypeError; 1.5 windows were taken)
        '{"hash_virtual_nodes": 3.5}': "hash_virtual_nodes must be a whole .* 4294967295, got 3.5",
        '{"stats_window_size": 1.5}': "stats_window_size must be a whole number .*, got 1.5",
        '{"max_active_programs_per_target": 2.0}': "max_active_programs_per_target must be a whole",
        '{"max_segment_rounds": 1.5}': "max_segment_rounds must be a whole number",
        # a calibration model that is not an object is refused where the config is read
        '{"prefill_cost_model": 5}': "prefill_cost_model takes a JSON object",
        '{"decode_throughput_model": [1]}': "decode_throughput_model takes a JSON object",
        # a mistyped field is named, not a Python TypeError, and a string is no switch
        '{"max_acting_ttl_seconds": "a"}': "max_acting_ttl_seconds takes a number, got 'a'",
        '{"low_watermark_ratio": "a"}': "low_watermark_ratio takes a number, got 'a'",
        '{"high_watermark_ratio": null}': "high_watermark_ratio takes a number, got None",
        '{"binding_only": "false"}': "binding_only takes true or false, got 'false'",
        '{"global_queue": "false"}': "global_queue takes true or false, got 'false'",
        '{"enable_batch_gain_admission": 0}': "enable_batch_gain_admission takes true or false",
        '{"decode_buffer_tokens": true}': "decode_buffer_tokens must be a whole number",
        '{"token_capacity_per_target": true}': "token_capacity_per_target must be null or a whole",
        '{"max_acting_ttl": 3}': "unknown field 'max_acting_ttl'",
        '{"binding_strategy": "cache_aware"}': "not modelled",
        '{"low_watermark_ratio": 1.2}': "low_watermark_ratio",
        "[1]": "takes a JSON object",
        "{": "not JSON",
    }
    for text, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            RouterSettings("program-scheduling", program_scheduling_config_json=text)
    with pytest.raises(ConfigError, match="takes profile or reference"):
        RouterSettings("program-scheduling", program_scheduling_calibration="gpu")
    with pytest.raises(ConfigError, match="the cache-aware router does not take it"):
        RouterSettings("cache-aware", program_scheduling_config_json="{}")
    assert ProgramSchedulingConfig().to_json()["max_acting_ttl_seconds"] == 10.0


#: each field at and just past its bounds, and whether the installed vllm-router 0.1.17
#: starts with it (True) or refuses it at start (False), as seen on the binary; the last
#: item is what ttlctl's refusal names
ROUTER_VERDICTS: list[tuple[dict[str, Any], bool, str]] = [
    ({"cross_rank_headroom_ratio": -5}, False, "cross_rank_headroom_ratio must be ≥ 1"),
    ({"cross_rank_headroom_ratio": 0.99}, False, "cross_rank_headroom_ratio must be ≥ 1"),
    ({"cross_rank_headroom_ratio": 1}, True, ""),
    ({"cross_rank_headroom_ratio": 1e300}, True, ""),
    ({"metrics_interval_seconds": 0}, False, "metrics_interval_seconds must be > 0"),
    ({"metrics_interval_seconds": 0.001}, True, ""),
    ({"queue_timeout_seconds": 0}, False, "queue_timeout_seconds must be > 0"),
    ({"queue_timeout_seconds": 300}, True, ""),
    ({"queue_timeout_seconds": 299}, False, "must not exceed queue_timeout_seconds, got 300"),
    ({"force_resume_timeout_seconds": 0}, False, "force_resume_timeout_seconds must be > 0"),
    ({"force_resume_timeout_seconds": 600}, True, ""),
    ({"force_resume_timeout_seconds": 600.5}, False, "must not exceed queue_timeout_seconds"),
    ({"paused_retention_ttl_seconds": -1}, False, "paused_retention_ttl_seconds must be > 0"),
    ({"paused_retention_ttl_seconds": 0}, False, "paused_retention_ttl_seconds must be > 0"),
    ({"paused_retention_ttl_seconds": 0.5}, True, ""),
    ({"shared_prefix_freshness_warmup_seconds": -1}, False, "warmup_seconds must be ≥ 0"),
    ({"shared_prefix_freshness_warmup_seconds": 0}, True, ""),
    ({"shared_prefix_freshness_kv_turnovers": 0}, False, "kv_turnovers must be > 0"),
    ({"shared_prefix_freshness_kv_turnovers": 0.5}, True, ""),
    ({"max_acting_ttl_seconds": -1}, False, "max_acting_ttl_seconds must be ≥ 0"),
    ({"max_acting_ttl_seconds": 0}, True, ""),
    ({"max_acting_ttl_seconds": 10**400}, False, "max_acting_ttl_seconds is out of range"),
    ({"high_watermark_ratio": 1.0001}, False, "0 < low_watermark_ratio ≤ high_watermark_ratio ≤ 1"),
    ({"high_watermark_ratio": 0.5}, False, "got low 1.0, high 0.5"),
    ({"high_watermark_ratio": 0.7, "low_watermark_ratio": 0.5}, True, ""),
    ({"low_watermark_ratio": 0}, False, "0 < low_watermark_ratio"),
    ({"low_watermark_ratio": 1e-300}, True, ""),
    ({"hash_virtual_nodes": 0}, False, "hash_virtual_nodes must be a whole number from 1"),
    ({"hash_virtual_nodes": 2**32 - 1}, True, ""),
    ({"hash_virtual_nodes": 2**32}, False, "hash_virtual_nodes must be a whole number"),
    ({"hash_virtual_nodes": 2.0}, False, "hash_virtual_nodes must be a whole number"),
    ({"max_active_programs_per_target": 0}, True, ""),
    ({"max_active_programs_per_target": 2**64 - 1}, True, ""),
    ({"max_active_programs_per_target": 2**64}, False, "max_active_programs_per_target must"),
    ({"stats_window_size": 0}, False, "stats_window_size must be a whole number from 1"),
    ({"max_segment_rounds": 0}, False, "max_segment_rounds must be a whole number from 1"),
    ({"admission_waiting_request_threshold": 0}, True, ""),
    ({"admission_waiting_request_threshold": -1}, False, "threshold must be a whole number"),
    ({"decode_buffer_tokens": 0}, True, ""),
    ({"decode_buffer_tokens": -1}, False, "decode_buffer_tokens must be a whole number"),
    ({"token_capacity_per_target": 0}, False, "token_capacity_per_target must be null or"),
    ({"token_capacity_per_target": None}, True, ""),
    ({"token_capacity_per_target": 1}, True, ""),
    ({"token_capacity_per_target": 1.5}, False, "token_capacity_per_target must be null or"),
    ({"token_capacity_per_dp_rank": 100}, True, ""),
    (
        {"token_capacity_per_target": 100, "token_capacity_per_dp_rank": 100},
        False,
        "are one field",
    ),
    ({"resume_order": "lru"}, False, "resume_order takes mru or fcfs, not 'lru'"),
    ({"resume_order": "fcfs"}, True, ""),
    ({"binding_strategy": "random"}, False, "binding_strategy takes consistent_hash, "),
    ({"program_scheduling_enable_key": "off"}, False, "program_scheduling_enable_key takes"),
    ({"prefill_cost_model": {"decode_throughput_alpha": 1}}, True, ""),
    (
        {"prefill_cost_model": {"decode_throughput_alpha": 1.01}},
        False,
        "prefill_cost_model.decode_throughput_alpha must be a number from 0 to 1, got 1.01",
    ),
    ({"prefill_cost_model": {"intercept_seconds": 0}}, True, ""),
    ({"prefill_cost_model": {"intercept_seconds": -0.1}}, False, "intercept_seconds must be"),
    (
        {"decode_throughput_model": {"fixed_step_seconds": 0}},
        False,
        "decode_throughput_model.fixed_step_seconds must be a number > 0, got 0",
    ),
    ({"decode_throughput_model": {"fixed_step_seconds": 1e-9}}, True, ""),
]


def _ttlctl_takes(config: dict[str, Any]) -> tuple[bool, str]:
    text = json.dumps({"program_scheduling_enable_key": "auto", **config})
    try:
        RouterSettings("program-scheduling", program_scheduling_config_json=text)
    except ConfigError as e:
        return False, str(e)
    return True, ""


@pytest.mark.parametrize(("config", "taken", "why"), ROUTER_VERDICTS)
def test_the_config_takes_what_the_router_takes(
    config: dict[str, Any], taken: bool, why: str
) -> None:
    """Every field is held to the range vllm-router 0.1.17 holds it to at start, the
    fields the model does not act on too (cross_rank_headroom_ratio -5 and
    paused_retention_ttl_seconds -1 were taken, the router refuses them), and nothing the
    router takes is refused (max_active_programs_per_target 0 was)."""
    took, message = _ttlctl_takes(config)
    assert took == taken, message
    assert why in message
    assert "\n" not in message


def test_the_installed_router_agrees_on_each_range() -> None:
    """The table above against the installed vllm-router: it refuses at start exactly the
    configs ttlctl refuses (the enable key given as ``auto``, which the replay needs)."""
    texts = [
        json.dumps({"program_scheduling_enable_key": "auto", **config})
        for config, _, _ in ROUTER_VERDICTS
    ]
    logs = router_outputs(
        _router_command(), [_router_args(text) for text in texts], merge_stderr=True, until=WATCHED
    )
    differ = []
    for (config, _, _), text, log in zip(ROUTER_VERDICTS, texts, logs, strict=True):
        took, _ = _ttlctl_takes(config)
        router_took = "Waiting for" in log and "Error starting router" not in log
        if router_took != took:
            differ.append((text, took, log[-300:]))
    assert not differ


def test_unmodelled_router_fields_are_named_as_such() -> None:
    """vllm-router has ``pd`` and ``prediction_profile`` (it reads them): refused as not
    modelled, not as fields it lacks; its alias of the token capacity is the same field."""
    for key in ("pd", "prediction_profile"):
        with pytest.raises(ConfigError, match=f"{key} .* is not modelled"):
            RouterSettings(
                "program-scheduling", program_scheduling_config_json=f'{{"{key}": {{}}}}'
            )
    aliased = router(1, token_capacity_per_dp_rank=1_000)
    assert aliased.config.token_capacity_per_target == 1_000


def test_a_count_bound_of_one_holds_the_second_program() -> None:
    view = waiting([0])
    one = router(1, max_active_programs_per_target=1, admission_waiting_request_threshold=0)
    assert one.route(call("p0"), view, 0.0) == 0
    assert one.route(call("p1"), view, 0.0) == HOLD


def test_calibration_from_the_profile_or_the_reference() -> None:
    profile = resolve("llama-3.1-8b-h100")[0]
    calibrated = make_router(
        RouterSettings("program-scheduling"), 1, seed=0, block_size=16,
        calibration=calibrate(profile),
    )  # fmt: skip
    reference = router(1)
    assert isinstance(calibrated, ProgramScheduling)
    assert calibrated.prefill == calibrate(profile).prefill
    assert reference.prefill == REFERENCE_PREFILL
    assert calibrated.cache_miss_impact_s(8_000) != reference.cache_miss_impact_s(8_000)
    # an object given in the JSON overrides the calibration, field by field
    given = RouterSettings(
        "program-scheduling",
        program_scheduling_config_json='{"prefill_cost_model": {"decode_throughput_alpha": 1.0}}',
    )
    r = make_router(given, 1, seed=0, block_size=16, calibration=calibrate(profile))
    assert isinstance(r, ProgramScheduling)
    assert r.prefill.decode_throughput_alpha == 1.0
    assert (
        r.prefill.linear_seconds_per_1k_tokens
        == calibrate(profile).prefill.linear_seconds_per_1k_tokens
    )


# ---------------------------------------------------------------- in a replayed fleet


@pytest.fixture(scope="module")
def workload() -> Workload:
    return from_frame(synth("swe-bench", 24, 3))


@pytest.fixture(scope="module")
def cost() -> ProfileCostModel:
    return ProfileCostModel(resolve("llama-3.1-8b-h100")[0])


CONFIG = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=120_000), check=True)
LOAD = Load(concurrency=12)


def ps(config: dict[str, Any] | None = None, calibration: str | None = None) -> RouterSettings:
    return RouterSettings(
        "program-scheduling",
        program_scheduling_config_json=None if config is None else json.dumps(config),
        program_scheduling_calibration=calibration,
    )


@pytest.mark.parametrize("policy", ["vllm", "continuum"])
def test_one_replica_that_never_retains_is_the_single_engine(workload, cost, policy):
    # the waiting gate opened (0 is the router's 1: a threshold no queue reaches), no
    # token capacity, 64 active programs > 12 at a time: every call is admitted at once,
    # so the router changes nothing
    spec = PolicySpec(policy)
    single = run_one(workload, spec, cost, CONFIG, LOAD, timed=False)
    fleet = runner(FleetSpec(1, ps({"admission_waiting_request_threshold": 10_000})))(
        workload, spec, cost, CONFIG, LOAD, timed=False
    )
    assert {k: fleet[k] for k in single} == single


def test_a_retaining_fleet_at_a_tenth_of_a_second_ends(workload, cost):
    """A metrics interval of 0.1 s (the replay hung on a tick that rounds low)."""
    settings = ps({"metrics_interval_seconds": 0.1})
    out = runner(FleetSpec(2, settings))(
        workload, PolicySpec("vllm"), cost, CONFIG, LOAD, timed=False
    )
    assert out["llm_calls"] == workload.calls


def test_a_retaining_fleet_serves_every_call_once_and_is_deterministic(workload, cost):
    settings = ps({"token_capacity_per_target": 60_000, "stats_window_size": 10})
    run = runner(FleetSpec(3, settings))
    a = run(workload, PolicySpec("continuum"), cost, CONFIG, LOAD, timed=False)
    b = run(workload, PolicySpec("continuum"), cost, CONFIG, LOAD, timed=False)
    assert a == b
    assert a["llm_calls"] == workload.calls
    assert a["returned_share"] == 1.0 and a["pins_wasted"] == 0  # rank-local: sticky
    assert a["router"]["settings"]["token_capacity_per_target"] == 60_000
    assert a["router"]["settings"]["calibration"] == "profile"


def test_calls_past_their_force_deadline_behind_the_waiting_gate_are_all_served(workload, cost):
    """A forced call still waits for its engine's queue (the gate holds it past its
    deadline, woken at the metrics ticks): with a deadline of 0.5 s many calls pass it
    while their replica has a queue, and the replay still serves each call once and ends
    (a wake asked for at the instant itself would never end)."""
    settings = ps({"force_resume_timeout_seconds": 0.5})
    run = runner(FleetSpec(2, settings))
    out = run(workload, PolicySpec("vllm"), cost, CONFIG, Load(concurrency=24), timed=False)
    assert out["llm_calls"] == workload.calls
    assert out == run(workload, PolicySpec("vllm"), cost, CONFIG, Load(concurrency=24), timed=False)


def test_retaining_calls_costs_them_router_queue_time(workload, cost):
    """The default gate (one waiting request closes a rank) holds calls back: their JCT,
    measured from the send, includes the router's queue."""
    spec = PolicySpec("vllm")
    opened = runner(FleetSpec(2, ps({"admission_waiting_request_threshold": 10_000})))(
        workload, spec, cost, CONFIG, Load(concurrency=24), timed=False
    )
    gated = runner(FleetSpec(2, ps()))(
        workload, spec, cost, CONFIG, Load(concurrency=24), timed=False
    )
    assert gated["llm_calls"] == opened["llm_calls"]
    assert gated["jct_mean_s"] != opened["jct_mean_s"]


def test_reference_and_calibrated_runs_are_both_available(workload, cost):
    run = runner(FleetSpec(2, ps({"stats_window_size": 5}, "reference")))
    r = run(workload, PolicySpec("continuum"), cost, CONFIG, LOAD, timed=False)
    assert r["router"]["settings"]["calibration"] == "reference"
    with pytest.raises(ConfigError, match="needs a profile's cost model"):
        runner(FleetSpec(2, ps()))(
            workload, PolicySpec("vllm"), ConstantCostModel(), CONFIG, LOAD, timed=False
        )


#: what vllm-router says once its config passed (it waits for the absent worker), or not
WATCHED = ["Waiting for", "Error starting router"]


def _router_command() -> str:
    command = shutil.which("vllm-router") or str(Path(sys.executable).parent / "vllm-router")
    if not Path(command).exists():
        pytest.skip("vllm-router is not installed (pip install vllm-router)")
    return command


def _router_args(config: str, port: str = FREE_PORT, metrics: str = FREE_PORT) -> list[str]:
    """vllm-router's arguments to start Program scheduling with ``config`` (on ports free
    at its start, by default: router_outputs picks them)."""
    # metrics on a port of their own: a router elsewhere on the host may hold the
    # default (29000), and then this one exits with "Address already in use"
    return ["--host", "127.0.0.1", "--port", port, "--worker-urls", "http://127.0.0.1:9",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", metrics,
            "--enable-program-scheduling", "--program-scheduling-config-json", config]  # fmt: skip


def _router_start(config: str) -> str:
    """What the installed vllm-router, its console script started, says when started with
    ``config``: its validation error, or its wait for the (absent) worker once the config
    passed."""
    proc = subprocess.Popen(
        [_router_command(), *_router_args(config, str(free_port()), str(free_port()))],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if any(word in line for word in WATCHED):
                break
    finally:
        proc.kill()
        proc.wait()
    return "".join(seen)


def test_the_installed_router_takes_the_printed_config() -> None:
    """The flag value `bundle query --as vllm-router` prints for a tuned program-scheduling
    router passes the real router's validation (vllm-router 0.1.17)."""
    settings = RouterSettings(
        "program-scheduling",
        program_scheduling_config_json=json.dumps(
            {"token_capacity_per_target": 600_000, "low_watermark_ratio": 0.8,
             "max_acting_ttl_seconds": 42.5, "resume_order": "fcfs"}
        ),
    )  # fmt: skip
    printed = router_flags.vllm_router_args(
        {"name": "program-scheduling", "settings": settings.resolved(), "replicas": 2},
        resolve("llama-3.1-8b-h100")[0],
    )
    assert printed[:2] == ["--enable-program-scheduling", "--program-scheduling-config-json"]
    log = _router_start(printed[2])
    assert "Waiting for" in log and "Error" not in log
    bad = json.loads(printed[2]) | {"max_acting_ttl_seconds": -1}
    assert "max_acting_ttl_seconds" in _router_start(json.dumps(bad))


@pytest.mark.parametrize(
    ("config", "policy"),
    [({}, "vllm"), ({"token_capacity_per_target": 60_000, "stats_window_size": 10}, "continuum")],
)
def test_a_retaining_router_with_waiting_decode_runs_matches_step_by_step(
    workload, cost, config, policy
):
    """Calls the router holds and releases later (on a response's end or at its ticks) meet
    the replicas' waiting runs of decode steps as stepping one token at a time does."""
    per_token = replace(CONFIG, engine=replace(CONFIG.engine, fast=False))
    run = runner(FleetSpec(3, ps(config)))
    fast = run(workload, PolicySpec(policy), cost, CONFIG, LOAD, timed=False)
    slow = run(workload, PolicySpec(policy), cost, per_token, LOAD, timed=False)
    for key in ("llm_calls", "preemptions", "pins_wasted", "miss_reasons", "pins"):
        assert fast[key] == slow[key], key
    for key in ("jct_mean_s", "ttft_mean_s", "prefix_hit_rate", "engine_busy_s"):
        assert fast[key] == pytest.approx(slow[key], rel=1e-9), key


# ---------------------------------------------------------------- found by a mutation audit


def test_defaults_are_the_routers() -> None:
    # vllm-project/router docs/program_scheduling.md, "Configuration reference" (the
    # enable key is the replay's: auto)
    assert ProgramSchedulingConfig().to_json() == {
        "program_scheduling_enable_key": "auto",
        "binding_only": False,
        "global_queue": False,
        "resume_order": "mru",
        "cross_rank_headroom_ratio": 1.2,
        "binding_strategy": "consistent_hash",
        "hash_virtual_nodes": 160,
        "token_capacity_per_target": None,
        "max_active_programs_per_target": 64,
        "metrics_interval_seconds": 1.0,
        "admission_waiting_request_threshold": 1,
        "queue_timeout_seconds": 600.0,
        "force_resume_timeout_seconds": 300.0,
        "paused_retention_ttl_seconds": 1800.0,
        "shared_prefix_freshness_warmup_seconds": 100.0,
        "shared_prefix_freshness_kv_turnovers": 2.0,
        "decode_buffer_tokens": 100,
        "max_acting_ttl_seconds": 10.0,
        "high_watermark_ratio": 1.0,
        "low_watermark_ratio": 1.0,
        "max_segment_rounds": 14,
        "stats_window_size": 100,
        "enable_batch_gain_admission": True,
    }


def test_the_acting_ttl_candidates_start_at_50_ms() -> None:
    # half the calls come back within 0.12 s, the rest after 20 s, and a miss costs 1 s:
    # the best TTL catches the quick half and no more, well under 0.5 s (the candidates
    # run from 0.05 s to the cap)
    ttl = fitted_acting_ttl([0.08, 0.1, 0.12, 20.0, 30.0, 40.0], 6, 10.0, 1.0)
    assert 0.05 <= ttl < 0.5


def test_token_capacity_takes_a_call_that_fills_it_exactly() -> None:
    r = router(1, token_capacity_per_target=1_000, decode_buffer_tokens=100,
               admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    assert r.route(call("a", 400), view, 0.0) == 0
    assert r.route(call("b", 400), view, 0.0) == 0  # 500 + 500 = 1000


def _acting(r: ProgramScheduling, view: View) -> float:
    """Program a active on rank 0 with a TTL (a window of one interval); its deadline."""
    assert r.route(call("a", LONG, 0), view, 0.0) == 0
    r.completed(0, call("a", LONG, 0), 1.0)  # no interval yet: TTL 0, paused
    assert r.route(call("a", LONG, 1), view, 3.0) == 0  # interval 2 s: window full
    r.completed(0, call("a", LONG, 1), 4.5)
    return 4.5 + r.acting_ttl_s(0, LONG)


def test_a_call_between_ticks_pauses_an_expired_ttl_as_it_arrives() -> None:
    """vllm-router 0.1.17 runs its arrival decisions on every call
    (``scheduler_admission.rs``, ``acquire_synced``: ``run_request_arrival_decisions``): a
    TTL due by the call's arrival pauses then, not at the next metrics tick."""
    r = router(1, max_active_programs_per_target=1, stats_window_size=1,
               admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    deadline = _acting(r, view)
    assert deadline > 4.5 and deadline != math.floor(deadline)
    # before a's deadline: a still acts, b waits
    assert r.route(call("b", LONG), view, deadline - 0.01) == HOLD
    # past it, between ticks: c's arrival pauses a and admits the longest waiting, b
    assert r.route(call("c", LONG), view, deadline + 0.01) == HOLD
    assert r.released() == [("b", 0)]


def test_an_acting_programs_bigger_call_takes_more_of_the_capacity() -> None:
    r = router(1, token_capacity_per_target=100_000, decode_buffer_tokens=0,
               stats_window_size=1, admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    deadline = _acting(r, view)
    assert r.route(call("a", 70_000, 2), view, 5.0) == 0  # acting: straight on
    assert deadline > 5.0
    assert r.route(call("b", LONG), view, 5.5) == HOLD  # 70,000 + 40,000 > 100,000


def test_least_program_count_binding_spreads_programs() -> None:
    r = router(3, binding_strategy="least_program_count", admission_waiting_request_threshold=0)
    view = waiting([0, 0, 0])
    ranks = [r.route(call(f"p{i}"), view, 0.0) for i in range(6)]
    assert sorted(Counter(ranks).values()) == [2, 2, 2]


def test_a_forced_call_is_resumed_before_others() -> None:
    # docs/program_scheduling.md: "Resume first selects expired force-resume deadlines"
    r = router(1, token_capacity_per_target=1_000, decode_buffer_tokens=0,
               force_resume_timeout_seconds=5.0, admission_waiting_request_threshold=0)  # fmt: skip
    view = waiting([0])
    assert r.route(call("x", 900), view, 0.0) == 0
    assert r.route(call("a", 500), view, 0.0) == HOLD
    assert r.route(call("b", 600), view, 4.0) == HOLD
    r.completed(0, call("x", 900), 5.0)  # x paused; a is due, b is not
    # a first; then b does not fit (500 + 600 > 1000)
    assert r.released() == [("a", 0)]


# ---------------------------------------------------------------- the 0.1.17 source audit
# Each test states a rule of the vllm-router 0.1.17 sdist (src/program_scheduling/) that the
# model, ported from an earlier commit, had not followed.


def test_a_waiting_threshold_of_zero_is_the_routers_one() -> None:
    """``ProgramSchedulerConfig::from_program_config`` (scheduler_state.rs:146-153): outside
    PD mode an ``admission_waiting_request_threshold`` of 0 becomes 1 (the serde default is
    0 too, "auto"), so one waiting request still closes the rank."""
    r = router(1, admission_waiting_request_threshold=0)
    assert r.route(call("a"), waiting([1]), 0.0) == HOLD


def test_max_active_programs_zero_is_the_routers_64() -> None:
    """scheduler_state.rs:139-145: outside PD mode ``max_active_programs_per_target`` 0 is
    64 (the historical cap), and ``rank_admission_plan`` admits while count + 1 <= 64."""
    r, view = router(1, max_active_programs_per_target=0), waiting([0])
    assert all(r.route(call(f"p{i}"), view, 0.0) == 0 for i in range(64))
    assert r.route(call("p64"), view, 0.0) == HOLD


def test_a_forced_resume_still_waits_for_the_engines_queue() -> None:
    """scheduler_admission.rs:738-749 returns None on waiting >= threshold whatever
    ``forced`` is (the router's own test ``backend_waiting_gate_also_blocks_forced_resume``);
    forced passes only the count and token gates. Past its force deadline the call keeps
    waiting (its wait loop wakes every metrics interval) until the engine's queue drains or
    ``queue_timeout_seconds`` fails it."""
    r, view = router(1, force_resume_timeout_seconds=5.0), waiting([3])
    assert r.route(call("a"), view, 0.0) == HOLD
    r.tick(5.0, view)
    r.tick(6.0, view)
    assert r.released() == []


def test_least_program_count_counts_only_live_programs() -> None:
    """scheduler.rs:574-577: a target's ``accounted_programs`` are its programs that are
    Active or Reasoning (a call retained); a program paused between calls (its TTL run
    out, Paused and Acting) is not counted. binding/mod.rs:283-285: the least count, ties
    to the smallest target id."""
    r = router(2, binding_strategy="least_program_count")
    view = waiting([0, 0])
    assert r.route(call("p0"), view, 0.0) == 0
    r.completed(0, call("p0"), 1.0)  # TTL 0 (no intervals yet): p0 paused at once
    # neither replica has a live program: the tie goes to replica-0
    assert r.route(call("p1"), view, 2.0) == 0


def test_program_round_robin_follows_the_sorted_worker_urls() -> None:
    """binding/mod.rs:112-113 sorts the candidates by ``target_id`` (the worker URL,
    router.rs:726) before ``RoundRobinBinding`` indexes them (and ``least_program_count``
    breaks ties on it): ``http://h:10000`` sorts before ``http://h:9000``."""
    settings = RouterSettings(
        "program-scheduling",
        program_scheduling_config_json=json.dumps({"binding_strategy": "program_round_robin"}),
        program_scheduling_calibration="reference",
    )
    r = make_router(settings, 2, seed=0, block_size=16,
                    worker_urls=["http://h:9000", "http://h:10000"])  # fmt: skip
    view = waiting([0, 0])
    assert [r.route(call(f"p{i}"), view, 0.0) for i in range(3)] == [1, 0, 1]


def test_consistent_hash_binding_builds_the_ring_over_the_sorted_urls() -> None:
    """binding/mod.rs ``ConsistentHashBinding::ring`` inserts each candidate's nodes in
    ``target_id`` order into a ``BTreeMap``: of two workers' nodes at one hash the later
    URL's stays, whatever the order of ``--worker-urls``. Node 86 of
    ``http://127.0.0.1:41000`` and node 66 of ``http://127.0.0.1:41129`` share a hash;
    the sessions whose key falls just before it (c20, c57, c116) went to the :41129 stub
    behind the installed vllm-router 0.1.17 given the URLs either way round (the model
    given them :41129 first sent them to :41000 before it sorted them)."""
    a, b = "http://127.0.0.1:41000", "http://127.0.0.1:41129"
    assert fbi_hash(f"{a}:86") == fbi_hash(f"{b}:66")
    settings = RouterSettings(
        "program-scheduling",
        program_scheduling_config_json="{}",
        program_scheduling_calibration="reference",
    )
    view = waiting([0, 0])
    for urls in ([a, b], [b, a]):
        r = make_router(settings, 2, seed=0, block_size=16, worker_urls=urls)
        placed = {urls[r.route(call(s), view, 0.0)] for s in ["c20", "c57", "c116"]}
        assert placed == {b}
        assert urls[r.route(call("o1"), view, 0.0)] == a  # elsewhere on the ring


def test_a_program_idle_past_the_paused_retention_is_bound_afresh() -> None:
    """scheduler_lifecycle.rs:579-645: each periodic tick releases a paused, idle program
    whose pause is ``paused_retention_ttl_seconds`` (1800) old: its decision state and its
    binding go, so its next call is a new generation, bound by the strategy again."""
    r = router(3, binding_strategy="program_round_robin")
    view = waiting([0, 0, 0])
    assert r.route(call("p0"), view, 0.0) == 0
    r.completed(0, call("p0"), 1.0)  # paused at 1.0
    assert r.route(call("p1"), view, 2.0) == 1
    # released at the first tick at or past 1801; bound again, to the next in turn
    assert r.route(call("p0", turn=1), view, 1803.0) == 2


def test_a_released_program_gives_no_interval_sample() -> None:
    """scheduler_admission.rs:118-140: the interval is sampled only from the program's
    live decision state (``last_request_finished_at``); one released after
    ``paused_retention_ttl_seconds`` has none, so its next call adds no 1802 s interval."""
    r = router(1, stats_window_size=2)
    view = waiting([0])
    assert r.route(call("a", LONG, 0), view, 0.0) == 0
    r.completed(0, call("a", LONG, 0), 1.0)
    assert r.route(call("a", LONG, 1), view, 1803.0) == 0  # released: no sample
    r.completed(0, call("a", LONG, 1), 1804.0)
    assert r.route(call("a", LONG, 2), view, 1806.0) == 0  # a 2 s interval: one sample
    assert r.acting_ttl_s(0, LONG) == 0.0  # the window (2) is not full


class _CountingDict(dict):  # type: ignore[type-arg]
    """A dict that counts the full passes over its items."""

    passes = 0

    def items(self):  # type: ignore[no-untyped-def]
        type(self).passes += 1
        return super().items()


def test_an_arrival_looks_for_releases_only_once_one_is_due() -> None:
    """Every arrival runs the release check (twice: the ticks caught up, the arrival's own
    decisions), so a pass over all the programs known there made each call O(programs):
    +100% of a 1,000-program replay's wall time. With no pause as old as
    ``paused_retention_ttl_seconds`` the check passes over none; once one is, it is
    released as before."""
    r = router(2)
    view = waiting([0, 0])
    for i in range(50):
        rank = r.route(call(f"old{i}"), view, float(i))
        r.completed(rank, call(f"old{i}"), i + 0.5)  # TTL 0: each pauses
    counting = _CountingDict(r._programs)
    r._programs = counting
    _CountingDict.passes = 0
    r.route(call("new"), view, 100.0)
    assert _CountingDict.passes == 0
    r.route(call("old0", turn=1), view, 1802.0)  # old0 paused at 1.0: released by the tick at 1801
    assert _CountingDict.passes > 0
    assert "old0" in r._programs and r._programs["old0"].last_finished is None  # anew


def test_binding_only_programs_pause_and_are_released_as_the_others() -> None:
    """0.1.17 with ``binding_only``: a call is admitted at home at once
    (``activate_binding_only``), its completion starts the acting TTL and the periodic
    decisions pause it and release it once paused ``paused_retention_ttl_seconds``
    (``scheduler_lifecycle.rs``), so the program's next call is bound afresh."""
    r = router(3, binding_only=True, binding_strategy="program_round_robin",
               paused_retention_ttl_seconds=1.0)  # fmt: skip
    view = waiting([5, 5, 5])  # no gate applies: binding only
    assert r.route(call("A"), view, 0.0) == 0
    r.completed(0, call("A"), 1.0)  # TTL 0 (no intervals): paused at 1.0
    assert r.route(call("B"), view, 2.0) == 1
    r.completed(1, call("B"), 3.0)
    assert r.route(call("A", turn=1), view, 100.0) == 2  # A released: bound again, in turn
