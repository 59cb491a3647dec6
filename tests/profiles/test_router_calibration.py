"""A profile as vllm-router's Program-scheduling calibration (profiles/router_calibration.py).

The router's formulas are re-implemented here from its source, on the JSON object the
router reads (vllm-project/router, src/program_scheduling/policy.rs,
``ProgressTtlPolicyMath::cache_miss_impact_seconds`` and ``decode_throughput``; the
limits of src/config/validation.rs ``validate_program_scheduling``; wheel 0.1.17), and
checked against the router's own start-up figures for its reference coefficients.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from profiles import shipped
from profiles.router_calibration import RouterCalibrationError, calibrate
from profiles.schema import Decode, Prefill, Profile
from ttlctl.cli import app

ROUTER = "vllm-router"

#: the router's built-in coefficients (its Default impls) and what its start-up warning
#: prints for them: 13.931349609649255 s for a 50,000-token cold prefill and
#: 98.22818889962356 tokens/s for 4 requests holding 200,000 context tokens
REFERENCE = {
    "prefill_cost_model": {
        "intercept_seconds": 0.06600061907132926,
        "linear_seconds_per_1k_tokens": 0.05702024012166613,
        "quadratic_seconds_per_1k_tokens_squared": 0.0044057347937978475,
        "decode_throughput_alpha": 0.15,
    },
    "decode_throughput_model": {
        "fixed_step_seconds": 0.010635218423115973,
        "batch_step_seconds_per_request": 0.0004192803698834784,
        "context_step_seconds_per_token": 1.420458414996201e-7,
    },
}


def router_prefill_seconds(cfg: dict[str, Any], uncached_tokens: int) -> float:
    """policy.rs: x = tokens / 1000; intercept + linear·x + quadratic·x²."""
    p = cfg["prefill_cost_model"]
    x = uncached_tokens / 1000.0
    return (
        p["intercept_seconds"]
        + p["linear_seconds_per_1k_tokens"] * x
        + p["quadratic_seconds_per_1k_tokens_squared"] * x * x
    )


def router_decode_throughput(cfg: dict[str, Any], batch: int, context_tokens: int) -> float:
    """policy.rs: B / (fixed + per_request·B + per_token·C)."""
    d = cfg["decode_throughput_model"]
    return batch / (
        d["fixed_step_seconds"]
        + d["batch_step_seconds_per_request"] * batch
        + d["context_step_seconds_per_token"] * context_tokens
    )


def router_accepts(cfg: dict[str, Any]) -> bool:
    """validation.rs: every coefficient finite and >= 0, the fixed step > 0, alpha in [0, 1]."""
    p, d = cfg["prefill_cost_model"], cfg["decode_throughput_model"]
    values = [*p.values(), *d.values()]
    return (
        all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in values)
        and d["fixed_step_seconds"] > 0
        and 0 <= p["decode_throughput_alpha"] <= 1
    )


def test_the_reimplemented_formulas_give_the_routers_own_reference_figures() -> None:
    assert router_prefill_seconds(REFERENCE, 50_000) == pytest.approx(13.931349609649255, 1e-12)
    assert router_decode_throughput(REFERENCE, 4, 200_000) == pytest.approx(
        98.22818889962356, 1e-12
    )


@pytest.mark.parametrize("name", shipped.names())
def test_the_router_prices_the_profiles_measured_points_as_the_profile_does(name: str) -> None:
    profile = shipped.resolve(name)[0]
    cfg = json.loads(calibrate(profile).flag_value())
    assert router_accepts(cfg)
    points = profile.prefill.points or tuple((n, 0.0) for n in (1_000, 8_000, 32_000))
    for tokens, _measured in points:
        assert router_prefill_seconds(cfg, tokens) == pytest.approx(
            profile.rebuild_prefill_s(tokens), rel=1e-12
        )
    dec = profile.decode
    for batch, batch_kv, _seconds in profile.source.get("decode_points") or [(4, 2e5, 0.0)]:
        kv = round(batch_kv)  # the batch's KV tokens; the router counts whole tokens
        step = dec.step_s + dec.per_seq_s * batch + dec.per_kv_token_s * kv
        assert router_decode_throughput(cfg, int(batch), kv) == pytest.approx(
            batch / step, rel=1e-12
        )


def test_a_measured_profile_is_priced_within_its_fit_error_on_its_measured_points() -> None:
    profile = shipped.resolve("tiny-cpu")[0]
    assert profile.prefill.rmse_s is not None and profile.prefill.points
    cfg = calibrate(profile).to_json()
    errors = [router_prefill_seconds(cfg, n) - s for n, s in profile.prefill.points]
    rmse = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert rmse == pytest.approx(profile.prefill.rmse_s, rel=1e-6)


def test_a_fit_without_the_step_gets_the_steps_fixed_cost_in_the_intercept() -> None:
    profile = shipped.resolve("tiny-cpu")[0]
    pre = profile.prefill
    apart = _with(profile, prefill=dataclasses.replace(pre, includes_step=False))
    cfg = calibrate(apart).to_json()
    assert cfg["prefill_cost_model"]["intercept_seconds"] == pytest.approx(
        pre.a + profile.decode.step_s
    )
    for tokens in (128, 2048):
        assert router_prefill_seconds(cfg, tokens) == pytest.approx(
            apart.rebuild_prefill_s(tokens), rel=1e-12
        )


def test_alpha_is_ttlctls_additive_step_unless_given() -> None:
    profile = shipped.resolve("tiny-cpu")[0]
    assert calibrate(profile).to_json()["prefill_cost_model"]["decode_throughput_alpha"] == 0.0
    given = calibrate(profile, decode_throughput_alpha=0.4)
    assert given.prefill.cache_miss_impact_seconds(1000) == pytest.approx(
        router_prefill_seconds(given.to_json(), 1000) * 1.6
    )
    with pytest.raises(RouterCalibrationError, match=r"decode-throughput-alpha is 1\.5"):
        calibrate(profile, decode_throughput_alpha=1.5)


def _with(profile: Profile, **changes: Any) -> Profile:
    return dataclasses.replace(profile, **changes)


def test_profiles_the_router_cannot_take_are_refused_naming_what() -> None:
    profile = shipped.resolve("tiny-cpu")[0]
    with pytest.raises(RouterCalibrationError, match="no decode fit"):
        calibrate(_with(profile, decode=Decode(0.0, 0.0, 0.0)))
    with pytest.raises(RouterCalibrationError, match=r"decode.step_s is 0.0.*> 0"):
        calibrate(_with(profile, decode=Decode(0.0, 1e-5, 1e-7)))
    with pytest.raises(RouterCalibrationError, match=r"prefill.q is -1e-09.*>= 0"):
        calibrate(_with(profile, prefill=Prefill(0.001, 1e-5, -1e-9)))
    # the intercept is the step's fixed cost: named as what it sums
    with pytest.raises(RouterCalibrationError, match=r"prefill.a is -0.001.*>= 0"):
        calibrate(_with(profile, prefill=Prefill(-0.001, 1e-5, 1e-9)))
    step = profile.decode.step_s
    apart = Prefill(-2 * step, 1e-5, 1e-9, includes_step=False)
    with pytest.raises(RouterCalibrationError, match=r"prefill.a \+ decode.step_s is -"):
        calibrate(_with(profile, prefill=apart))


def test_the_command_prints_the_flag_value_and_refuses_bad_profiles(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["profile", "--profile", "tiny-cpu", "--as", "vllm-router"])
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(cfg) == {"prefill_cost_model", "decode_throughput_model"}
    assert router_accepts(cfg)
    doc = shipped.resolve("tiny-cpu")[0].to_json()
    doc["decode"] = {"step_s": 0.0, "per_seq_s": 0.0, "per_kv_token_s": 0.0}
    bad = tmp_path / "no-decode.json"
    bad.write_text(json.dumps(doc))
    res = runner.invoke(app, ["profile", "--profile", str(bad), "--as", "vllm-router"])
    assert res.exit_code == 2
    assert "no decode fit" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # the file given, not the name field inside it (it is tiny-cpu's: no help finding it)
    assert res.stderr.startswith(f"error: {bad}: no decode fit"), res.stderr
    res = runner.invoke(app, ["profile", "--profile", "tiny-cpu", "--as", "sglang"])
    assert res.exit_code == 2 and "--as takes vllm-router" in res.stderr


def test_the_command_writes_the_flag_value_to_o(tmp_path: Path) -> None:
    """``-o FILE`` with ``--profile`` and ``--as``: the value goes to FILE (it was ignored);
    ``--json`` there is refused."""
    runner = CliRunner()
    to = tmp_path / "router.json"
    args = ["profile", "--profile", "tiny-cpu", "--as", "vllm-router"]
    printed = runner.invoke(app, args)
    res = runner.invoke(app, [*args, "-o", str(to)])
    assert res.exit_code == 0, res.output
    assert to.read_text() == printed.stdout.splitlines()[-1] + "\n"
    assert res.stdout == "" and f"wrote {to}" in res.stderr
    assert router_accepts(json.loads(to.read_text()))
    res = runner.invoke(app, [*args, "--json", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--json goes with a measurement" in res.stderr
    assert not (tmp_path / "x.json").exists()


def test_o_the_profile_read_is_refused(tmp_path: Path) -> None:
    """``-o`` naming the profile ``--profile`` reads: refused, the profile kept (the
    router's value was written over it)."""
    mine = tmp_path / "profile.json"
    mine.write_text(shipped.resolve("tiny-cpu")[1].read_text())
    before = mine.read_text()
    res = CliRunner().invoke(
        app, ["profile", "--profile", str(mine), "--as", "vllm-router", "-o", str(mine)]
    )
    assert res.exit_code == 2, res.output
    assert "is an input of this command" in res.stderr
    assert mine.read_text() == before


def test_the_calibrations_own_models_price_as_the_routers_formulas() -> None:
    """``PrefillCostModel`` and ``DecodeThroughputModel`` are the router's formulas on
    their own fields: the cold prefill (0 for no tokens, as the router has it), the miss
    and the decode throughput of a batch holding ``C`` context tokens in all."""
    calib = calibrate(shipped.resolve("llama-3.1-8b-h100")[0], decode_throughput_alpha=0.25)
    cfg = calib.to_json()
    assert calib.prefill.prefill_seconds(0) == 0.0
    for tokens in (1, 1_000, 50_000):
        cold = router_prefill_seconds(cfg, tokens)
        assert calib.prefill.prefill_seconds(tokens) == pytest.approx(cold, rel=1e-12)
        assert calib.prefill.cache_miss_impact_seconds(tokens) == pytest.approx(cold * 1.75)
    for batch, context in ((1, 1_000), (4, 200_000), (32, 64_000)):
        assert calib.decode.decode_throughput(batch, context) == pytest.approx(
            router_decode_throughput(cfg, batch, context), rel=1e-12
        )


def test_the_flag_value_keeps_the_calibration_over_the_fields_merged_in() -> None:
    """``extra`` is merged in first: its other Program-scheduling fields stay, and the
    profile's two models are the ones the router reads."""
    calib = calibrate(shipped.resolve("tiny-cpu")[0])
    stale = {"decode_throughput_model": {"fixed_step_seconds": 9.0}, "ttl_seconds": 30}
    doc = json.loads(calib.flag_value(stale))
    assert doc == {"ttl_seconds": 30, **calib.to_json()}


def test_an_alpha_of_1_is_taken_and_named_as_given() -> None:
    """The router takes a share in [0, 1]: 1 (a prefill costs decode nothing) is one; the
    rows say a given alpha came from the flag, and the default from the additive step."""
    profile = shipped.resolve("tiny-cpu")[0]
    whole = calibrate(profile, decode_throughput_alpha=1.0)
    assert whole.prefill.decode_throughput_alpha == 1.0
    alpha = {r.field: r.source for r in whole.rows()}["prefill_cost_model.decode_throughput_alpha"]
    assert alpha == "given (--decode-throughput-alpha)"
    default = {r.field: r.source for r in calibrate(profile).rows()}
    assert "additive step" in default["prefill_cost_model.decode_throughput_alpha"]


def test_a_refusal_names_the_profiles_file_when_given() -> None:
    profile = _with(shipped.resolve("tiny-cpu")[0], decode=Decode(0.0, 1e-5, 1e-7))
    with pytest.raises(RouterCalibrationError, match=r"^/p/x\.json: decode\.step_s"):
        calibrate(profile, source="/p/x.json")
    with pytest.raises(RouterCalibrationError, match=r"^profile tiny-cpu: decode\.step_s"):
        calibrate(profile)


def test_the_start_hint_reads_the_profile_given_with_the_alpha_given(tmp_path: Path) -> None:
    """Regression: the "start the router with: … $(ttlctl profile --profile NAME --as
    vllm-router)" line named the profile by the name inside it, so for a profile file
    (named tiny-cpu, as every profile of the test model is) it read the shipped tiny-cpu,
    other coefficients than those just printed; and it dropped --decode-throughput-alpha.
    The hint's command prints what the command itself printed."""
    mine = tmp_path / "measured.json"
    doc = shipped.resolve("tiny-cpu")[0].to_json()
    doc["decode"]["step_s"] *= 2  # not the shipped profile's figures
    mine.write_text(json.dumps(doc))
    args = ["profile", "--profile", str(mine), "--as", "vllm-router"]
    res = CliRunner().invoke(app, [*args, "--decode-throughput-alpha", "0.5"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.stderr.split())
    hint = said[said.index("start the router with:") :]
    assert f"$(ttlctl profile --profile {mine} --as vllm-router --decode-throughput-alpha 0.5)" in (
        hint
    ), hint
    # the hint's own command, as a shell splits it, prints the same value
    command = shlex.split(hint[hint.index("$(") + 2 : hint.index(")")])
    assert command[0] == "ttlctl", command
    again = CliRunner().invoke(app, command[1:])
    assert again.exit_code == 0, again.output
    assert again.stdout == res.stdout
    shipped_hint = CliRunner().invoke(app, ["profile", "--profile", "tiny-cpu", "--as", ROUTER])
    assert "--profile tiny-cpu --as vllm-router)" in " ".join(shipped_hint.stderr.split())


def test_json_to_stdout_with_as_is_refused_before_measuring(tmp_path: Path) -> None:
    """Regression: `profile -o p.json --json - --as vllm-router` measured, printed the
    profile's JSON on stdout and exit 0 without the router's value (--as dropped without
    a word): both would write stdout; refused in one line before anything is timed."""
    out = tmp_path / "p.json"
    args = ["profile", "--torch", "--device", "cpu", "--contexts", "16,32,64", "-o", str(out)]
    res = CliRunner().invoke(app, [*args, "--json", "-", "--as", ROUTER])
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("error: --json - and --as vllm-router both write stdout"), line
    assert not out.exists()
