"""tune's search over a router's settings stays inside what the router's flags take
(``ttlctl.router_doc``'s table): an int flag searched as an int, both ends in range, so no
trial stands for a router vllm-router would refuse to start."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import optuna
import pytest

from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec
from replay.tune.space import fleet_defaults, suggest_fleet
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
