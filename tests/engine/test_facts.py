"""``ttlctl.engine.facts.configured``: the engine's facts read from vLLM's configuration by
name, without vLLM (the plugin hands it its ``VllmConfig``). A release that lacks a setting,
or gives one of another type, states it as null, never as a wrong value; the tests with a
real vLLM (tests/vllmsim/test_plugin_log.py, tests/engine/test_server.py) see one release."""

from __future__ import annotations

from dataclasses import asdict
from types import SimpleNamespace

from ttlctl.engine.facts import configured


class NixlConnector:
    """A connector the config does not name (its class names it)."""


def _config(**sched: object) -> SimpleNamespace:
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=8, max_num_batched_tokens=512, **sched),
        model_config=SimpleNamespace(served_model_name=["served", "alias"], max_model_len=1024),
        kv_transfer_config=None,
    )


def _facts(config: object, connector: object = None) -> dict[str, object]:
    cache = SimpleNamespace(block_size=16, enable_prefix_caching=True)
    made = configured(
        config,
        cache,
        num_gpu_blocks=65,
        connector=connector,
        vllm_version="0.32.0",
        bundle_sha256=None,
        replica="r1",
    )
    return asdict(made)


def test_an_older_release_states_what_it_lacks_as_null() -> None:
    facts = _facts(_config())
    assert (facts["model"], facts["kv_blocks"], facts["block_size"]) == ("served", 64, 16)
    assert (facts["max_num_seqs"], facts["max_model_len"], facts["replica"]) == (8, 1024, "r1")
    for lacked in ("scheduler_reserve_full_isl", "enable_chunked_prefill", "watermark",
                   "max_num_scheduled_tokens", "max_num_queued_tokens",
                   "long_prefill_token_threshold_adaptive", "kv_connector"):  # fmt: skip
        assert facts[lacked] is None, lacked


def test_a_setting_of_another_type_is_null_not_a_wrong_value() -> None:
    facts = _facts(
        _config(
            scheduler_reserve_full_isl=1,  # not a switch
            max_num_queued_tokens=True,  # a switch, not a count
            watermark=False,  # a switch, not a share
            long_prefill_token_threshold=256,
            long_prefill_token_threshold_adaptive=True,
        )
    )
    assert facts["scheduler_reserve_full_isl"] is None
    assert facts["max_num_queued_tokens"] is None and facts["watermark"] is None
    cap = (facts["long_prefill_token_threshold"], facts["long_prefill_token_threshold_adaptive"])
    assert cap == (256, True)


def test_a_connector_is_named_by_the_config_else_by_its_class() -> None:
    assert _facts(_config(), NixlConnector())["kv_connector"] == "NixlConnector"
    named = _config()
    named.kv_transfer_config = SimpleNamespace(kv_connector="LMCacheConnectorV1")
    assert _facts(named, NixlConnector())["kv_connector"] == "LMCacheConnectorV1"
