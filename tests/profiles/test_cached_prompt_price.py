"""A prefill on a cached prefix: what each cached token still costs
(``prefill.per_cached_token_s``) and what each new token's attention over a token already
in KV costs (``prefill.per_context_pair_s``).

A request that finds part of its prompt cached computes only the rest, but the server
still reads every prompt token and the engine still hashes every block; and its new tokens
attend over the cached ones at a cost of their own. A profile measured on a live server
prices both; the simulator charges the first once, in the step that computes the request's
first chunk, and the second in every chunk over what is in KV before it (a cached prefix
or the prompt's earlier chunks) — on both backends, so that a follow-up call on an idle
engine replays in exactly its documented price, and a chunked rebuild in the one price.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from profiles.cost import ProfileCostModel
from profiles.profile_read import ProfileError, from_json
from profiles.schema import Profile
from replay.request import SimRequest
from replay.step_price import first_chunk_cached
from tests.profiles.made import quadratic_profile
from ttlctl.cli import app
from ttlctl.trace.io import write

A, B, Q, STEP, CACHED, PAIR = 0.002, 2e-5, 3e-10, 0.005, 4e-6, 2e-10


def _profile(cached: float = CACHED, pair: float | None = PAIR) -> Profile:
    p = quadratic_profile(A, B, Q, STEP, includes_step=True)
    doc = p.to_json()
    if cached:
        doc["prefill"]["per_cached_token_s"] = cached
    if pair is not None:
        doc["prefill"]["per_context_pair_s"] = pair
    return from_json(doc)


# ------------------------------------------------------------------ the document


def test_the_terms_are_read_written_and_checked() -> None:
    p = _profile()
    assert (p.prefill.per_cached_token_s, p.prefill.per_context_pair_s) == (CACHED, PAIR)
    doc = p.to_json()
    assert (doc["prefill"]["per_cached_token_s"], doc["prefill"]["per_context_pair_s"]) == (
        CACHED,
        PAIR,
    )
    assert from_json(json.loads(json.dumps(doc))) == p
    # absent (every profile written before the terms, and every profiler but the
    # server's): nothing charged for a cached token, attention priced by the quadratic,
    # and neither written back
    plain = quadratic_profile(A, B, Q, STEP, includes_step=True)
    assert plain.prefill.per_cached_token_s == 0.0 and plain.prefill.per_context_pair_s is None
    assert not {"per_cached_token_s", "per_context_pair_s"} & set(plain.to_json()["prefill"])
    # a null reads as absent, for both
    nulls = json.loads(json.dumps(doc))
    nulls["prefill"] |= {"per_cached_token_s": None, "per_context_pair_s": None}
    assert from_json(nulls).prefill == plain.prefill
    for field, bad, match in (
        ("per_cached_token_s", -1e-6, r"prefill\.per_cached_token_s is -1e-06; .* >= 0$"),
        ("per_cached_token_s", math.inf, r"prefill\.per_cached_token_s is inf; .*finite"),
        ("per_context_pair_s", -1e-9, r"prefill\.per_context_pair_s is -1e-09; .* >= 0$"),
        ("per_context_pair_s", math.nan, r"prefill\.per_context_pair_s is nan; .*finite"),
    ):
        wrong = json.loads(json.dumps(doc))
        wrong["prefill"][field] = bad
        with pytest.raises(ProfileError, match=match):
            from_json(wrong)


def test_a_step_charges_the_cached_tokens_of_first_chunks_only() -> None:
    cost = ProfileCostModel(_profile())
    fresh = cost.step_s([(1024, 512)], 2, 3000)  # above the floor of its decodes alone
    assert fresh == pytest.approx(A + B * 512 + Q * 512**2 + PAIR * 1024 * 512 + 2e-4 + 3000e-8)
    assert cost.step_s([(1024, 512)], 2, 3000, 1024) == pytest.approx(fresh + 1024 * CACHED)
    # a profile without the terms prices a cached prefix as before: the quadratic's increment
    plain = ProfileCostModel(_profile(cached=0.0, pair=None))
    assert plain.step_s([(1024, 128)], 0, 0, 1024) == pytest.approx(
        A + B * 128 + Q * (1152**2 - 1024**2)
    )


@pytest.mark.parametrize("pair", [PAIR, None])
def test_a_chunked_rebuild_sums_to_the_one_price(pair: float | None) -> None:
    p = _profile(pair=pair)
    cost = ProfileCostModel(p)
    for tokens, chunk in ((700, 8192), (5000, 2048), (4096, 1024)):
        done, steps = 0, 0.0
        while done < tokens:
            n = min(chunk, tokens - done)
            steps += cost.step_s([(done, n)], 0, 0)
            done += n
        assert steps == pytest.approx(p.rebuild_prefill_s(tokens, chunk), rel=1e-12)
        assert cost.rebuild_s(tokens, chunk) == pytest.approx(steps, rel=1e-12)
    # one step: the quadratic itself, whatever the pairs across chunks cost
    assert p.rebuild_prefill_s(700) == pytest.approx(A + B * 700 + Q * 700**2)


# ------------------------------------------------------------------ replayed


def _two_calls(folder: Path, first: int, added: int) -> Path:
    """One program: a call of ``first`` prompt tokens and one output token, then, after
    a second's pause, a call repeating that stream plus ``added`` new tokens."""
    trace = folder / "two.parquet"
    write(
        pl.LazyFrame(
            {
                "program_id": ["p", "p"],
                "turn": [0, 1],
                "arrival_s": [0.0, None],
                "input_tokens": [first, first + 1 + added],
                "output_tokens": [1, 1],
                "tool_s": [1.0, None],
                "is_last": [False, True],
            }
        ),
        trace,
    )
    return trace


@pytest.mark.parametrize("backend", ["fast", "vllm"])
def test_a_follow_up_call_on_an_idle_engine_replays_in_its_price(
    tmp_path: Path, backend: str
) -> None:
    if backend == "vllm":
        pytest.importorskip("vllm", reason="--backend vllm runs vLLM's own scheduler")
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(_profile().to_json()))
    first, added, block = 512, 200, 16
    trace = _two_calls(tmp_path, first, added)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "vllm", "--profile", str(profile),
            "--backend", backend, "--max-num-batched-tokens", "4096",
            "--max-model-len", "2048", "--kv-tokens", "4096", "--block-size", str(block),
            "--no-timing", "--json", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (result,) = json.loads(out.read_text())["results"]
    # the first call's prompt is computed and cached in whole blocks; the second finds
    # them and computes the rest
    hit = first // block * block
    prompt = first + 1 + added
    p = _profile()
    fresh = p.rebuild_prefill_s(first)
    new = prompt - hit
    follow = A + B * new + Q * new**2 + PAIR * hit * new + CACHED * hit
    assert result["ttft_mean_s"] == pytest.approx((fresh + follow) / 2, rel=1e-9)


def test_only_a_requests_first_chunk_pays_and_only_once() -> None:
    def request(hit: int, loaded: int = 0) -> SimRequest:
        return SimRequest(
            rid=0, program="p", turn=1, arrival=0.0, program_start=0.0, prompt=2000,
            output=4, reusable=1800, tool=None, is_last=False, hit_tokens=hit,
            loaded_tokens=loaded,
        )  # fmt: skip

    req = request(768)
    assert first_chunk_cached(req, 768) == 768
    assert first_chunk_cached(req, 768 + 512) == 0  # a later chunk of the same prompt
    req.preemptions = 1  # resumed: read and hashed when it first arrived
    assert first_chunk_cached(req, 768) == 0
    # found in the cache or reloaded from the host tier: both admitted without compute
    assert first_chunk_cached(request(512, loaded=256), 768) == 768
    assert first_chunk_cached(request(0), 0) == 0
