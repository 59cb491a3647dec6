"""The plugin prices a miss (B's PrefillReload) in steps of its engine's own step budget.

Two ``TTLScheduler``s built by vLLM's own classes from vLLM configs that differ only in
``max_num_batched_tokens`` serve one bundle, whose profile records a third budget (the
one it was measured with): each prices a rebuild as the one pricing function
(:meth:`profiles.schema.Profile.rebuild_prefill_s`) does in steps of its engine's budget.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fitting.policy_params import PolicyParams
from profiles.schema import Profile
from replay.policies import PolicySpec, make
from replay.scheduler import SimSchedulerConfig
from replay.vllmsim.build import build, quiet_vllm
from tests.vllmsim.drive import CREATED, PROFILE
from ttlctl import bundle as bundle_mod
from ttlctl import bundle_make
from ttlctl.engine.scheduler import TTLMixin

#: the budget the bundle's profile says it was measured with
MEASURED = 2048
TOKENS = 1000


def _profile() -> Profile:
    flags = PROFILE.source.get("flags")
    flags = {**(flags if isinstance(flags, dict) else {}), "max_num_batched_tokens": MEASURED}
    return replace(PROFILE, source={**PROFILE.source, "flags": flags})


def _bundle(path: Path, profile: Profile) -> Path:
    doc = bundle_make.build(
        bundle_make.empty_fit(),
        profile.to_json(),
        PolicyParams(),
        created=CREATED,
        ttlctl_version="test",
        provenance={"test": True},
    )
    bundle_make.write(doc, path)
    return path


def _scheduler(bundle: Path, budget: int) -> Any:
    engine = SimSchedulerConfig(
        kv_tokens=64 * 16,
        block_size=16,
        max_num_batched_tokens=budget,
        max_num_seqs=8,
        max_model_len=2048,
    )
    with quiet_vllm():
        return build(engine, async_scheduling=False, bundle=bundle).scheduler


def test_each_engine_prices_a_rebuild_in_its_own_steps(tmp_path: Path) -> None:
    profile = _profile()
    assert profile.chunk_tokens == MEASURED
    bundle = _bundle(tmp_path / "bundle.json", profile)
    prices = {}
    for budget in (64, 256):
        sched = _scheduler(bundle, budget)
        assert sched.scheduler_config.max_num_batched_tokens == budget
        policy = sched.ttl.policy
        price = policy.rebuild_s(TOKENS, False)
        assert price == profile.rebuild_prefill_s(TOKENS, budget)
        assert policy.benefit(TOKENS, eta=0.0) == price
        # a reload is priced as before (no steps)
        assert policy.rebuild_s(TOKENS, True) == profile.reload_s(TOKENS)
        # a new bundle file, read by the watcher, is priced for the same engine
        os.utime(bundle, ns=(budget, budget))
        assert sched.ttl_watcher.poll(1e9)
        assert sched.ttl_watcher.policy is not policy
        assert sched.ttl_watcher.policy.rebuild_s(TOKENS, False) == price
        prices[budget] = price
    # 16 steps of 64 tokens pay the fixed cost 12 more times than 4 steps of 256
    assert profile.prefill_fixed_s > 0
    assert prices[64] - prices[256] == pytest.approx(12 * profile.prefill_fixed_s, rel=1e-9)
    # the profile's own budget (one step of 2048) is not what either engine charges
    assert profile.rebuild_s(TOKENS, False) not in prices.values()


def test_the_simulator_prices_a_bundle_as_the_plugin(tmp_path: Path) -> None:
    """A replay's continuum with a bundle prices in steps of the simulated engine's budget."""
    profile = _profile()
    doc = bundle_mod.read(_bundle(tmp_path / "bundle.json", profile))
    sched = _scheduler(tmp_path / "bundle.json", 64)
    policy = make(PolicySpec("continuum", bundle=doc), {}, lambda t, o: -1.0, 64)
    ttl = policy.ttl  # type: ignore[attr-defined]
    assert ttl.rebuild_s(TOKENS, False) == sched.ttl.policy.rebuild_s(TOKENS, False)
    assert ttl.rebuild_s(TOKENS, False) == profile.rebuild_prefill_s(TOKENS, 64)


def test_an_engine_without_its_budget_says_so_and_prices_in_the_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler whose vLLM config cannot be read (no ``scheduler_config``) warns once
    and prices a miss in the budget the bundle's profile was measured with."""
    profile = _profile()
    bundle = _bundle(tmp_path / "bundle.json", profile)
    known = _scheduler(bundle, 64)
    assert not [w for w in known.ttl_warnings if "max_num_batched_tokens" in w]
    setup = TTLMixin._ttl_setup

    def hidden(self: Any) -> None:
        config = self.__dict__.pop("scheduler_config")
        try:
            setup(self)
        finally:
            self.scheduler_config = config

    monkeypatch.setattr(TTLMixin, "_ttl_setup", hidden)
    sched = _scheduler(bundle, 64)
    warned = [w for w in sched.ttl_warnings if "max_num_batched_tokens" in w]
    assert len(warned) == 1 and "unknown" in warned[0]
    price = sched.ttl.policy.rebuild_s(TOKENS, False)
    assert price == profile.rebuild_prefill_s(TOKENS, MEASURED)
    assert price != known.ttl.policy.rebuild_s(TOKENS, False)
