"""A profile measured in vLLM engine steps, without vLLM: the plan, the step fit, the price."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from profiles import fitmath, models
from profiles.cost import ProfileCostModel
from profiles.grid import engine_contexts
from profiles.torch_setup import MeasureError, resolve_contexts
from profiles.vllm_plan import KV_MARGIN, VllmMeasureError, decode_tokens, make_plan
from tests.profiles.made import quadratic_profile
from ttlctl.cli import app
from ttlctl.errors import TtlctlError

REPO = Path(__file__).resolve().parents[2]
A, B, Q, STEP = 0.003, 2e-5, 3e-10, 0.006


def _chunks(tokens: int, chunk: int) -> list[tuple[int, int]]:
    return [(done, min(chunk, tokens - done)) for done in range(0, tokens, chunk)]


def test_step_fit_recovers_the_quadratic_from_chunked_steps() -> None:
    steps = [s for c in (1024, 4096, 16384, 32768) for s in _chunks(c, 8192)]
    seconds = [STEP + A + B * n + Q * ((c + n) ** 2 - c**2) for c, n in steps]
    fit = fitmath.fit_prefill_steps(
        [c for c, _ in steps], [n for _, n in steps], seconds, fixed_s=STEP
    )
    assert (fit.a, fit.b, fit.q) == pytest.approx((A, B, Q), rel=1e-6)
    assert fit.max_rel_error < 1e-9 and fit.rmse_s < 1e-12
    # without the fixed part, the intercept takes it
    alone = fitmath.fit_prefill_steps([c for c, _ in steps], [n for _, n in steps], seconds)
    assert alone.a == pytest.approx(A + STEP, rel=1e-6)


def test_step_fit_never_goes_negative_and_refuses_too_few() -> None:
    fit = fitmath.fit_prefill_steps(
        [0, 0, 0, 0], [100, 200, 400, 800], [0.01, 0.011, 0.012, 0.013], 0.02
    )
    assert min(fit.a, fit.b, fit.q) >= 0
    with pytest.raises(ValueError):
        fitmath.fit_prefill_steps([0, 0], [1, 2], [0.1, 0.2])
    with pytest.raises(ValueError):
        fitmath.fit_prefill_steps([0, 0, 0], [1, 0, 2], [0.1, 0.2, 0.3])


def test_priced_prefill_is_what_the_replay_charges() -> None:
    """A step-fitted (marginal) profile: each prefill-only step pays a and step_s."""
    profile = quadratic_profile(A, B, Q, STEP, includes_step=False)
    cost = ProfileCostModel(profile)
    # one step: the quadratic plus the decode step's fixed part (a prefill-only step)
    assert profile.rebuild_prefill_s(4096, 8192) == pytest.approx(profile.prefill_s(4096) + STEP)
    # several steps: each pays a and step_s; the b and q terms add up to the whole
    expected = sum(cost.step_s([chunk], 0, 0) for chunk in _chunks(20000, 8192))
    assert profile.rebuild_prefill_s(20000, 8192) == pytest.approx(expected)
    assert cost.rebuild_s(20000, 8192) == pytest.approx(expected)
    assert expected == pytest.approx(3 * (A + STEP) + B * 20000 + Q * 20000**2)


def test_engine_contexts_leave_room_and_reach_the_limit() -> None:
    assert engine_contexts(2047) == [128, 256, 512, 1024, 2047]
    assert engine_contexts(131071) == [1024 << i for i in range(7)] + [131071]
    assert engine_contexts(40960)[-2:] == [32768, 40960]
    assert engine_contexts(1100) == [128, 256, 512, 1024]


def test_plan_sizes_the_engine_to_what_it_measures() -> None:
    config = models.PRESETS["llama-3.1-8b"]
    plan = make_plan(config, "cuda", 0, where="8b", max_context=32768)
    assert plan.contexts == (1024, 2048, 4096, 8192, 16384, 32768)
    assert plan.enforce_eager is False and plan.dtype == "bfloat16"
    assert plan.max_model_len > 32768
    kv = models.kv_bytes_per_token(config)
    budget = plan.max_num_batched_tokens
    for b, c in plan.decode:  # every sequence fits its model length, every batch the cache
        top = c + decode_tokens(b, c, budget)
        assert top <= plan.max_model_len
        assert b * top * kv <= plan.kv_cache_bytes
    assert {b for b, _ in plan.decode} == {1, 8, 32}
    assert plan.max_model_len * kv <= plan.kv_cache_bytes
    args = plan.engine_args("/m", 0)
    assert args["load_format"] == "dummy" and args["skip_tokenizer_init"] is True
    assert args["async_scheduling"] is False and args["enforce_eager"] is False


def test_plan_refuses_with_one_line() -> None:
    tiny = models.PRESETS["tiny"]
    cases = [
        ({"contexts": [64, 128]}, "at least 3"),
        ({"contexts": [64, 128, 2048]}, r"^--contexts \[2048\] exceed the limit of 2047"),
        ({"contexts": [64, 128, 256], "max_context": 128}, r"exceed .* \(--max-context 128\)$"),
        ({"contexts": [0, 64, 128]}, "^--contexts must be positive"),
        ({"max_context": 8}, r"^tiny: --max-context 8 leaves a context limit of 8 tokens, too "),
        ({"dtype": "int8"}, "^--dtype int8: expected one of"),
        ({"max_num_batched_tokens": 8}, "--max-num-batched-tokens 8"),
    ]
    for kwargs, message in cases:
        with pytest.raises(VllmMeasureError, match=message) as err:
            make_plan(tiny, "cpu", 0, where="tiny", **kwargs)  # type: ignore[arg-type]
        assert "\n" not in str(err.value) and isinstance(err.value, TtlctlError)
    with pytest.raises(VllmMeasureError, match=r"141\.\d GB .* 16\.0 GB available on cpu"):
        make_plan(models.PRESETS["llama-3.1-70b"], "cpu", 16_000_000_000, where="70b")


def test_both_in_process_profilers_refuse_a_grid_by_one_rule() -> None:
    """Eager torch's and vLLM's profilers refuse the same faults of their grid in the same
    words (they were two copies of the rule, worded apart: vLLM's named no flag when
    --max-context left its default grid under three contexts); only what sets each one's
    limit (vLLM leaves the sampled token's place) and its default grid (vLLM's also times
    the limit itself) differ."""
    tiny = models.PRESETS["tiny"]  # 2,048 positions: torch's limit, vLLM's 2,047
    cases: list[tuple[list[int] | None, int | None, str]] = [
        ([0, 16, 32], None, r"^--contexts must be positive token counts, got \[0, 16, 32\]$"),
        (
            [16, 32],
            None,
            r"^--contexts \[16, 32\]: the prefill quadratic needs at least 3 distinct contexts$",
        ),
        ([16, 32, 9000], None, r"^--contexts \[9000\] exceed the limit of 204[78] tokens "),
        # a --max-context above the model's length does not set the limit: not named
        ([16, 32, 9000], 4096, r"tokens \(the model's (max_position_embeddings )?2048[^-]*\)$"),
        (
            [16, 32, 600],
            512,
            r"^--contexts \[600\] exceed the limit of 512 tokens "
            r"\(--max-context 512\)$",
        ),
        (
            None,
            20,
            r"^--max-context 20 leaves the default grid \[16(, 20)?\]: the prefill quadratic "
            r"needs at least 3 distinct contexts; give a larger --max-context or --contexts$",
        ),
    ]
    for grid, max_context, message in cases:
        with pytest.raises(MeasureError, match=message) as torch_says:
            resolve_contexts(grid, 2048, max_context)
        with pytest.raises(VllmMeasureError, match=message) as vllm_says:
            make_plan(tiny, "cpu", 0, where="tiny", contexts=grid, max_context=max_context)
        if "204" not in message and grid is not None:  # the same line but for the limit
            assert str(torch_says.value) == str(vllm_says.value)


def test_import_is_cheap() -> None:
    code = "import sys, profiles.measure_vllm; print('torch' in sys.modules, 'vllm' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert out.split() == ["False", "False"]


def test_without_vllm_the_cli_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "vllm.platforms", None)  # as if vLLM were not installed
    res = CliRunner().invoke(app, ["profile", "-o", str(tmp_path / "p.json"), "--device", "cpu"])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert "vLLM is not installed" in line and "--torch" in line


def test_a_short_models_grid_reaches_down_to_16_tokens_and_to_its_limit() -> None:
    """Powers of two from 1,024 up to the limit; below that, smaller powers of two down
    to 16 until there are four points (a power of two equal to the limit is one)."""
    from profiles.grid import default_contexts

    assert default_contexts(100) == [16, 32, 64]
    assert default_contexts(512) == [64, 128, 256, 512]
    assert default_contexts(2048) == [256, 512, 1024, 2048]
    assert default_contexts(8) == []


def test_a_partial_step_of_prompts_is_a_step() -> None:
    """The first sequence of a batch decodes while the others prefill, one step per
    ``budget`` tokens of prompts: one token past a whole step is one step (and one token)
    more."""
    for batch, budget in ((1, 8192), (4, 2048), (8, 16)):
        whole = budget // batch * batch
        more = decode_tokens(batch, whole // batch + 1, budget)
        assert more == decode_tokens(batch, whole // batch, budget) + 1


def test_the_smallest_limits_and_step_budget_are_taken() -> None:
    """A context limit of 16 tokens is the least taken, 15 refused; a step budget of the
    largest decode batch is the least taken, one token less refused, and the engine's
    max_num_seqs is 256 or the budget where that is less (vLLM takes no budget under its
    max_num_seqs, as a server of that budget is started). Regression: a budget from 16 to
    255 was first planned with max_num_seqs 256 and refused by vLLM after the copies were
    timed, then refused outright, though vLLM runs such a budget with a max_num_seqs no
    larger."""
    tiny = models.PRESETS["tiny"]
    plan = make_plan(tiny, "cpu", 0, where="tiny", contexts=[4, 8, 16], max_context=16)
    assert plan.contexts == (4, 8, 16)
    with pytest.raises(VllmMeasureError, match=r"--max-context 15 .* too short .*least 16\)$"):
        make_plan(tiny, "cpu", 0, where="tiny", contexts=[4, 8, 15], max_context=15)
    short = {**tiny, "max_position_embeddings": 10}  # the model's length sets it: named
    with pytest.raises(VllmMeasureError, match=r"^tiny: the model's 10 positions less the "):
        make_plan(short, "cpu", 0, where="tiny")
    plan = make_plan(tiny, "cpu", 0, where="tiny", max_num_batched_tokens=256)
    assert plan.decode and plan.engine_args("/m", 0)["max_num_seqs"] == 256
    for budget in (16, 64, 255):  # the CPU's largest decode batch is 16
        plan = make_plan(tiny, "cpu", 0, where="tiny", max_num_batched_tokens=budget)
        assert plan.engine_args("/m", 0)["max_num_seqs"] == budget
        assert plan.engine_args("/m", 0)["max_num_batched_tokens"] == budget
    with pytest.raises(VllmMeasureError, match=r"^--max-num-batched-tokens 15: .*at least 16$"):
        make_plan(tiny, "cpu", 0, where="tiny", max_num_batched_tokens=15)
    with pytest.raises(VllmMeasureError, match=r"^--max-num-batched-tokens 31: .*at least 32$"):
        make_plan(tiny, "cuda", 0, where="tiny", max_num_batched_tokens=31)
    big: dict[str, Any] = {"decode_batches": (1, 300), "max_context": 64}
    plan = make_plan(tiny, "cuda", 0, where="tiny", max_num_batched_tokens=300, **big)
    assert plan.engine_args("/m", 0)["max_num_seqs"] == 300
    with pytest.raises(VllmMeasureError, match=r"^--max-num-batched-tokens 299: .*at least 300$"):
        make_plan(tiny, "cuda", 0, where="tiny", max_num_batched_tokens=299, **big)


def test_fewer_than_three_decode_points_are_refused() -> None:
    """The decode step is fitted on three terms: two points are too few."""
    tiny = models.PRESETS["tiny"]
    with pytest.raises(VllmMeasureError, match="only 2 decode points fit"):
        make_plan(tiny, "cpu", 0, where="tiny", decode_batches=(1,))


def test_the_engine_takes_every_decode_batch_and_each_blocks_kv() -> None:
    """``max_num_seqs`` holds the largest batch (256 at least); with a KV block larger
    than the cache's granule, every sequence holds whole blocks and the cache holds them
    with its margin."""
    tiny = models.PRESETS["tiny"]
    kv = models.kv_bytes_per_token(tiny)
    big = make_plan(tiny, "cuda", 0, where="tiny", decode_batches=(1, 300), max_context=64)
    assert (300, 16) in big.decode and big.engine_args("/m", 0)["max_num_seqs"] == 300
    assert make_plan(tiny, "cpu", 0, where="tiny").engine_args("/m", 0)["max_num_seqs"] == 256
    for kind in ("cpu", "cuda"):
        block = 1024
        plan = make_plan(tiny, kind, 0, where="tiny", block_size=block)
        budget = plan.max_num_batched_tokens
        for b, c in plan.decode:
            blocks = -(-(c + decode_tokens(b, c, budget)) // block)
            assert plan.kv_cache_bytes >= KV_MARGIN * b * blocks * block * kv, (kind, b, c)


def test_short_dtype_names_are_the_dtypes() -> None:
    tiny = models.PRESETS["tiny"]
    for short, name in (("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")):
        assert make_plan(tiny, "cpu", 0, where="tiny", dtype=short).dtype == name


def test_a_gpu_measurement_is_no_cpu_profile() -> None:
    """``source.cpu_profile`` is true on a CPU only (docs/commands.md), and the profile is
    named by the device kind; fitted without vLLM from timings made to a known step price."""
    pytest.importorskip("vllm")
    from profiles.schema import Reload
    from profiles.vllm_fit import fitted_profile

    tiny = models.PRESETS["tiny"]
    budget = 512
    steps = [
        (ctx, n, STEP + A + B * n + Q * ((ctx + n) ** 2 - ctx**2))
        for c in (128, 512, 1024, 2047)
        for ctx, n in _chunks(c, budget)
    ]
    points = [(128, steps[0][2])]  # 128 tokens: one step
    decode = [(b, kv, STEP + 1e-4 * b + 1e-7 * kv) for b, kv in ((1, 200), (4, 900), (8, 300))]
    notes = {"reload": "r", "reload_points": [], "reload_max_rel_error": 0.0}
    for kind in ("cpu", "cuda"):
        plan = make_plan(tiny, kind, 0, where="tiny", max_num_batched_tokens=budget)
        measured = {
            "decode": decode,
            "steps": steps,
            "points": points,
            "flags": {"max_num_batched_tokens": budget},
            "device": kind,
            "kv_bytes": models.kv_bytes_per_token(tiny),
            "torch": "t",
            "threads": 1,
            "cached_tokens_seen": 0,
        }
        profile = fitted_profile("tiny", tiny, plan, measured, Reload(1e9, 1e-5), notes, 1, 0)
        assert profile.name == f"tiny-{kind}"
        assert profile.source["cpu_profile"] is (kind == "cpu")
        assert profile.source["device_kind"] == kind
