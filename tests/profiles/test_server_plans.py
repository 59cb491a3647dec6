"""What ``ttlctl profile --engine`` plans to time, before any request is sent: the prompt
lengths of the prefill (``profiles.server_target.contexts_to_time``), the decode batches
(``profiles.server_decode.decode_plan``) and the new sizes
(``profiles.server_new_shape.new_lengths``). Pure functions: no server."""

from __future__ import annotations

import random

import pytest

from profiles.server_decode import DECODE_CONCURRENCY, KV_FILL, decode_plan
from profiles.server_new_shape import NEW_SHAPE_SIZES, new_lengths
from profiles.server_target import ServerMeasureError, Target, contexts_to_time

CTXS = [256, 512, 1024, 2048]
OUT = 16


def _target(max_model_len: int = 4096, kv: int | None = None, budget: int | None = None) -> Target:
    return Target("http://s", "m", max_model_len, kv, "0.32.0", 12288, "metrics", budget)


def test_the_decode_batches_are_1_4_and_8_up_to_the_longest_prompt() -> None:
    """docs/commands.md: the decode pace of batches of 1, 4 and 8 streamed requests, run up
    to the longest prompt timed; one sequence also at the short and middle lengths."""
    plan = decode_plan(CTXS, OUT, 4096, None)
    assert {s for s, _ in plan} == set(DECODE_CONCURRENCY) == {1, 4, 8}
    for seqs in DECODE_CONCURRENCY:
        assert (seqs, 2048) in plan and (seqs, 256) in plan
    assert (1, (256 + 2048) // 2) in plan
    assert len(plan) == len(set(plan))


def test_a_server_of_unknown_length_decodes_up_to_the_longest_prompt() -> None:
    """``max_model_len`` 0 is unknown, not a length: the prompts bound the batches."""
    assert decode_plan(CTXS, OUT, 0, None) == decode_plan(CTXS, OUT, 10**6, None)
    assert (1, 2048) in decode_plan(CTXS, OUT, 0, None)


def test_every_decode_batch_fits_the_servers_length_and_its_kv_cache() -> None:
    for max_model_len, kv in ((2048, None), (4096, 8000), (4096, 3000)):
        plan = decode_plan(CTXS, OUT, max_model_len, kv)
        assert plan
        for seqs, ctx in plan:
            assert ctx >= 16 and ctx + OUT <= max_model_len
            if kv is not None:
                assert seqs * (ctx + OUT) <= kv * KV_FILL, (max_model_len, kv, seqs, ctx)


def test_the_prefill_grid_stays_within_the_servers_step_budget() -> None:
    """Each timed prefill is one step: the default grid stops at the budget the server
    tells, and a context of exactly the budget is one step."""
    grid = contexts_to_time(_target(budget=1024), None, OUT)
    assert grid and max(grid) <= 1024
    assert contexts_to_time(_target(budget=1024), [256, 512, 1024], OUT) == [256, 512, 1024]
    with pytest.raises(ServerMeasureError, match="over the server's max_num_batched_tokens"):
        contexts_to_time(_target(budget=1024), [256, 512, 1025], OUT)


def test_given_contexts_fit_the_server_to_the_token() -> None:
    """A context and its output tokens may fill the server's length and KV cache exactly;
    one token more is refused; fewer than three lengths are refused."""
    assert contexts_to_time(_target(4096), [256, 512, 4096 - OUT], OUT)[-1] == 4096 - OUT
    with pytest.raises(ServerMeasureError, match="does not fit max_model_len 4096"):
        contexts_to_time(_target(4096), [256, 512, 4096 - OUT + 1], OUT)
    assert contexts_to_time(_target(8192, kv=3000), [256, 512, 3000 - OUT], OUT)
    with pytest.raises(ServerMeasureError, match=r"KV cache \(3000 tokens\)"):
        contexts_to_time(_target(8192, kv=3000), [256, 512, 3000 - OUT + 1], OUT)
    with pytest.raises(ServerMeasureError, match="at least 3 context lengths"):
        contexts_to_time(_target(), [256, 512], OUT)


def test_new_sizes_lie_strictly_between_the_prompts_and_avoid_the_others() -> None:
    got = new_lengths([10, 14], [], random.Random(0))
    assert got == [11, 12, 13]  # a short span: fewer than NEW_SHAPE_SIZES
    many = new_lengths(CTXS, CTXS, random.Random(1))
    assert len(many) == NEW_SHAPE_SIZES == len(set(many)) and many == sorted(many)
    assert all(256 < n < 2048 and n not in CTXS for n in many)
    assert new_lengths([10, 14], [12], random.Random(0)) == [11, 13]
