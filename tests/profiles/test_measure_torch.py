"""`ttlctl profile --torch` measurements (profiles/measure_torch.py, eager torch, not vLLM) on the
CPU with the tiny model.

The tiny preset (2 layers, 4096 vocabulary) is built locally with random weights;
one measurement over 64..1024 tokens takes a few seconds and is shared by the
tests of this module. Timings themselves are noisy on a shared machine, so the
tests check the shape of the profile (what was measured, signs, monotonicity,
the JSON round trip), not the speeds.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

pytest.importorskip("torch")
pytest.importorskip("transformers")

from profiles.grid import default_contexts
from profiles.measure_torch import measure
from profiles.models import PRESETS
from profiles.profile_read import from_json
from profiles.reload_copy import fit_reload
from profiles.schema import Profile
from profiles.torch_setup import MeasureError, resolve_contexts
from tests.profiles.replay_one import check_replays_its_points
from ttlctl.cli import app

REPO = Path(__file__).resolve().parents[2]
GRID = [64, 128, 256, 512, 1024]
Calls = list[tuple[str, int, int]]


@pytest.fixture(scope="module")
def measured() -> tuple[Profile, Calls]:
    calls: Calls = []
    profile = measure(
        "tiny",
        PRESETS["tiny"],
        device="cpu",
        contexts=GRID,
        repeats=2,
        progress=lambda stage, done, total: calls.append((stage, done, total)),
    )
    return profile, calls


@pytest.fixture(scope="module")
def cli_auto(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """``ttlctl profile --torch --device auto --dtype float32`` on three small contexts, once
    (a measurement takes seconds): its result and the profile it wrote."""
    out = tmp_path_factory.mktemp("cli-auto") / "p.json"
    args = ["profile", "--torch", "-o", str(out), "--device", "auto", "--dtype", "float32"]
    res = CliRunner().invoke(app, [*args, "--contexts", "16,32,64", "--repeats", "1"])
    return res, out


def test_round_trips_through_json(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    again = from_json(json.loads(json.dumps(profile.to_json())))
    assert again == profile


def test_marked_as_a_measured_cpu_profile(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    src = profile.source
    assert src["kind"] == "measured"
    assert src["engine"] == "torch-eager" and "not the vLLM engine" in src["not_vllm"]
    assert src["cpu_profile"] is True
    assert src["device_kind"] == "cpu"
    assert src["dtype"] in ("bfloat16", "float32")
    assert src["repeats"] == 2
    assert isinstance(src["threads"], int) and src["threads"] >= 1
    assert "no host tier" in src["reload"]
    assert profile.name == "tiny-cpu"
    assert profile.model == "tiny"
    assert profile.device
    assert profile.max_context == PRESETS["tiny"]["max_position_embeddings"]
    for key in ("prefill_max_rel_error", "decode_max_rel_error"):
        assert math.isfinite(src["fit"][key]) and src["fit"][key] >= 0


def test_kv_bytes_per_token_is_the_formula(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    cfg = PRESETS["tiny"]
    elem = {"bfloat16": 2, "float32": 4}[profile.source["dtype"]]
    expected = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * elem
    assert profile.kv_bytes_per_token == expected


def test_prefill_points_and_fit(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    pre = profile.prefill
    assert [c for c, _ in pre.points] == GRID
    assert all(s > 0 and math.isfinite(s) for _, s in pre.points)
    assert min(pre.a, pre.b, pre.q) >= 0
    assert pre.rmse_s is not None and pre.rmse_s >= 0
    predicted = [pre.seconds(c) for c in GRID]
    assert all(x <= y for x, y in itertools.pairwise(predicted))
    assert predicted[-1] > 0


def test_a_fresh_profile_replays_its_own_points(
    measured: tuple[Profile, Calls], tmp_path: Path
) -> None:
    """One call of each measured context, alone, replays in its measured forward pass:
    a forward pass is a whole step and the profile says so."""
    profile, _ = measured
    assert profile.prefill.includes_step is True
    path = tmp_path / "fresh.json"
    path.write_text(json.dumps(profile.to_json()))
    check_replays_its_points(path, tmp_path)


def test_decode_and_reload(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    dec = profile.decode
    for v in (dec.step_s, dec.per_seq_s, dec.per_kv_token_s):
        assert math.isfinite(v) and v >= 0
    assert dec.step_s + dec.per_seq_s + dec.per_kv_token_s > 0
    points = profile.source["decode_points"]
    assert len(points) >= 3 and all(s > 0 for _, _, s in points)
    # KV tokens of a batch (as the vLLM path records them): its contexts plus what it decoded
    for b, kv, _ in points:
        assert b >= 1 and kv >= b * profile.prefill.points[0][0], (b, kv)
    assert any(b > 1 for b, _, _ in points)
    assert profile.reload.bandwidth_bytes_per_s > 0
    assert profile.reload.latency_s >= 0
    assert all(n > 0 and s > 0 for n, s in profile.source["reload_points"])


def test_progress_reports_every_stage(measured: tuple[Profile, Calls]) -> None:
    _, calls = measured
    stages = [stage for stage, _, _ in calls]
    for stage in ("prefill", "decode", "reload"):
        assert stage in stages
        last = [c for c in calls if c[0] == stage][-1]
        assert last[1] == last[2]
    assert ("prefill", len(GRID), len(GRID)) in calls
    # the copies before the model is built (profiles/reload_copy.py says why)
    assert stages.index("reload") < stages.index("build") < stages.index("prefill")


def test_auto_picks_the_cpu_and_dtype_is_honoured(cli_auto: tuple[Result, Path]) -> None:
    """``--device auto`` on a host without a GPU measures on the CPU, in the ``--dtype``
    given (the command line's measurement, which the test below reads too)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("auto would pick the GPU here")
    res, out = cli_auto
    assert res.exit_code == 0, res.output
    profile = from_json(json.loads(out.read_text()))
    assert profile.source["device_kind"] == "cpu" and profile.name == "tiny-cpu"
    assert profile.source["dtype"] == "float32"
    assert profile.kv_bytes_per_token == 2 * 2 * 2 * 64 * 4


def test_refuses_a_model_too_big_for_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # pretend 16 GB is available, so the test never tries to build a 70B model anywhere
    monkeypatch.setattr("profiles.host.available_bytes", lambda: 16_000_000_000)
    with pytest.raises(ValueError, match=r"141\.\d GB.*16\.0 GB"):
        measure("llama-3.1-70b", PRESETS["llama-3.1-70b"], device="cpu")


def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(MeasureError, match="no CUDA GPU"):
        measure("tiny", PRESETS["tiny"], device="cuda", contexts=GRID)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"contexts": [64, 128]}, "at least 3"),
        ({"contexts": [64, 128, 4096]}, "exceed"),
        ({"contexts": [64, 128, 256], "max_context": 128}, "exceed"),
        ({"device": "tpu"}, "expected auto, cpu"),
        ({"dtype": "int8"}, "^--dtype int8: expected one of"),
        ({"repeats": 0}, "repeats"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        measure("tiny", PRESETS["tiny"], **kwargs)  # type: ignore[arg-type]


def test_default_contexts() -> None:
    assert default_contexts(2048) == [256, 512, 1024, 2048]
    assert default_contexts(131072) == [1024 << i for i in range(8)]
    assert default_contexts(40960)[-1] == 32768


def test_fit_reload_recovers_latency_and_bandwidth() -> None:
    sizes = [1e4, 1e6, 1e7, 1e8]
    seconds = [20e-6 + n / 25e9 for n in sizes]
    bandwidth, latency, err = fit_reload(sizes, seconds)
    assert bandwidth == pytest.approx(25e9, rel=1e-6)
    assert latency == pytest.approx(20e-6, rel=1e-6)
    assert err < 1e-6


def test_copies_that_ran_no_slower_as_they_grew_bound_the_bandwidth_by_the_largest() -> None:
    """No time grew with the size (a copy slowed by a page fault, then faster ones): no
    slope to fit, so the bandwidth is the largest copy's and the latency 0, not a division
    by nothing."""
    bandwidth, latency, _ = fit_reload([1e4, 1e6, 1e8], [2e-3, 1e-3, 1e-3])
    assert (bandwidth, latency) == pytest.approx((1e11, 0.0))
    # the same for times that did not change at all: the fit's slope is a rounding's
    # (about 1e-27 s a byte, a bandwidth of ~1e27 B/s) before it is taken as none
    bandwidth, latency, _ = fit_reload([1e4, 1e6, 1e8], [1e-3, 1e-3, 1e-3])
    assert (bandwidth, latency) == pytest.approx((1e11, 0.0))


def test_import_is_cheap() -> None:
    code = "import sys, profiles.measure_torch; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert out.strip() == "False"


def test_cli_times_eager_torch_only_when_asked_and_says_so(cli_auto: tuple[Result, Path]) -> None:
    res, out = cli_auto
    assert res.exit_code == 0, res.output
    src = json.loads(out.read_text())["source"]
    assert src["engine"] == "torch-eager" and "not the vLLM engine" in src["not_vllm"]


def _config_file(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**PRESETS["tiny"], **changes}))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]},
            "model_type 't5' is not a causal LM in transformers",
        ),
        ({"model_type": "nonesuch"}, "knows no model_type 'nonesuch'"),
        (
            {"model_type": None, "architectures": ["GPT2LMHeadModel"]},
            "the config has no model_type, and its architectures (GPT2LMHeadModel) are not "
            'Llama\'s: add "model_type" (e.g. "llama")',
        ),
        (
            {"model_type": None, "architectures": None},
            'the config has no model_type, and no architectures: add "model_type" (e.g. "llama")',
        ),
        (
            {"model_type": "bert", "architectures": ["BertLMHeadModel"]},
            "builds model_type 'bert' without a KV cache",
        ),
    ],
)
def test_a_model_that_is_no_causal_decoder_is_refused_in_one_line_before_any_prefill(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    """Regression: `profile --torch` with a T5 config ended in transformers' ValueError
    traceback (exit 1) after timing the copies, with a BERT one in an AttributeError
    traceback (exit 1) after timing every prefill, and an unknown model_type was one line
    of some 15,000 characters listing every type transformers knows. Each is one short
    line naming the --model given, exit 2, before a prefill is timed."""
    path = _config_file(tmp_path, **changes)
    calls: Calls = []
    with pytest.raises(MeasureError, match=re.escape(message)) as refused:
        measure(
            "model",
            json.loads(path.read_text()),
            device="cpu",
            contexts=[16, 32, 64],
            repeats=1,
            where=str(path),
            progress=lambda stage, done, total: calls.append((stage, done, total)),
        )
    assert str(refused.value).startswith(f"{path}: ") and len(str(refused.value)) < 300
    assert "prefill" not in [stage for stage, _, _ in calls]
    out = tmp_path / "p.json"
    args = ["profile", "--torch", "--device", "cpu", "--contexts", "16,32,64", "--repeats", "1"]
    res = CliRunner().invoke(app, [*args, "--model", str(path), "-o", str(out)])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and message in line
    assert not out.exists()


def test_the_default_dtype_is_the_configs() -> None:
    """Regression: docs/commands.md says "`--dtype` defaults to the model config's
    (`torch_dtype`, else bfloat16)" (and --help "default: the config's"), but `--torch`
    timed a float32 model in bfloat16, with bfloat16's KV bytes per token."""
    config = {**PRESETS["tiny"], "torch_dtype": "float32"}
    profile = measure("tiny", config, device="cpu", contexts=[16, 32, 64], repeats=1)
    assert profile.source["dtype"] == "float32"
    assert profile.kv_bytes_per_token == 2 * 2 * 2 * 64 * 4
    fp8 = {**PRESETS["tiny"], "torch_dtype": "float8_e4m3fn"}  # eager torch times no fp8
    with pytest.raises(MeasureError, match=r"^tiny: torch_dtype 'float8_e4m3fn': .*give --dtype$"):
        measure("tiny", fp8, device="cpu", contexts=[16, 32, 64])


def test_contexts_that_leave_too_few_decode_points_are_refused_before_any_timing() -> None:
    """Regression: contexts from 2,030 tokens leave a CPU two decode points (batch ×
    context ≤ 8,192), which `profile --torch` found only after timing every prefill
    ('only 2 decode point(s) measured', no hint): refused first, saying what to change."""
    calls: Calls = []
    with pytest.raises(MeasureError, match=r"leave 2 decode point.*give a smaller first context"):
        measure(
            "tiny",
            PRESETS["tiny"],
            device="cpu",
            contexts=[2030, 2040, 2048],
            progress=lambda stage, done, total: calls.append((stage, done, total)),
        )
    assert calls == []


def test_a_refusal_names_the_model_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: `profile --torch --model DIR/config.json` named the model in its
    refusals by its folder's name (`big:`), not the --model given, as the vLLM path does."""
    monkeypatch.setattr("profiles.host.available_bytes", lambda: 16_000_000_000)
    path = _config_file(tmp_path, **PRESETS["llama-3.1-70b"])
    out = tmp_path / "p.json"
    res = CliRunner().invoke(
        app, ["profile", "--torch", "--device", "cpu", "--model", str(path), "-o", str(out)]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {path}: about 141."), res.stderr
    assert not out.exists()


def test_a_max_context_too_short_for_the_default_grid_is_named() -> None:
    """Regression: `profile --torch --max-context 40` was refused as "the prefill quadratic
    needs at least 3 distinct contexts, got [16, 32] (limit 40 tokens)", naming neither
    the flag that set the limit nor what to give instead."""
    with pytest.raises(MeasureError, match=r"^--max-context 40 leaves the default grid .*"):
        measure("tiny", PRESETS["tiny"], device="cpu", max_context=40)
    short = {**PRESETS["tiny"], "max_position_embeddings": 40}
    with pytest.raises(MeasureError, match=r"max_position_embeddings 40 .*give --contexts$"):
        measure("tiny", short, device="cpu")


def small_gpt2(positions: int) -> dict[str, object]:
    """A two-layer GPT-2 config of ``positions`` learned positions (a position past them
    fails in the model: an IndexError)."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": positions,
        "vocab_size": 1000,
        "torch_dtype": "float32",
    }


def test_decode_stays_within_the_models_length() -> None:
    """Regression: contexts up to a model's limit decoded from the smallest of them past
    the limit (a prompt of 100 tokens and up to 34 steps in a model of 128 positions), and
    --repeats over 32 took more steps than the room left: GPT-2's learned positions ended
    the measurement in an IndexError traceback (exit 1) after every prefill was timed.
    Each decode point leaves room for its steps."""
    gpt2 = small_gpt2(128)
    profile = measure("gpt2", gpt2, device="cpu", contexts=[100, 110, 120], repeats=1)
    assert [c for c, _ in profile.prefill.points] == [100, 110, 120]
    for batch, kv, _ in profile.source["decode_points"]:  # the batch's KV tokens
        assert kv / batch < 128, (batch, kv)
    # more repeats than the 32 decode steps a point takes at most: as many steps more
    many = measure("gpt2", gpt2, device="cpu", contexts=[32, 64, 100], repeats=40)
    assert len(many.source["decode_points"]) >= 3


def test_a_context_refusal_names_the_flags() -> None:
    """The torch path's context refusals name `--contexts` and `--max-context`, the flags a
    user gives (they named the ideas: "contexts [4096] exceed the limit …")."""
    cases = [
        (([16, 32, 4096], 2048, None), r"^--contexts \[4096\] exceed the limit of 2048 tokens"),
        (([16, 32, 600], 2048, 512), r" \(--max-context 512\)$"),
        (([0, 16, 32], 2048, None), r"^--contexts must be positive"),
        ((None, 2048, 0), r"^--max-context must be positive"),
    ]
    for args, message in cases:
        with pytest.raises(MeasureError, match=message):
            resolve_contexts(*args)


def test_a_configs_dtype_refused_names_the_model_given_as_the_vllm_profile_does(
    tmp_path: Path,
) -> None:
    """Regression: a config.json whose dtype neither profiler times was refused as "dtype
    'float8_e4m3fn' (the config's torch_dtype): …", naming no file (every other refusal of
    the config names the --model given), and by the vLLM profile without the "give
    --dtype" of eager torch's: one rule (profiles.models.profile_dtype), one message,
    naming the file and the config's key (transformers 5 writes ``dtype``)."""
    path = _config_file(tmp_path, torch_dtype=None, dtype="float8_e4m3fn")
    args = ["profile", "--device", "cpu", "--contexts", "16,32,64", "--model", str(path)]
    for mode in (["--torch"], []):
        out = tmp_path / "p.json"
        res = CliRunner().invoke(app, [*args, *mode, "-o", str(out)])
        assert res.exit_code == 2, res.output
        (line,) = res.stderr.strip().splitlines()
        assert line == (
            f"error: {path}: dtype 'float8_e4m3fn': expected one of bfloat16, float16, "
            "float32; give --dtype"
        ), mode
        assert not out.exists()


@pytest.mark.parametrize(
    ("limit", "repeats", "message"),
    [
        (
            128,
            130,
            r"its 128 positions leave no room .* up to 130 timed steps\); give --repeats 125",
        ),
        (32, 1, r"its 32 positions leave no room .* up to 32 timed steps\)$"),
    ],
)
def test_a_model_too_short_for_the_decode_steps_is_refused_before_any_timing(
    limit: int, repeats: int, message: str
) -> None:
    """Regression: a decode point takes a prompt, a warm-up and up to 32 (or --repeats)
    steps; where the model's length left no room for them (GPT-2's learned positions: 128
    with --repeats 130, or 32 with any), the prompt was cut to 1 token and the steps still
    ran past the length: an IndexError traceback after every prefill was timed."""
    gpt2 = small_gpt2(limit)
    calls: Calls = []
    with pytest.raises(MeasureError, match=rf"^gpt2: {message}"):
        measure(
            "gpt2",
            gpt2,
            device="cpu",
            contexts=[4, 8, 16],
            repeats=repeats,
            progress=lambda stage, done, total: calls.append((stage, done, total)),
        )
    assert calls == []
    # the longest --repeats the hint names is measured
    if repeats > 32:
        profile = measure("gpt2", gpt2, device="cpu", contexts=[4, 8, 16], repeats=limit - 3)
        # (a batch's KV tokens: each sequence's within the model's length)
        assert all(kv / b < limit for b, kv, _ in profile.source["decode_points"])
