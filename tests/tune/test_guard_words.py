"""What tune says beside its verdict: a margin the user asks for (``--min-gain``), a win
within the replay's noise, and a bundle whose every τ* comes from cold start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fitting.policy_params import PolicyParams
from replay.tune import guard, paired
from replay.tune.caveats import caveats
from tests.tune.inputs import KV_TOKENS, PROFILE
from ttlctl import bundle, bundle_history
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)  # two commands: typer keeps "tune" as a subcommand


def _held(tuned: list[float], vllm: list[float], never: float = 99.0) -> dict[str, Any]:
    """Held-back figures as judge.held_figures writes them, from per-replay means."""
    p = paired(tuned, vllm)
    return {
        "tuned_jct_mean_s": sum(tuned) / len(tuned),
        "vllm_jct_mean_s": sum(vllm) / len(vllm),
        "never_pin_jct_mean_s": never,
        "default_jct_mean_s": never,
        "gain_vs_vllm": p["gain"],
        "diff_vs_vllm_s": p["diff_s"],
        "diff_sem_vs_vllm_s": p["diff_sem_s"],
        "within_noise_vs_vllm": p["within_noise"],
    }


def test_min_gain_asks_for_a_margin() -> None:
    held = _held([96.0, 98.0], [100.0, 100.0])  # 1.031x
    assert guard(held, force=False)["shipped"] == "tuned"
    assert guard(held, force=False, min_gain=1.03)["shipped"] == "tuned"
    short = guard(held, force=False, min_gain=1.05)
    assert short["shipped"] == "never-pin" and not short["beats_vllm"]
    assert short["min_gain"] == 1.05
    assert "by the --min-gain of 1.05x" in short["message"] and "1.031x" in short["message"]
    forced = guard(held, force=True, min_gain=1.05)
    assert forced["shipped"] == "tuned" and forced["forced"]
    lost = guard(_held([101.0, 101.0], [100.0, 100.0]), force=False, min_gain=1.05)
    assert "--min-gain" not in lost["message"]  # no win at all: no margin to speak of
    live = {**held, "never_pin_jct_mean_s": 100.0}
    assert guard(live, False, baseline="never-pin", min_gain=1.05)["shipped"] == "never-pin"
    assert guard(live, False, baseline="never-pin", min_gain=1.01)["shipped"] == "tuned"


def test_a_win_within_noise_is_said(tune_inputs: dict[str, Any]) -> None:
    fit, profile = tune_inputs["ctx"].fit, tune_inputs["ctx"].profile
    trusted = PolicyParams(k=10)
    noisy = _held([95.0, 104.0, 96.0], [100.0, 100.0, 100.0])
    said = caveats(noisy, guard(noisy, False), trusted, fit, profile)
    assert len(said) == 1 and "within the replay's noise" in said[0], said
    clear = _held([90.0, 91.0, 89.0], [100.0, 100.0, 100.0])
    assert caveats(clear, guard(clear, False), trusted, fit, profile) == []
    one = _held([90.0], [100.0])
    assert "one held-back replay" in caveats(one, guard(one, False), trusted, fit, profile)[0]
    # nothing said of a win that is not shipped
    assert caveats(noisy, guard(noisy, False, min_gain=2.0), trusted, fit, profile) == []


def test_a_loss_shipped_with_force_is_not_called_a_gain(tune_inputs: dict[str, Any]) -> None:
    fit, profile = tune_inputs["ctx"].fit, tune_inputs["ctx"].profile
    trusted = PolicyParams(k=10)
    # the tuned policy a hair slower than stock vLLM, within noise, shipped under --force
    lost = _held([100.0, 104.0, 96.03], [100.0, 100.0, 100.0])
    verdict = guard(lost, force=True)
    assert verdict["shipped"] == "tuned" and not verdict["beats_vllm"]
    (said,) = caveats(lost, verdict, trusted, fit, profile)
    assert said.startswith("the difference from stock vLLM (1.000x, Δ +0.01 ± "), said
    assert "the gain" not in said and "within the replay's noise" in said
    one = _held([101.0], [100.0])
    (said,) = caveats(one, guard(one, force=True), trusted, fit, profile)
    assert said.startswith("the difference from stock vLLM (0.990x) comes from one"), said
    # a win keeps its word
    won = _held([95.0, 104.0, 96.0], [100.0, 100.0, 100.0])
    assert caveats(won, guard(won, False), trusted, fit, profile)[0].startswith("the gain over")


def test_every_tau_from_cold_start_is_said(tune_inputs: dict[str, Any]) -> None:
    fit, profile = tune_inputs["ctx"].fit, tune_inputs["ctx"].profile
    pauses = fit["global"]["n"]
    clear = _held([90.0, 91.0, 89.0], [100.0, 100.0, 100.0])
    verdict = guard(clear, False)
    assert caveats(clear, verdict, PolicyParams(k=pauses - 1), fit, profile) == []
    (cold,) = caveats(clear, verdict, PolicyParams(k=pauses), fit, profile)
    assert cold.startswith("every τ* comes from cold start")
    assert f"holds {pauses} pause(s), not more than K = {pauses}" in cold and "ln B" in cold
    fixed = PolicyParams(k=pauses, cold_start_ttl_s=4.0)
    assert "the fixed 4.0 s" in caveats(clear, verdict, fixed, fit, profile)[0]
    # a bundle that never pins has no τ* to speak of
    assert caveats(clear, verdict, PolicyParams(k=pauses, pins=False), fit, profile) == []


def _args(inputs: dict[str, Any], out: Path, *extra: str) -> list[str]:
    return [
        "tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE,
        "--concurrency", "6", "--concurrency", "12", "--kv-tokens", str(KV_TOKENS), "--trials", "3",
        "--holdout-seeds", "2", "--storage", str(out.parent / "study.log"), "-o", str(out),
        *extra,
    ]  # fmt: skip


def test_tune_min_gain_and_what_it_replaced(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    first = CliRunner().invoke(app, _args(tune_inputs, out))
    assert first.exit_code == 0, first.output
    summary = json.loads((tmp_path / "tune.json").read_text())
    verdict = summary["guard"]
    assert verdict["shipped"] == "tuned" and verdict["min_gain"] == 1.0
    held = summary["held_back"]  # every call fits: none rejected, nothing said of it
    assert (held["rejected_calls"], held["programs_cut_short"]) == (0, 0)
    for caveat in verdict["caveats"]:  # whatever tune found, it printed
        assert caveat[:40] in " ".join(first.output.split())
    assert bundle_history.entries(out) == [] and "rollback" not in first.output
    shipped = bundle.read(out)
    gain = summary["held_back"]["gain_vs_vllm"]
    # the same study, judged again asking for more than it won: the never-pin bundle
    again = CliRunner().invoke(app, _args(tune_inputs, out, "--min-gain", f"{gain * 1.01:.6f}"))
    assert again.exit_code == 0, again.output
    assert "by the --min-gain of" in " ".join(again.output.split())
    assert bundle.read(out)["policy"]["pins"] is False
    (kept,) = bundle_history.entries(out)
    assert bundle.read(kept.path) == shipped  # what it replaced, whole
    assert f"ttlctl bundle rollback {out}" in " ".join(again.output.split())


@pytest.mark.parametrize("value", ["0.99", "nan", "inf"])
def test_min_gain_below_one_is_refused(
    tune_inputs: dict[str, Any], tmp_path: Path, value: str
) -> None:
    res = CliRunner().invoke(app, _args(tune_inputs, tmp_path / "b.json", "--min-gain", value))
    assert res.exit_code == 2, res.output
    assert "--min-gain must be a ratio of at least 1" in res.output
    assert not (tmp_path / "b.json").exists() and "Traceback" not in res.output


def test_the_verdicts_group_thousands_as_the_tables_do() -> None:
    """A contended load's mean JCTs run past a thousand seconds: each verdict writes them
    as the tables do (1,778.35), for tune, live tune and refit alike."""
    held = _held([1778.35, 1778.35], [2345.5, 2345.5], never=1999.0)
    assert "mean JCT 1,778.35 s vs 2,345.50 s" in guard(held, force=False)["message"]
    lost = guard(_held([2345.5, 2345.5], [1778.35, 1778.35], never=3000.0), force=False)
    assert "(3,000.00 s)" in lost["message"]  # program FCFS alone loses too
    live = guard(held, False, baseline="never-pin")
    assert "mean JCT 1,778.35 s vs 1,999.00 s" in live["message"]
    refit = {"new_jct_mean_s": 1778.35, "old_jct_mean_s": 2345.5, "vllm_jct_mean_s": 3000.0}
    assert "mean JCT 1,778.35 s vs 2,345.50 s" in guard(refit, False, baseline="old")["message"]


def test_calls_rejected_in_the_held_back_replays_are_said(tune_inputs: dict[str, Any]) -> None:
    fit, profile = tune_inputs["ctx"].fit, tune_inputs["ctx"].profile
    clear = _held([90.0, 91.0, 89.0], [100.0, 100.0, 100.0])
    verdict = guard(clear, False)
    assert caveats(clear | {"rejected_calls": 0}, verdict, PolicyParams(k=10), fit, profile) == []
    refused = clear | {"rejected_calls": 7, "programs_cut_short": 3}
    (said,) = caveats(refused, verdict, PolicyParams(k=10), fit, profile, calls=120)
    assert said.startswith("held-back replays: 7 of 120 calls rejected (a prompt that"), said
    assert said.endswith("the JCTs compared are of the programs that ran to their end"), said


def test_tune_says_the_calls_its_engine_rejects(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """Regression: an engine too small for the trace's longest calls cut their programs
    short in every replay, and tune judged what was left without a word (replay says it)."""
    out = tmp_path / "bundle.json"
    args = _args(tune_inputs, out, "--max-model-len", "6000")
    args[args.index("--trials") + 1] = "2"
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "tune.json").read_text())
    held = summary["held_back"]
    assert held["rejected_calls"] > 0 and 0 < held["programs_cut_short"] <= 20
    calls = tune_inputs["ctx"].workload.calls
    line = f"held-back replays: {held['rejected_calls']} of {calls} calls rejected"
    assert any(c.startswith(line) for c in summary["guard"]["caveats"]), summary["guard"]
    assert line in " ".join(res.output.split())


def test_a_gain_of_exactly_min_gain_ships_and_forced_means_overridden() -> None:
    """docs/tuning.md: "stock's mean JCT / the tuned one's ≥ R": a gain of exactly R is
    enough; ``forced`` is said only when --force shipped a policy that did not win."""
    exact = {"tuned_jct_mean_s": 80.0, "vllm_jct_mean_s": 100.0, "never_pin_jct_mean_s": 99.0}
    assert guard(exact, force=False, min_gain=1.25)["shipped"] == "tuned"
    assert guard(exact, force=False, min_gain=1.26)["shipped"] == "never-pin"
    won = guard(exact, force=True, min_gain=1.25)
    assert won["shipped"] == "tuned" and not won["forced"]
    live = {"tuned_jct_mean_s": 80.0, "never_pin_jct_mean_s": 100.0}
    assert guard(live, False, baseline="never-pin", min_gain=1.25)["shipped"] == "tuned"
    assert not guard(live, True, baseline="never-pin", min_gain=1.25)["forced"]


def test_the_fallback_is_judged_against_stock_vllm_not_the_paper_default() -> None:
    """The guard's baseline is stock vLLM (simulator): the paper's default winning or losing
    changes nothing; program FCFS is told apart from stock vLLM too."""
    held = {
        "tuned_jct_mean_s": 90.0,
        "vllm_jct_mean_s": 100.0,
        "never_pin_jct_mean_s": 95.0,
        "default_jct_mean_s": 80.0,  # better than tuned: not the guard's concern
    }
    verdict = guard(held, force=False)
    assert verdict["shipped"] == "tuned" and verdict["beats_vllm"]
    assert verdict["never_pin_beats_vllm"] is True
    lost = guard({**held, "tuned_jct_mean_s": 101.0, "default_jct_mean_s": 200.0}, force=False)
    assert lost["shipped"] == "never-pin" and lost["never_pin_beats_vllm"] is True
    assert "without a bundle" not in lost["message"]  # program FCFS does beat stock vLLM


def test_refit_replaces_the_bundle_only_if_it_beats_the_old_one() -> None:
    """``refit``: the refitted bundle against the bundle in service (not stock vLLM); a tie
    keeps the old one and says it is a tie."""
    held = {"new_jct_mean_s": 95.0, "old_jct_mean_s": 90.0, "vllm_jct_mean_s": 100.0}
    kept = guard(held, force=False, baseline="old")
    assert kept["shipped"] == "old" and not kept["beats_baseline"] and kept["beats_vllm"]
    tie = guard({**held, "new_jct_mean_s": 90.0}, force=False, baseline="old")
    assert tie["shipped"] == "old" and "a tie" in tie["message"]
    better = guard({**held, "new_jct_mean_s": 85.0}, force=False, baseline="old")
    assert better["shipped"] == "new" and not better["forced"]
