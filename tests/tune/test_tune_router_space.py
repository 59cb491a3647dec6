"""tune's search over a router's settings stays inside what the router's flags take
(``ttlctl.router_doc``'s table): an int flag searched as an int, both ends in range, so no
trial stands for a router vllm-router would refuse to start."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import optuna
import pytest

from replay.fleet.routers import RouterSettings
from replay.fleet.routers.progress_ttl import ProgramSchedulingConfig
from replay.fleet.run import FleetSpec
from replay.tune.context import TuneContext
from replay.tune.space import fleet_defaults, fleet_of, suggest, suggest_fleet
from ttlctl.router_doc import SETTINGS


@pytest.mark.parametrize("name", [name for name, flags in SETTINGS.items() if flags])
def test_tunes_router_settings_are_searched_as_the_flags_take_them(
    tune_inputs: dict[str, Any], name: str
) -> None:
    ctx = replace(tune_inputs["ctx"], fleet=FleetSpec(2, RouterSettings(name)), routers=(name,))
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    fleet = suggest_fleet(trial, ctx)
    assert fleet is not None and fleet.router.name == name
    searched = set(trial.distributions)
    assert searched and searched <= set(SETTINGS[name]), searched
    for key in searched:
        flag, space = SETTINGS[name][key], trial.distributions[key]
        assert isinstance(space, optuna.distributions.IntDistribution) == flag.integer, key
        assert flag.refusal(space.low) is None and flag.refusal(space.high) is None, key
    # the first trials start from the router's defaults, which its flags take too
    for key, value in fleet_defaults(ctx).items():
        assert SETTINGS[name][key].refusal(value) is None, key


def _space(
    ctx: TuneContext, fixed: dict[str, Any]
) -> dict[str, optuna.distributions.BaseDistribution]:
    """The distributions a trial searches, with ``fixed`` enqueued (to reach a branch)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(fixed)
    trial = study.ask()
    suggest(trial)
    suggest_fleet(trial, ctx)
    return dict(trial.distributions)


def test_the_search_space_is_the_one_docs_tuning_md_tables(tune_inputs: dict[str, Any]) -> None:
    """docs/tuning.md, "What it searches": the policy's knobs and, with ``--replicas``, the
    router's, each with the range (and log scale) the tables give."""
    dist = optuna.distributions
    ints, floats, cats = dist.IntDistribution, dist.FloatDistribution, dist.CategoricalDistribution
    policy = {
        "eta": floats(-1.0, 1.0),
        "k": ints(10, 1000, log=True),
        "t_window": ints(10, 1000, log=True),
        "valve": cats(["head", "stall-only"]),
        "pin_cap": floats(0.05, 1.0),
        "cold_start": cats(["ln-b", "fixed"]),
        "cold_start_ttl_s": floats(0.0, 30.0),
    }
    routers = ("cache-aware", "kv-aware", "pin-aware", "program-scheduling")
    one = tune_inputs["ctx"]
    ctx = replace(one, fleet=FleetSpec(2, RouterSettings("cache-aware")), routers=routers)
    by_router: dict[str, dict[str, optuna.distributions.BaseDistribution]] = {
        "cache-aware": {
            "balance_abs_threshold": ints(1, 1024, log=True),
            "balance_rel_threshold": floats(1.0, 8.0),
        },
        "kv-aware": {"kv_aware_session_affinity_ttl_secs": ints(1, 3600, log=True)},
        "pin-aware": {"pin_queue_bound": ints(0, 256)},
        "program-scheduling": {
            "max_acting_ttl_seconds": floats(0.5, 600.0, log=True),
            "stats_window_size": ints(5, 500, log=True),
            "admission_waiting_request_threshold": ints(0, 64),
            "max_active_programs_per_target": ints(1, 256, log=True),
            "force_resume_timeout_seconds": floats(5.0, 600.0, log=True),
            "resume_order": cats(["mru", "fcfs"]),
            "token_capacity": cats([False, True]),
            "token_capacity_kv_share": floats(0.25, 2.0),
            "low_watermark_ratio": floats(0.5, 1.0),
        },
    }
    for router, knobs in by_router.items():
        fixed = {"cold_start": "fixed", "router": router, "token_capacity": True}
        assert _space(ctx, fixed) == policy | {"router": cats(list(routers))} | knobs, router
    # one engine: the policy's knobs only; ln B in cold start searches no fixed τ
    assert _space(one, {"cold_start": "fixed"}) == policy
    assert _space(one, {"cold_start": "ln-b"}) == {
        k: v for k, v in policy.items() if k != "cold_start_ttl_s"
    }


def test_program_schedulings_first_trials_run_the_routers_defaults_and_capacity_is_a_kv_share(
    tune_inputs: dict[str, Any],
) -> None:
    """The first trials behind ``program-scheduling`` run vllm-router's defaults (the
    replay's ``ProgramSchedulingConfig``), token capacity off; a trial's token capacity is
    ``token_capacity_kv_share`` × ``--kv-tokens`` (docs/tuning.md's table)."""
    one = tune_inputs["ctx"]
    ctx = replace(one, fleet=FleetSpec(2, RouterSettings("program-scheduling")))
    stock = ProgramSchedulingConfig()
    first = fleet_defaults(ctx)
    assert first["token_capacity"] is False and stock.token_capacity_per_target is None
    assert {k: v for k, v in first.items() if k != "token_capacity"} == {
        k: getattr(stock, k) for k in first if k != "token_capacity"
    }
    values = first | {"token_capacity": True, "token_capacity_kv_share": 0.5}
    values |= {"low_watermark_ratio": 0.75}
    fleet = fleet_of(values, ctx)
    assert fleet is not None
    config = json.loads(fleet.router.program_scheduling_config_json or "")
    assert config["token_capacity_per_target"] == round(0.5 * ctx.config.engine.kv_tokens)
    assert config["low_watermark_ratio"] == 0.75
