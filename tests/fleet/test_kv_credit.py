"""Which completion requests vllm-router's kv_aware credits with their cached prefix
(replay.fleet.routers.kv_credit), and the model's prices without that credit.

The rule against the real router, live: tests/live/test_kv_events.py."""

from __future__ import annotations

import numpy as np
import pytest

from replay.client_tags import CLIENT_TAGS, SESSION, vllm_xargs
from replay.fleet.routers import RouterSettings, make_router
from replay.fleet.routers.kv_aware import KvAware
from replay.fleet.routers.kv_credit import MODELLED, completion_credited
from replay.fleet.run import FleetSpec
from replay.live.driver import live_body, request_body
from replay.validation.fleet_sim import live_prefix_credit
from tests.fleet.test_routers import call
from tests.fleet.views import View

BARE = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "stream": True, "ignore_eos": True}


@pytest.mark.parametrize(
    ("extra", "credited"),
    [
        ({}, True),
        ({"vllm_xargs": {"program_id": "p"}}, False),
        ({"return_token_ids": True}, False),
        ({"add_special_tokens": False}, True),
        ({"add_special_tokens": "no"}, False),
        ({"priority": 3}, True),
        ({"priority": True}, False),  # a JSON boolean is not an integer
        ({"priority": 1.5}, False),
        ({"truncate_prompt_tokens": 100}, True),
        ({"lora_path": "/adapters/a"}, False),
        ({"lora_path": None}, True),
        ({"session_params": {"session_id": "p"}, "user": "u", "min_tokens": 4}, True),
    ],
)
def test_a_completion_is_credited_only_with_fields_the_router_models(
    extra: dict[str, object], credited: bool
) -> None:
    assert completion_credited(BARE | extra) is credited


@pytest.mark.parametrize("mode", [m for m in CLIENT_TAGS if m != SESSION])
def test_the_live_clients_tagged_calls_are_never_credited(mode: str) -> None:
    """ttlctl's live client sends its tags and asks for the answer's token ids: two fields
    kv_aware does not model, so validate simulates kv_aware without the credit."""
    body = live_body("m", [5, 6], 2, ("p", "bash", True), mode)
    assert body == request_body("m", [5, 6], 2, vllm_xargs("p", "bash", True, mode))
    assert {k for k in body if k not in MODELLED} == {"vllm_xargs", "return_token_ids"}
    assert live_prefix_credit(mode) is False


def test_a_client_tagging_by_the_session_header_alone_is_credited() -> None:
    """Under ``session`` the body carries neither field (the program goes in the header the
    client always sends; the answer's ids come back as logprobs), every field one the
    router models: validate simulates kv_aware with the credit."""
    body = live_body("m", [5, 6], 2, ("p", "bash", True), SESSION)
    assert "vllm_xargs" not in body and "return_token_ids" not in body
    assert body["logprobs"] == 0 and set(body) <= MODELLED
    assert live_prefix_credit(SESSION) is True


def test_without_credit_kv_aware_prices_the_whole_prompt_everywhere() -> None:
    c = call("a", ((1, 1600),), 1)
    cached = View([0, 1], cached={1: 1280})  # replica 1 holds 80 of its 100 blocks
    credited = KvAware(np.random.default_rng(0), block_size=16)
    blind = KvAware(np.random.default_rng(0), block_size=16, prefix_credit=False)
    assert credited.costs(c, cached)[0] == [1600.0, 640.0]
    assert blind.costs(c, cached)[0] == [1600.0, 3200.0]
    assert credited.route(c, cached, 0.0) == 1
    assert blind.route(c, cached, 0.0) == 0  # the cache unseen: the lighter replica
    assert blind._prefilling == {0: 1600}  # its whole prompt pending there


def test_the_fleet_builds_kv_aware_with_its_credit_and_says_when_it_is_off() -> None:
    router = make_router(RouterSettings("kv-aware"), 2, seed=0, block_size=16)
    assert isinstance(router, KvAware) and router.prefix_credit
    off = make_router(RouterSettings("kv-aware"), 2, seed=0, block_size=16, prefix_credit=False)
    assert isinstance(off, KvAware) and not off.prefix_credit
    assert (
        FleetSpec(2, RouterSettings("kv-aware"), prefix_credit=False).describe()["prefix_credit"]
        is False
    )
    # credited (the default), or another router: nothing said
    assert "prefix_credit" not in FleetSpec(2, RouterSettings("kv-aware")).describe()
    assert "prefix_credit" not in FleetSpec(2, prefix_credit=False).describe()
