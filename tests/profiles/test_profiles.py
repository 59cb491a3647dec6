"""Profile maths and files that need no device: fits, KV sizes, round trips, cost model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from profiles import fitmath, models, roofline, shipped
from profiles.cost import ConstantCostModel, ProfileCostModel
from profiles.profile_read import ProfileError, from_json, load
from profiles.schema import ProfileDoc
from profiles.vllm_plan import parse_contexts
from tests.documents import conforms
from ttlctl.cli import app
from ttlctl.errors import TtlctlError


def test_quadratic_fit_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(0)
    a, b, q = 0.004, 2e-5, 3e-10
    tokens = np.array([1024, 2048, 4096, 8192, 16384, 32768, 65536])
    exact = a + b * tokens + q * tokens**2
    fit = fitmath.fit_quadratic(tokens, exact)
    assert (fit.a, fit.b, fit.q) == pytest.approx((a, b, q), rel=1e-6)
    noisy = exact * rng.normal(1.0, 0.01, tokens.size)
    fit = fitmath.fit_quadratic(tokens, noisy)
    assert fit.b == pytest.approx(b, rel=0.1) and fit.q == pytest.approx(q, rel=0.1)
    assert fit.max_rel_error < 0.05


def test_quadratic_fit_never_goes_negative() -> None:
    # concave timings (a saturating device) must not yield a negative q
    tokens = [100, 200, 400, 800, 1600]
    fit = fitmath.fit_quadratic(tokens, [0.01, 0.015, 0.02, 0.024, 0.027])
    assert fit.a >= 0 and fit.b >= 0 and fit.q >= 0
    with pytest.raises(ValueError):
        fitmath.fit_quadratic([1, 2], [0.1, 0.2])
    with pytest.raises(ValueError):
        fitmath.fit_quadratic([1, 2, 3], [0.1, -0.2, 0.3])


def test_quadratic_fit_weighs_each_point_by_its_relative_error() -> None:
    """Timings 5% off either way at every length: fitted on relative error, the shortest
    prefills miss by about as much as the longest (least squares on seconds would leave the
    short ones 18% off to follow the long ones)."""
    tokens = np.array([1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072])
    noisy = (0.004 + 2e-5 * tokens + 3e-10 * tokens**2) * np.array([1.05, 0.95] * 4)
    assert fitmath.fit_quadratic(tokens, noisy).max_rel_error < 0.07


def test_decode_fit_recovers_linear_model() -> None:
    seqs = np.array([1, 1, 4, 4, 16, 16])
    kv = seqs * np.array([128, 1024, 128, 1024, 128, 1024])
    t = 0.005 + 1e-4 * seqs + 2e-8 * kv
    fit = fitmath.fit_decode(seqs, kv, t)
    assert (fit.step_s, fit.per_seq_s, fit.per_kv_token_s) == pytest.approx(
        (0.005, 1e-4, 2e-8), rel=1e-6
    )


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),  # 128 KiB per token
        ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2),
        ("qwen3-8b", 2 * 36 * 8 * 128 * 2),
        ("tiny", 2 * 2 * 2 * 64 * 2),
        ("tiny-55m", 2 * 8 * 2 * 192 * 2),
    ],
)
def test_kv_bytes_per_token(preset: str, expected: int) -> None:
    _, config = models.load_config(preset)
    assert models.kv_bytes_per_token(config) == expected
    assert models.kv_bytes_per_token(config, "float32") == expected * 2


def test_kv_bytes_from_a_config_file_without_head_dim(tmp_path: Path) -> None:
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "torch_dtype": "float16",
    }  # no GQA, no head_dim: 4096/32 = 128
    (tmp_path / "config.json").write_text(json.dumps(config))
    _, loaded = models.load_config(tmp_path)
    assert models.kv_bytes_per_token(loaded) == 2 * 32 * 32 * 128 * 2
    with pytest.raises(models.ModelConfigError, match=r"no such config\.json or preset"):
        models.load_config(tmp_path / "nope")
    # a folder without one says so (it said "no such config.json or preset")
    (tmp_path / "run").mkdir()
    with pytest.raises(models.ModelConfigError) as info:
        models.load_config(tmp_path / "run")
    assert str(info.value) == (
        f"{tmp_path / 'run'}: the folder holds no config.json (give a model's folder, its "
        "config.json or a preset)"
    )


def test_every_shipped_profile_loads_and_round_trips() -> None:
    names = shipped.names()
    rooflines = [n for n in names if load(shipped.DATA / f"{n}.json").source["kind"] == "roofline"]
    assert len(rooflines) == len(roofline.MODELS) * len(roofline.DEVICES)
    assert "tiny-cpu" in names  # the measured CPU profile of the test model
    for name in names:
        path = shipped.DATA / f"{name}.json"
        p = load(path)
        assert from_json(json.loads(json.dumps(p.to_json()))) == p
        conforms(p.to_json(), ProfileDoc)
        assert json.loads(path.read_text()) == p.to_json()  # what is written is read back
        assert p.source["kind"] in ("roofline", "measured")
        grid = [p.prefill_s(c) for c in (1e3, 8e3, 32e3, 128e3)]
        assert grid == sorted(grid) and grid[0] > 0


def test_roofline_orders_devices_sensibly() -> None:
    m = roofline.MODELS["Llama-3.1-8B"]
    a100, h100, b200 = (roofline.profile(m, roofline.DEVICES[d]) for d in ("A100", "H100", "B200"))
    assert a100.prefill_s(32768) > h100.prefill_s(32768) > b200.prefill_s(32768)
    assert h100.kv_bytes_per_token == 131072
    # reload is far cheaper than prefill at long context: the reason offload matters
    assert h100.reload_s(32768) < h100.prefill_s(32768) / 10


def test_the_shipped_rooflines_are_what_roofline_writes() -> None:
    for model in roofline.MODELS.values():
        for device in roofline.DEVICES.values():
            made = roofline.profile(model, device)
            assert load(shipped.DATA / f"{made.name}.json") == made, made.name


def test_a_measured_prefill_utilisation_moves_prefill_only() -> None:
    m = roofline.MODELS["Llama-3.1-8B"]
    h100, h200 = (roofline.profile(m, roofline.DEVICES[d]) for d in ("H100", "H200"))
    measured = roofline.DEVICES["H200"].prefill_mfu
    assert measured is not None and roofline.DEVICES["H100"].prefill_mfu is None
    # the same peak: prefill above the step's fixed cost scales by the utilisations' ratio
    for c in (1024, 32768, 131072):
        above = [p.prefill_s(c) - roofline.PREFILL_OVERHEAD_S for p in (h100, h200)]
        assert above[1] == pytest.approx(above[0] * roofline.MFU / measured, rel=1e-12)
    assert h200.decode.per_seq_s == h100.decode.per_seq_s  # decode keeps the assumption
    assert h200.source["assumptions"]["prefill_mfu"] == measured
    assert "gpu_profile_check" in h200.source["prefill_mfu_measured"]
    assert "prefill_mfu_measured" not in h100.source


@pytest.mark.parametrize(
    ("mfu", "measured", "message"),
    [(0.0, "x", "not in"), (1.2, "x", "not in"), (0.5, "", "says how")],
)
def test_a_measured_prefill_utilisation_is_a_share_with_its_provenance(
    mfu: float, measured: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        roofline.Device("X", 1.0, 1.0, 1, 1.0, "d", prefill_mfu=mfu, prefill_mfu_measured=measured)


def test_profile_errors_name_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load(path)
    good = load(shipped.DATA / "llama-3.1-8b-h100.json").to_json()
    with pytest.raises(ProfileError, match="schema"):
        from_json({**good, "schema": "other"})
    broken = json.loads(json.dumps(good))
    del broken["prefill"]["q"]
    with pytest.raises(ProfileError, match=r"^profile: prefill\.q is missing$"):
        from_json(broken)
    # a part that is not an object is named, not a Python TypeError's words
    with pytest.raises(ProfileError, match=r"^p: decode must be an object, got None$"):
        from_json({**good, "decode": None}, "p")


def test_cost_model_chunks_add_up() -> None:
    p = load(shipped.DATA / "llama-3.1-8b-h100.json")
    cost = ProfileCostModel(p)
    whole = cost.prefill_s(0, 8192)
    parts = sum(cost.prefill_s(c, 2048) for c in (0, 2048, 4096, 6144))
    assert parts == pytest.approx(whole, rel=1e-12)  # chunking conserves work
    assert whole + p.prefill.a == pytest.approx(p.prefill_s(8192))
    assert cost.prefill_s(30000, 2048) > cost.prefill_s(0, 2048)  # later chunks attend to more
    assert cost.step_s([], 0, 0) == 0.0
    assert cost.step_s([(0, 512)], 8, 8000) > cost.step_s([(0, 512)], 0, 0)
    # a reload copies the context's KV bytes over the host link, after its latency
    kv_bytes = 32768 * p.kv_bytes_per_token
    copy_s = p.reload.latency_s + kv_bytes / p.reload.bandwidth_bytes_per_s
    assert cost.reload_s(32768) == p.reload_s(32768) == pytest.approx(copy_s, rel=1e-12)
    const = ConstantCostModel()
    assert const.step_s([(0, 100)], 0, 0) == pytest.approx(100 * 1e-4 + 0.02)
    steps = [const.step_s([(c, min(100, 250 - c))], 0, 0) for c in (0, 100, 200)]
    assert const.rebuild_s(250, 100) == pytest.approx(sum(steps))


@pytest.mark.parametrize("kv_term", [True, False])
def test_a_decode_run_is_its_steps_and_fits_the_steps_within(kv_term: bool) -> None:
    """``decode_run_s`` is the sum of its steps, the KV growing by one token a sequence each
    step, and ``decode_steps_within`` the most of them that fit, with a KV term or none."""
    p = load(shipped.DATA / "llama-3.1-8b-h100.json")
    if not kv_term:
        p = dataclasses.replace(p, decode=dataclasses.replace(p.decode, per_kv_token_s=0.0))
    cost = ProfileCostModel(p)
    steps = [cost.decode_s(4, 1000 + 4 * i) for i in range(11)]
    assert cost.decode_run_s(4, 1000, 10) == pytest.approx(sum(steps[:10]), rel=1e-12)
    assert cost.decode_steps_within(4, 1000, sum(steps[:10]) + steps[10] / 2) == 10


def test_cli_profile_list_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["profile", "--list"])
    assert res.exit_code == 0 and "llama-3.1-8b-h100" in res.output and "roofline" in res.output
    # the profiles whose prefill utilisation was measured on their GPU are marked, the others not
    rows = {line.split()[1]: line for line in res.output.splitlines() if line.startswith("│")}
    assert "roofline*" in rows["llama-3.1-8b-h200"] and "roofline*" not in rows["llama-3.1-8b-h100"]
    assert "roofline*: its prefill utilisation measured" in " ".join(res.output.split())
    res = runner.invoke(app, ["profile", "-o", str(tmp_path / "p.json"), "--model", "nope"])
    assert res.exit_code == 2 and "no such config.json or preset" in res.output
    res = runner.invoke(app, ["profile", "-o", str(tmp_path / "p.json"), "--contexts", "1,x"])
    assert res.exit_code == 2 and "--contexts" in res.output
    res = runner.invoke(app, ["profile"])
    assert res.exit_code == 2


def test_cli_profile_list_refuses_what_it_would_drop(tmp_path: Path) -> None:
    """`profile --list --json -` printed the table on stdout where JSON was asked for, and
    `--list -o p.json` wrote nothing and said nothing: --list refuses what it cannot do."""
    out = tmp_path / "p.json"
    for extra, named in [
        (["--json", "-"], "--json"),
        (["-o", str(out)], "-o"),
        (["--profile", "llama-3.1-8b-h100", "--as", "vllm-router"], "--profile, --as"),
        (["--engine", "http://127.0.0.1:8000", "--torch"], "--engine, --torch"),
    ]:
        res = CliRunner().invoke(app, ["profile", "--list", *extra])
        assert res.exit_code == 2, (extra, res.output)
        assert res.stdout == "", (extra, res.stdout)
        assert res.stderr.strip() == (
            "error: --list shows the shipped profiles' table and writes nothing; it takes "
            f"no {named}"
        ), res.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--block-size", "7"], "--block-size"),
        (["--cuda-graphs"], "--cuda-graphs"),
        (["--enforce-eager"], "--enforce-eager"),
        (["--max-num-batched-tokens", "64"], "--max-num-batched-tokens"),
        (["--engine", "http://127.0.0.1:9"], "--engine"),
        (
            ["--block-size", "16", "--max-num-batched-tokens", "8192"],
            "--block-size, --max-num-batched-tokens",
        ),
    ],
)
def test_cli_profile_torch_refuses_vllms_engine_flags(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    """Regression: `profile --torch` took vLLM's engine flags and dropped them without a word
    (a --block-size of 7, --cuda-graphs on a CPU, a budget of 64 tokens the profile then did
    not record; with --engine it profiled the server instead, exit 0): refused, one line,
    before anything is timed."""
    out = tmp_path / "p.json"
    args = ["profile", "--torch", "--device", "cpu", "--contexts", "16,32,64", "-o", str(out)]
    res = CliRunner().invoke(app, [*args, *extra])
    assert res.exit_code == 2, (extra, res.output)
    assert res.stderr.strip() == (
        "error: --torch times Hugging Face transformers in eager torch, not vLLM's engine; "
        f"it takes no {named}"
    ), res.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--device", "cpu"], "--device"),
        (["--dtype", "float16"], "--dtype"),
        (["--block-size", "16"], "--block-size"),
        (["--enforce-eager"], "--enforce-eager"),
        (["--max-num-batched-tokens", "64"], "--max-num-batched-tokens"),
        (["--block-size", "32", "--cuda-graphs"], "--block-size, --cuda-graphs"),
    ],
)
def test_cli_profile_engine_refuses_the_settings_of_an_engine_it_does_not_start(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    """Regression: `profile --engine URL` took the flags that set up an engine it starts
    (device, dtype, block size, graphs, token budget) and dropped them without a word, so a
    user believed the server was measured at those settings: refused, one line, before the
    server is asked anything (nothing listens on the URL)."""
    out = tmp_path / "p.json"
    args = ["profile", "--engine", "http://127.0.0.1:9", "--contexts", "16,32,64", "-o", str(out)]
    res = CliRunner().invoke(app, [*args, *extra])
    assert res.exit_code == 2, (extra, res.output)
    assert res.stderr.strip() == (
        "error: --engine measures the server as it was started (give vLLM's settings to the "
        f"server); it takes no {named}"
    ), res.stderr
    assert not out.exists()


def test_cli_profile_names_another_ttlctl_document_given_as_the_model(tmp_path: Path) -> None:
    """Regression: a shipped profile (or a fit, a bundle) given as --model was refused as
    '…: hidden_size missing or not an integer', as if a config.json were damaged; it is named
    as what it is, the way --fit and --profile name one given in their place."""
    out = tmp_path / "p.json"
    shipped_profile = shipped.DATA / "llama-3.1-8b-h100.json"
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"schema": "ttlctl.fit/1", "tools": {}}), encoding="utf-8")
    for given, kind in [
        (shipped_profile, "a device profile (what `ttlctl profile` writes)"),
        (fit, "a fit (what `ttlctl fit` writes)"),
    ]:
        res = CliRunner().invoke(app, ["profile", "--torch", "-o", str(out), "--model", str(given)])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip() == f"error: {given}: not a model's config.json but {kind}"
    assert not out.exists()


def test_a_fit_refused_is_a_user_error() -> None:
    """Too few or unusable timings: a TtlctlError (one line, exit 2 from the CLI)."""
    with pytest.raises(TtlctlError, match="at least 3"):
        fitmath.fit_quadratic([1, 2], [0.1, 0.2])
    with pytest.raises(TtlctlError, match="positive and finite"):
        fitmath.fit_quadratic([1, 2, 3], [0.1, -0.2, 0.3])


def test_contexts_parse_to_a_sorted_grid_or_a_one_line_error() -> None:
    assert parse_contexts(None) is None
    assert parse_contexts("4096, 1024,2048,1024,") == [1024, 2048, 4096]
    with pytest.raises(TtlctlError, match="not a comma-separated list of integers: '1k,2k'"):
        parse_contexts("1k,2k")
    with pytest.raises(TtlctlError, match=r"^--contexts needs at least 3 distinct lengths "
                       r"\(a quadratic is fitted\), got \[1, 2\]$"):  # fmt: skip
        parse_contexts("2,1,2")
    # a length under 1 is named (it said "needs at least 3 positive lengths" of 3 lengths)
    for text, bad in [("0,128,256", 0), ("128,-5,256,512", -5)]:
        with pytest.raises(TtlctlError) as info:
            parse_contexts(text)
        assert (
            str(info.value) == f"--contexts: {bad} is not a length (a length is at least 1 token)"
        )


def test_a_shipped_name_resolves_to_its_file_and_the_names_are_sorted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--profile NAME`` finds ``profiles/data/NAME.json`` from any directory; the list
    of names is in order."""
    monkeypatch.chdir(tmp_path)
    profile, path = shipped.resolve("llama-3.1-8b-h100")
    assert path == shipped.DATA / "llama-3.1-8b-h100.json" and profile.name == "llama-3.1-8b-h100"
    names = shipped.names()
    assert names == sorted(names) and "tiny-cpu" in names


def test_a_device_may_be_measured_at_its_whole_peak() -> None:
    """``prefill_mfu`` is a share in (0, 1]: 1 is one."""
    device = roofline.Device("X", 1.0, 1.0, 1, 1.0, "d", prefill_mfu=1.0, prefill_mfu_measured="m")
    assert device.prefill_mfu == 1.0


def test_tensor_parallel_is_the_fewest_gpus_holding_the_weights_at_60_percent() -> None:
    """Weights of exactly 60% of the memory fit (≤ 60% use); a little more takes two GPUs."""
    device = roofline.Device("X", 100.0, 1.0, 80, 10.0, "d")
    for params_b, tp in ((24.0, 1), (24.5, 2), (48.0, 2), (96.0, 4), (500.0, 8)):
        model = roofline.Model("M", params_b, 1, 1, 1, 1, 1024, "card")
        assert roofline.tensor_parallel(model, device) == tp, params_b


def test_a_config_is_named_by_its_folder_and_a_head_dim_of_0_is_derived(tmp_path: Path) -> None:
    """``--model`` given a folder or its config.json names the model by the folder; a
    ``head_dim`` that is no size (0) leaves hidden size ÷ heads."""
    config = {"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 0}
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    for ref in (folder, folder / "config.json"):
        name, loaded = models.load_config(ref)
        assert name == "my-model"
        assert models.head_dim(loaded) == 64
        assert models.kv_bytes_per_token(loaded) == 2 * 2 * 8 * 64 * 2
        # no max_position_embeddings: Hugging Face's LlamaConfig default
        assert models.max_context(loaded) == 2048


@pytest.mark.parametrize("size", ["0", "-32"])
def test_cli_profile_refuses_a_block_size_under_1_before_anything(
    tmp_path: Path, size: str
) -> None:
    """Regression: `profile --block-size 0` (or -32) timed the copies, then failed in vLLM's
    pydantic dump ("1 validation error for CacheConfig block_size …"), not naming the flag:
    refused as replay's --block-size is (at least 1), before anything is timed."""
    out = tmp_path / "p.json"
    args = ["profile", "--device", "cpu", "--contexts", "16,32,64", "-o", str(out)]
    res = CliRunner().invoke(app, [*args, f"--block-size={size}"])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    assert "invalid value for '--block-size'" in line and "greater than or equal to 1" in line
    assert not out.exists()


def test_a_shipped_profiles_decode_points_are_the_batchs_kv_its_fit_prices() -> None:
    """``source.decode_points`` holds (batch, the batch's KV tokens, seconds), as both
    profilers now write it (docs/testing.md) and the decode fit reads it. Regression: the
    shipped tiny-cpu, measured by ``--torch`` before that, held a sequence's mean KV: read
    as the batch's, its own fit missed its points by 51% (its recorded error is 3%)."""
    checked = []
    for name in shipped.names():
        profile = shipped.resolve(name)[0]
        dec = profile.decode
        for batch, kv, seconds in profile.source.get("decode_points") or ():
            bound = float(profile.source["fit"]["decode_max_rel_error"])
            priced = dec.step_s + dec.per_seq_s * batch + dec.per_kv_token_s * kv
            assert abs(priced - seconds) / seconds <= bound * (1 + 1e-9), (name, batch, kv)
            checked.append(name)
    assert "tiny-cpu" in checked
