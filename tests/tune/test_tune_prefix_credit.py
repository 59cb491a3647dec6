"""`ttlctl tune --replicas N --router kv-aware --no-prefix-credit`: the study's replays place
calls as vllm-router's kv_aware places requests it does not credit with their cached prefix
(as `ttlctl replay --no-prefix-credit` does), tune.json and the bundle's provenance record
it, the bundle's router section (the router's own flags) does not, a study refuses the
other setting, and a study with no kv-aware among its routers refuses the flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from tests.tune.inputs import KV_TOKENS, PROFILE, fleet_study
from ttlctl import bundle
from ttlctl.cli import app as ttlctl_app
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)

NOTE = "warning: --router kv-aware: every call is credited with the prefix its replica caches"
#: enough trials that some run with an affinity TTL short enough for the credit to matter
TRIALS = 6


def _tune(inputs: dict[str, Any], out: Path, *extra: str, trials: int = 1) -> Any:
    return CliRunner().invoke(
        app, fleet_study(inputs, out, "--trials", str(trials), "--force", *extra)
    )


def test_a_study_without_the_credit(
    tune_inputs: dict[str, Any], in_tune_order: Path, tmp_path: Path
) -> None:
    out = tmp_path / "bundle.json"
    res = _tune(tune_inputs, out, "--router", "kv-aware", "--no-prefix-credit")
    assert res.exit_code == 0, res.output
    assert NOTE not in res.stderr
    summary = json.loads((tmp_path / "tune.json").read_text())
    assert summary["objective"]["fleet"]["prefix_credit"] is False
    assert summary["best"]["router"]["prefix_credit"] is False
    assert summary["shipped"]["router"]["prefix_credit"] is False
    # stock vLLM is judged behind cache-aware, where the credit means nothing
    held = summary["held_back"]["routers"]
    assert "prefix_credit" not in held["vllm"]
    assert all(r["prefix_credit"] is False for name, r in held.items() if name != "vllm")
    doc = bundle.read(out)
    assert doc["provenance"]["tuning"]["shipped"]["router"]["prefix_credit"] is False
    # the router section holds the router's flags: the credit is the clients', not one
    assert "prefix_credit" not in doc["router"] and doc["router"]["name"] == "kv-aware"
    q = CliRunner().invoke(ttlctl_app, ["bundle", "query", str(out), "--as", "vllm-router"])
    assert q.exit_code == 0 and "prefix" not in q.stdout, q.output
    # the deployment note says how the bundle was tuned
    said = " ".join(q.stderr.split())
    assert said.endswith(
        "; this bundle was tuned with no call credited (tune --no-prefix-credit): for clients "
        "the router credits, tune without it"
    )
    # the best trial's value (one load, one seed: that replay's mean JCT) is `ttlctl
    # replay --no-prefix-credit` of the bundle it shipped, the programs started in tune's
    # order, to the last digit
    ttl = summary["best"]["router"]["settings"]["kv_aware_session_affinity_ttl_secs"]
    same = _replay_as_tuned(in_tune_order, out, ttl, tmp_path / "same.json")
    assert same == summary["best"]["value"]


def _replay_as_tuned(trace: Path, bundle_file: Path, ttl: int, out: Path) -> float:
    """The tuned bundle replayed without the credit behind kv-aware with the best trial's
    affinity TTL: its mean JCT."""
    res = CliRunner().invoke(
        ttlctl_app,
        [
            "replay", str(trace), "--policy", "continuum", "--bundle", str(bundle_file),
            "--profile", PROFILE, "--concurrency", "8", "--kv-tokens", str(KV_TOKENS),
            "--replicas", "2", "--router", "kv-aware",
            "--kv-aware-session-affinity-ttl-secs", str(ttl), "--no-prefix-credit",
            "--no-timing", "--json", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    value: float = json.loads(out.read_text())["results"][0]["jct_mean_s"]
    return value


def test_the_credit_names_another_study(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    """With the credit and without are two studies by default (the name comes from the
    settings), whose trials of the same parameters score apart (kv-aware places calls
    otherwise); one named with --study refuses the other, naming the setting. The note
    that every call is credited is said once, where it is."""
    out = tmp_path / "bundle.json"
    names, trials = [], []
    for extra in ((), ("--no-prefix-credit",)):
        res = _tune(tune_inputs, out, "--router", "kv-aware", *extra, trials=TRIALS)
        assert res.exit_code == 0, res.output
        said = [line for line in res.stderr.splitlines() if line.startswith(NOTE)]
        assert len(said) == (0 if extra else 1), res.stderr
        summary = json.loads((tmp_path / "tune.json").read_text())
        names.append(summary["study"]["name"])
        trials.append(
            {json.dumps(t["params"], sort_keys=True): t["value"] for t in summary["trials"]}
        )
        q = CliRunner().invoke(ttlctl_app, ["bundle", "query", str(out), "--as", "vllm-router"])
        assert q.exit_code == 0, q.output
        tuned = "no call credited" if extra else "every call credited: for clients the router"
        assert f"this bundle was tuned with {tuned}" in " ".join(q.stderr.split())
    assert names[0] != names[1]
    credited, uncredited = trials
    both = credited.keys() & uncredited.keys()
    assert both and any(credited[p] != uncredited[p] for p in both), trials
    res = _tune(tune_inputs, out, "--router", "kv-aware", "--study", names[0], "--no-prefix-credit")
    assert res.exit_code == 2, res.output
    errors = res.stderr.strip().splitlines()
    assert len(errors) == 1 and "here: fleet.prefix_credit)" in errors[0], res.stderr


def test_only_a_study_with_kv_aware_takes_it(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    """Refused before any study (one line, exit 2) where no searched router is kv-aware
    or without --replicas; taken where kv-aware is one of several (its trials then run
    without the credit, and nothing says the credit is on)."""
    out = tmp_path / "run" / "bundle.json"
    res = _tune(
        tune_inputs, out, "--router", "cache-aware", "--router", "round-robin", "--no-prefix-credit"
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        "error: --no-prefix-credit: none of the routers searched (cache-aware, round-robin) "
        "takes it (only kv-aware places a request by whether it credits its cached prefix); "
        "give --router kv-aware"
    ]
    assert not out.parent.exists() or not any(out.parent.iterdir())
    alone = CliRunner().invoke(
        app,
        [
            "tune", str(tune_inputs["trace"]), "--fit", str(tune_inputs["fit"]),
            "--profile", PROFILE, "--trials", "1", "-o", str(out), "--no-prefix-credit",
        ],
    )  # fmt: skip
    assert alone.exit_code == 2, alone.output
    assert alone.stderr.strip().splitlines() == ["error: --no-prefix-credit needs --replicas N"]
    assert not out.parent.exists() or not any(out.parent.iterdir())
    # kv-aware first: its trials 0 and 1 (the defaults) run behind it
    res = _tune(
        tune_inputs,
        out,
        *("--router", "kv_aware", "--router", "cache-aware", "--no-prefix-credit"),
        trials=2,
    )
    assert res.exit_code == 0, res.output
    assert NOTE not in res.stderr
    summary = json.loads((out.parent / "tune.json").read_text())
    assert summary["objective"]["fleet"]["prefix_credit"] is False
    assert [t["params"]["router"] for t in summary["trials"]] == ["kv-aware", "kv-aware"]
    assert summary["best"]["router"]["prefix_credit"] is False
