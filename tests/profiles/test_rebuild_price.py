"""One price for a rebuild (docs/replay.md, "What a step costs").

Every shipped profile says what its prefill numbers are (``prefill.includes_step``);
one call of ``n`` tokens on an idle engine replays (`ttlctl replay --policy vllm`,
fast backend) in the profile's prefill time at ``n``: its measured point (roofline:
its declared formula); the policy's benefit B, the baselines and a bundle-less
continuum price the same rebuild with the same function.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitting.policy_params import PolicyParams
from profiles import shipped
from profiles.cost import ConstantCostModel, ProfileCostModel, rebuild_pricer
from profiles.profile_read import ProfileError, from_json, load
from tests.profiles.made import quadratic_profile
from tests.profiles.replay_one import check_replays_its_points, one_call_ttft
from ttlctl import __version__, bundle_make
from ttlctl import bundle as bundle_mod

A, B, Q, STEP = 0.002, 2e-5, 3e-10, 0.005


# ------------------------------------------------------------ what the numbers mean


@pytest.mark.parametrize("name", shipped.names())
def test_every_shipped_profile_states_what_its_prefill_is(name: str) -> None:
    raw = json.loads((shipped.DATA / f"{name}.json").read_text())
    assert isinstance(raw["prefill"].get("includes_step"), bool), name
    # measured forward passes, TTFTs and roofline formulas are whole steps
    assert raw["prefill"]["includes_step"] is True


def test_an_old_profile_reads_with_the_documented_default() -> None:
    new = load(shipped.DATA / "llama-3.1-8b-h100.json").to_json()
    old = json.loads(json.dumps(new))
    del old["prefill"]["includes_step"]
    assert from_json(old).prefill.includes_step is True
    # only the vLLM step profiler wrote source.prefill_steps: its fit is on top of step_s
    stepped = {**old, "source": {**old["source"], "prefill_steps": [[0, 512, 0.01]]}}
    assert from_json(stepped).prefill.includes_step is False
    for bad in ("yes", 1, None):
        wrong = json.loads(json.dumps(new))
        wrong["prefill"]["includes_step"] = bad
        with pytest.raises(ProfileError, match="includes_step"):
            from_json(wrong)
    assert from_json(json.loads(json.dumps(new))).to_json() == new


# ------------------------------------------------------------ the simulator's steps


@pytest.mark.parametrize("name", shipped.names())
def test_one_call_on_an_idle_engine_replays_in_the_profiles_prefill_time(
    name: str, tmp_path: Path
) -> None:
    check_replays_its_points(shipped.DATA / f"{name}.json", tmp_path)


def test_tiny_cpu_is_no_longer_charged_its_step_twice(tmp_path: Path) -> None:
    """The case the issue measured: 128 tokens replayed in 4.49 ms against 3.43 ms measured."""
    path = shipped.DATA / "tiny-cpu.json"
    p = load(path)
    ttft = one_call_ttft(path, 128, 4096, tmp_path)
    assert ttft == pytest.approx(p.prefill_s(128), rel=1e-12)
    assert abs(ttft - 0.003427) / 0.003427 < 0.05


@pytest.mark.parametrize("includes_step", [True, False])
def test_chunking_adds_a_step_fixed_cost_per_further_chunk(
    includes_step: bool, tmp_path: Path
) -> None:
    points = ((1024, 0.1), (4096, 0.2), (8192, 0.3))
    p = quadratic_profile(A, B, Q, STEP, includes_step=includes_step, points=points)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(p.to_json()))
    fixed = A if includes_step else A + STEP
    assert p.prefill_fixed_s == fixed
    one = p.rebuild_prefill_s(10000)  # one step: the fit (plus step_s when it leaves it out)
    assert one == pytest.approx(p.prefill_s(10000) + fixed - A, rel=1e-12)
    chunked = one_call_ttft(path, 10000, 4096, tmp_path)  # three steps
    assert chunked == pytest.approx(one + 2 * fixed, rel=1e-9)
    assert chunked == pytest.approx(p.rebuild_prefill_s(10000, 4096), rel=1e-9)
    cost = ProfileCostModel(p)
    steps = [cost.step_s([(c, min(4096, 10000 - c))], 0, 0) for c in (0, 4096, 8192)]
    assert sum(steps) == pytest.approx(chunked, rel=1e-9)
    # decodes in a step that prefills add their own terms, not a second fixed cost
    mixed = cost.step_s([(0, 512)], 4, 4000)
    assert mixed == pytest.approx(cost.step_s([(0, 512)], 0, 0) + 4 * 1e-4 + 4000 * 1e-8)


@pytest.mark.parametrize("name", shipped.names())
def test_adding_work_to_a_step_never_makes_it_cheaper(name: str) -> None:
    cost = ProfileCostModel(load(shipped.DATA / f"{name}.json"))
    for seqs, kv in ((1, 100), (8, 8000), (64, 500_000)):
        for chunk in (1, 16, 512, 8192):
            both = cost.step_s([(1000, chunk)], seqs, kv)
            assert both >= cost.step_s([], seqs, kv) - 1e-15, (seqs, kv, chunk)
            assert both >= cost.step_s([(1000, chunk)], 0, 0) - 1e-15, (seqs, kv, chunk)
            assert cost.step_s([(1000, chunk + 1)], seqs, kv) >= both


# ------------------------------------------------------------ one price everywhere


@pytest.mark.parametrize("name", ["tiny-cpu", "llama-3.1-8b-h100"])
def test_the_policy_the_baselines_and_the_simulator_share_one_price(name: str) -> None:
    p = load(shipped.DATA / f"{name}.json")
    cost = ProfileCostModel(p)
    for tokens, chunk in ((300, 8192), (5000, 2048), (40000, 8192)):
        price = p.rebuild_prefill_s(tokens, chunk)
        # the simulator: the steps of a lone prefill
        done, steps = 0, 0.0
        while done < tokens:
            n = min(chunk, tokens - done)
            steps += cost.step_s([(done, n)], 0, 0)
            done += n
        assert steps == pytest.approx(price, rel=1e-9)
        # the baselines (InferCept's Tfwd, the oracle) and a bundle-less continuum
        assert cost.rebuild_s(tokens, chunk) == pytest.approx(price, rel=1e-12)
        assert rebuild_pricer(cost, chunk)(tokens, False) == pytest.approx(price, rel=1e-12)
        assert rebuild_pricer(cost, chunk)(tokens, True) == p.reload_s(tokens)
    # a bundle's policy: B = T·η + the profile's price (its measured budget, or one step)
    doc = bundle_make.build(
        bundle_make.empty_fit(),
        p.to_json(),
        PolicyParams(),
        created="1970-01-01T00:00:00+00:00",
        ttlctl_version=__version__,
        provenance={"made_by": "test"},
    )
    policy = bundle_mod.policy_from(doc)
    assert policy.benefit(5000, eta=0.0) == pytest.approx(p.rebuild_prefill_s(5000), rel=1e-12)
    assert p.rebuild_prefill_s(5000) == pytest.approx(p.prefill_s(5000), rel=1e-12)


def test_a_step_profile_prices_b_in_its_own_steps() -> None:
    """A profile measured in engine steps (the budget recorded) prices B in those steps."""
    flags = {"flags": {"max_num_batched_tokens": 2048}}
    p = quadratic_profile(A, B, Q, STEP, includes_step=False, source=flags)
    assert p.chunk_tokens == 2048
    assert p.rebuild_s(5000, False) == pytest.approx(3 * (A + STEP) + B * 5000 + Q * 5000**2)
    assert p.rebuild_s(5000, False, chunk=8192) == pytest.approx(A + STEP + B * 5000 + Q * 5000**2)


def test_the_constant_model_prices_a_rebuild_as_its_steps() -> None:
    const = ConstantCostModel()
    steps = [const.step_s([(c, min(100, 250 - c))], 0, 0) for c in (0, 100, 200)]
    assert const.rebuild_s(250, 100) == pytest.approx(sum(steps))
    assert const.rebuild_s(0, 100) == 0.0
