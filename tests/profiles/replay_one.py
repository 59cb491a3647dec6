"""One call on an idle engine, replayed as a user would (`ttlctl replay --policy vllm`):
what TTFT the simulator gives a prefill of ``n`` tokens under a profile."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from profiles.profile_read import load
from profiles.schema import Profile
from ttlctl.cli import app
from ttlctl.trace.io import write


def one_call_ttft(profile: Path | str, tokens: int, chunk: int, folder: Path) -> float:
    """TTFT of one call of ``tokens`` prompt tokens and 1 output token, alone on the
    fast backend with a step budget of ``chunk`` tokens and memory to spare."""
    trace = folder / f"one-{tokens}.parquet"
    write(
        pl.LazyFrame(
            {
                "program_id": ["p"],
                "turn": [0],
                "arrival_s": [0.0],
                "input_tokens": [tokens],
                "output_tokens": [1],
                "is_last": [True],
            }
        ),
        trace,
    )
    out = folder / f"one-{tokens}.json"
    length = max(tokens + 16, 16)
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "vllm", "--profile", str(profile),
            "--max-num-batched-tokens", str(chunk), "--max-model-len", str(length),
            "--kv-tokens", str(length + 64), "--no-timing", "--json", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (result,) = json.loads(out.read_text())["results"]
    assert result["engine_steps"] == -(-tokens // chunk), result
    return float(result["ttft_mean_s"])


def replay_budget(profile: Profile, tokens: int) -> int:
    """The step budget to replay a measured point with: the one it was measured with
    (an engine-step profile), else one step for the whole prompt (a forward pass or a
    declared formula at ``tokens``)."""
    return profile.chunk_tokens or tokens


def tolerance(profile: Profile, seconds: float) -> float:
    """The fit's rmse or 2% of the measured time, whichever is larger."""
    return max(profile.prefill.rmse_s or 0.0, 0.02 * seconds)


def _declared(p: Profile, tokens: int, chunk: int | None) -> float:
    """The documented price, from the raw coefficients: each of the steps pays the fixed
    cost (a, plus decode.step_s when the fit leaves the step out) and the tokens b·n +
    q·n² in all (the increments of the chunks add up to the whole)."""
    steps = 1 if chunk is None else math.ceil(tokens / chunk)
    pre = p.prefill
    fixed = pre.a + (0.0 if pre.includes_step else p.decode.step_s)
    return steps * fixed + pre.b * tokens + pre.q * tokens * tokens


def check_replays_its_points(path: Path, folder: Path) -> None:
    """The replay of one call at each measured point: the declared price exactly (with the
    profile's wake: the call finds the engine idle since it started, and its first step pays
    the wake after the longest spell measured), and the measured time, taken on a busy
    engine, within the fit's rmse or 2% of that price less the wake (see
    :func:`point_tolerance`)."""
    p = load(path)
    assert p.prefill.points, f"{path}: no measured points"
    wake = p.wake_s(math.inf)
    for tokens, seconds in p.prefill.points:
        chunk = replay_budget(p, tokens)
        ttft = one_call_ttft(path, tokens, chunk, folder)
        declared = _declared(p, tokens, chunk) + wake
        where = f"{path.name} at {tokens} tokens ({chunk}-token steps)"
        assert math.isclose(ttft, declared, rel_tol=1e-9), f"{where}: {ttft} s, priced {declared}"
        allowed = point_tolerance(p, seconds)
        assert abs(ttft - wake - seconds) <= allowed, (
            f"{where}: replayed {ttft} s less the wake {wake} s, measured {seconds} s "
            f"(allowed ±{allowed})"
        )


def point_tolerance(p: Profile, seconds: float) -> float:
    """The fit's rmse or 2% of the measured time, whichever is larger; an rmse over N
    points allows one point's residual up to √N·rmse (all the misfit on that point), so
    that is the bound a single point is held to."""
    n = max(1, len(p.prefill.points))
    return max(tolerance(p, seconds), math.sqrt(n) * (p.prefill.rmse_s or 0.0))
