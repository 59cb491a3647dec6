"""An engine's wake: the first step after an idle spell costs what the profile measured.

A call that reaches an engine which has had nothing to run for a while runs slower than the
same call on a busy engine (``profile.wake``: extra seconds by idle seconds, measured by
``ttlctl profile --engine``). Every backend charges it through one rule
(:func:`replay.step_price.wake_after`): the first step that computes something after an
idle spell pays the profile's wake of that spell, an engine starts long idle, and a step
that starts as the one before it ends pays nothing. So a call on an idle engine replays in
its price plus the wake, on the fast backend (merged or one token at a time, synchronous or
async), on vLLM's own scheduler, and on every replica of a fleet.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from profiles.cost import ConstantCostModel, ProfileCostModel
from profiles.profile_read import from_json
from profiles.schema import Profile
from replay.step_price import wake_after
from tests.profiles.made import quadratic_profile
from ttlctl.cli import app
from ttlctl.trace.io import write

A, B, Q, STEP = 0.002, 2e-5, 3e-10, 0.005
#: (idle seconds, extra seconds): 4 ms after 0.1 s idle, 10 ms after 1 s or more
WAKE = ((0.1, 0.004), (1.0, 0.010))


def _profile(wake: tuple[tuple[float, float], ...] = WAKE) -> Profile:
    doc = quadratic_profile(A, B, Q, STEP, includes_step=True).to_json()
    if wake:
        doc["wake"] = [list(p) for p in wake]
    return from_json(doc)


def test_the_rule() -> None:
    cost = ProfileCostModel(_profile())
    assert wake_after(cost, -math.inf, 0.0) == pytest.approx(0.010)  # long idle: the last point
    assert wake_after(cost, 5.0, 5.0) == 0.0  # starts as the step before it ends
    assert wake_after(cost, 5.0, 4.0) == 0.0  # queued behind it
    assert wake_after(cost, 5.0, 5.05) == pytest.approx(0.002)  # from (0, 0) to the first
    assert wake_after(cost, 5.0, 5.55) == pytest.approx(0.007)  # between the points
    assert wake_after(cost, 5.0, 9.0) == pytest.approx(0.010)  # flat past the last
    # without a measured wake (every profile before it, every offline profiler): nothing
    assert wake_after(ProfileCostModel(_profile(())), -math.inf, 3.0) == 0.0
    assert wake_after(ConstantCostModel(), -math.inf, 3.0) == 0.0


def _trace(folder: Path, pause: float) -> Path:
    """Program ``p``: a call of 512 prompt tokens and one output token at 0 s, then after
    ``pause`` seconds of tool a call of 900 fresh-looking tokens (no reuse); program ``q``:
    one call of 300 tokens at 0 s, in the same first step as ``p``'s."""
    trace = folder / "t.parquet"
    write(
        pl.LazyFrame(
            {
                "program_id": ["p", "p", "q"],
                "turn": [0, 1, 0],
                "arrival_s": [0.0, None, 0.0],
                "input_tokens": [512, 900, 300],
                "output_tokens": [1, 1, 1],
                "reused_tokens": [0, 0, 0],
                "tool_s": [pause, None, None],
                "is_last": [False, True, True],
            }
        ),
        trace,
    )
    return trace


BACKENDS = [
    pytest.param(["--backend", "fast"], id="fast"),
    pytest.param(["--backend", "fast", "--per-token"], id="per-token"),
    pytest.param(["--backend", "fast", "--async-scheduling"], id="async"),
    pytest.param(["--backend", "vllm"], id="vllm"),
    pytest.param(["--backend", "vllm", "--async-scheduling"], id="vllm-async"),
    pytest.param(["--backend", "fast", "--replicas", "1", "--router", "round-robin"], id="fleet1"),
    pytest.param(["--backend", "fast", "--replicas", "2", "--router", "round-robin"], id="fleet2"),
]


def _replay(tmp_path: Path, profile: Profile, pause: float, args: list[str]) -> dict:
    path = tmp_path / f"p{len(profile.wake)}.json"
    path.write_text(json.dumps(profile.to_json()))
    out = tmp_path / f"r{len(profile.wake)}.json"
    res = CliRunner().invoke(
        app,
        [
            "replay", str(_trace(tmp_path, pause)), "--policy", "vllm", "--profile", str(path),
            "--max-num-batched-tokens", "4096", "--max-model-len", "2048",
            "--kv-tokens", "8192", "--block-size", "16", "--no-timing", "--json", str(out),
            *args,
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (result,) = json.loads(out.read_text())["results"]
    return result


@pytest.mark.parametrize("args", BACKENDS)
@pytest.mark.parametrize(("pause", "second"), [(0.55, 0.007), (2.0, 0.010)])
def test_a_call_after_an_idle_spell_pays_the_wake(
    tmp_path: Path, args: list[str], pause: float, second: float
) -> None:
    if "vllm" in args:
        pytest.importorskip("vllm", reason="--backend vllm runs vLLM's own scheduler")
    woken = _replay(tmp_path, _profile(), pause, args)
    warm = _replay(tmp_path, _profile(()), pause, args)
    p = _profile(())
    if "2" in args:  # two replicas: p and q each start an engine of their own
        first_p, first_q = p.rebuild_prefill_s(512), p.rebuild_prefill_s(300)
    else:  # one engine: both first calls in its first step
        first_p = first_q = A + B * 812 + Q * (512**2 + 300**2)
    second_call = p.rebuild_prefill_s(900)
    # each engine's first step pays the long-idle wake (one step, one wake, for both
    # calls on one engine); p's second call the wake of its pause (its engine idled from
    # the end of p's first call, with which q's ended or which q's engine never served)
    wakes = 0.010 * 2 + second
    assert warm["ttft_mean_s"] == pytest.approx((first_p + first_q + second_call) / 3, rel=1e-9)
    assert woken["ttft_mean_s"] == pytest.approx(
        (first_p + first_q + second_call + wakes) / 3, rel=1e-9
    )
    assert woken["jct_mean_s"] - warm["jct_mean_s"] == pytest.approx(wakes / 2, rel=1e-9)
