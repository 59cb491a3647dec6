"""`ttlctl tune --replicas N`: the router's settings searched with the policy, on a real
SQLite storage; the guard against stock vLLM behind cache-aware; the bundle's router
section and `bundle query --as vllm-router`."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import polars as pl
import typer
from typer.testing import CliRunner

from profiles import profile_read
from profiles.router_calibration import calibrate
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec
from replay.tune.summary import shipped_router
from tests.tune.inputs import PROFILE, fleet_study
from ttlctl import bundle, bundle_check, bundle_doc
from ttlctl.cli import app as ttlctl_app
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)


def _tune(inputs: dict[str, Any], out: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, fleet_study(inputs, out, "--trials", "4", *extra))


def test_tune_a_fleet_searches_the_router(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    res = _tune(tune_inputs, out, "--router", "pin-aware", "--router", "kv-aware", "--force")
    assert res.exit_code == 0, res.output
    doc = bundle.read(out)
    summary = json.loads((tmp_path / "tune.json").read_text())
    # the router was a searched parameter, with its settings; the defaults enqueued first
    trials = summary["trials"]
    assert trials[0]["params"]["router"] == "pin-aware"
    assert trials[0]["params"]["pin_queue_bound"] == 8
    assert all(t["params"]["router"] in ("pin-aware", "kv-aware") for t in trials)
    best = summary["best"]
    assert best["router"]["name"] == best["params"]["router"]
    assert best["router"]["replicas"] == 2
    # the stock stack behind vllm-router's default is what the guard compared with, and the
    # console's table says so, row by row
    lines = res.stdout.splitlines()
    assert any("vllm (stock)" in line and "cache-aware" in line for line in lines), res.stdout
    assert any(line.startswith("│ tuned") and best["router"]["name"] in line for line in lines)
    held = summary["held_back"]
    assert held["routers"]["vllm"]["name"] == "cache-aware"
    assert held["routers"]["vllm"]["settings"]["balance_abs_threshold"] == 64
    assert held["routers"]["tuned"] == best["router"]
    # the paper's default and never-pin run behind the study's router, not the tuned one
    assert held["routers"]["default"] == held["routers"]["never-pin"]
    assert held["routers"]["default"]["name"] == "pin-aware"
    assert held["routers"]["default"]["settings"] == {"pin_queue_bound": 8}
    # the bundle records the router it was tuned behind (forced: the tuned one)
    assert doc["router"] == best["router"]
    # the study is in the SQLite file, with the router among its params
    db = tmp_path / "study.db"
    with sqlite3.connect(db) as con:
        names = {r[0] for r in con.execute("select param_name from trial_params")}
    assert {"router", "eta", "valve"} <= names
    study = optuna.load_study(study_name=summary["study"]["name"], storage=f"sqlite:///{db}")
    assert len(study.trials) == 4


def test_one_router_in_two_spellings_is_one_router(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """vllm-router's spelling and ttlctl's name one router: the study does not search a
    choice between them (said in one warning line)."""
    out = tmp_path / "bundle.json"
    res = _tune(tune_inputs, out, "--router", "kv_aware", "--router", "kv-aware", "--force")
    assert res.exit_code == 0, res.output
    said = [line for line in res.stderr.splitlines() if "given more than once" in line]
    assert said == [
        "warning: --router kv-aware given more than once (in either spelling): the study "
        "searches each router once"
    ], res.stderr
    trials = json.loads((tmp_path / "tune.json").read_text())["trials"]
    assert trials and all("router" not in t["params"] for t in trials)
    assert all("kv_aware_session_affinity_ttl_secs" in t["params"] for t in trials)
    assert bundle.read(out)["router"]["name"] == "kv-aware"


def test_bundle_query_as_vllm_router(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    res = _tune(tune_inputs, out, "--router", "cache-aware", "--force")
    assert res.exit_code == 0, res.output
    doc = bundle.read(out)
    settings = doc["router"]["settings"]
    q = CliRunner().invoke(ttlctl_app, ["bundle", "query", str(out), "--as", "vllm-router"])
    assert q.exit_code == 0, q.output
    assert q.stdout.split() == [
        "--policy", "cache_aware",
        "--balance-abs-threshold", str(settings["balance_abs_threshold"]),
        "--balance-rel-threshold", str(settings["balance_rel_threshold"]),
        "--cache-threshold", str(settings["cache_threshold"]),
    ]  # fmt: skip
    # pin-aware has no vllm-router policy: refused, the nearest named
    pin_aware = {**doc["router"], "name": "pin-aware", "settings": {"pin_queue_bound": 16}}
    pinned = bundle_doc.seal({**doc, "router": pin_aware})
    (tmp_path / "pin.json").write_text(json.dumps(pinned))
    q = CliRunner().invoke(
        ttlctl_app, ["bundle", "query", str(tmp_path / "pin.json"), "--as", "vllm-router"]
    )
    assert q.exit_code == 2 and "no policy like it" in q.output and "kv_aware" in q.output
    # an old bundle (no router section) stays valid, and says what is missing
    old = {k: v for k, v in doc.items() if k != "router"}
    (tmp_path / "old.json").write_text(json.dumps(bundle_doc.seal(old)))
    bundle_check.verify(bundle.read(tmp_path / "old.json"))
    q = CliRunner().invoke(
        ttlctl_app, ["bundle", "query", str(tmp_path / "old.json"), "--as", "vllm-router"]
    )
    assert q.exit_code == 2 and "no router section" in q.output


def test_tune_fleet_refusals(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    res = _tune(tune_inputs, tmp_path / "b.json", "--router", "nope")
    assert res.exit_code == 2 and "--router: unknown router 'nope'" in res.output


def test_a_profile_program_scheduling_cannot_take_is_refused_before_the_study(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """A profile with a negative coefficient (the router takes none) is one line, exit 2,
    and no study: it was a traceback from trial 0, with the study's database left behind."""
    doc: dict[str, Any] = dict(resolve(PROFILE)[0].to_json())
    doc["prefill"] = {**doc["prefill"], "q": -1e-10}
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps(doc))
    out = tmp_path / "run" / "b.json"
    res = CliRunner().invoke(
        app,
        [
            "tune", str(tune_inputs["trace"]), "--fit", str(tune_inputs["fit"]), "--profile",
            str(negative), "--concurrency", "8", "--trials", "1", "--seeds", "1",
            "--holdout-seeds", "1", "--replicas", "2", "--router", "program-scheduling",
            "-o", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "prefill.q is -1e-10" in res.output and "Traceback" not in res.output
    assert f"error: {negative}: prefill.q is -1e-10" in res.output  # the file, not its name
    assert not out.parent.exists()
    # replay refuses it the same way, before the replay
    res = CliRunner().invoke(
        ttlctl_app,
        [
            "replay", str(tune_inputs["trace"]), "--policy", "vllm", "--profile", str(negative),
            "--replicas", "2", "--router", "program-scheduling", "--concurrency", "8",
        ],
    )  # fmt: skip
    assert res.exit_code == 2 and "Traceback" not in res.output
    # (any command refuses it now, as it loads the profile: the rule is a profile's)
    assert res.stderr.strip().splitlines() == [
        f"error: {negative}: prefill.q is -1e-10; a profile needs it finite and >= 0"
    ]


def test_tune_program_scheduling_and_print_its_router_flags(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """vllm-router's Program scheduling tuned by replay: its config fields searched (the
    router's defaults first), the bundle's router section, and its flags calibrated from
    the bundle's profile."""
    out = tmp_path / "bundle.json"
    res = _tune(tune_inputs, out, "--router", "program-scheduling", "--force")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "tune.json").read_text())
    trials = summary["trials"]
    first = trials[0]["params"]
    assert first["max_acting_ttl_seconds"] == 10.0 and first["stats_window_size"] == 100
    assert first["admission_waiting_request_threshold"] == 1
    assert first["token_capacity"] is False
    db = tmp_path / "study.db"
    with sqlite3.connect(db) as con:
        names = {r[0] for r in con.execute("select param_name from trial_params")}
    assert {"max_acting_ttl_seconds", "admission_waiting_request_threshold", "eta"} <= names
    doc = bundle.read(out)
    router = doc["router"]
    assert router["name"] == "program-scheduling" and router["replicas"] == 2
    best = summary["best"]["params"]
    assert router["settings"]["max_acting_ttl_seconds"] == best["max_acting_ttl_seconds"]
    assert router["settings"]["calibration"] == "profile"
    q = CliRunner().invoke(ttlctl_app, ["bundle", "query", str(out), "--as", "vllm-router"])
    assert q.exit_code == 0, q.output
    args = q.stdout.split()  # as `$(ttlctl bundle query …)` splits it
    assert args[:2] == ["--enable-program-scheduling", "--program-scheduling-config-json"]
    config = json.loads(args[2])
    assert config["program_scheduling_enable_key"] == "auto"
    assert config["max_acting_ttl_seconds"] == best["max_acting_ttl_seconds"]
    # calibrated from the bundle's profile: all seven coefficients, the profile's
    profile = profile_read.from_json(doc["profile"])
    assert {k: config[k] for k in ("prefill_cost_model", "decode_throughput_model")} == (
        calibrate(profile).to_json()
    )


def test_tune_on_the_logged_placement(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    """--router as-logged (a trace from several replicas' logs): the study keeps the
    recorded placement, and stock vLLM is judged on it too (the routing that ran), not
    behind cache-aware; alone only; its bundle names no vllm-router flags."""
    logged = tmp_path / "logged.parquet"
    pl.read_parquet(tune_inputs["trace"]).with_columns(
        pl.when(pl.col("turn") % 2 == 0).then(pl.lit("r1")).otherwise(pl.lit("r2")).alias("replica")
    ).write_parquet(logged)
    inputs = {**tune_inputs, "trace": logged}
    out = tmp_path / "bundle.json"
    res = _tune(inputs, out, "--router", "as-logged", "--router", "cache-aware")
    assert res.exit_code == 2 and "--router as-logged replays the placement" in res.output
    res = _tune(inputs, out, "--router", "as-logged", "--force")
    assert res.exit_code == 0, res.output
    held = json.loads((tmp_path / "tune.json").read_text())["held_back"]
    assert {r["name"] for r in held["routers"].values()} == {"as-logged"}, held["routers"]
    # each router record names the replicas as the trace does, in replica order
    assert [r["replica_names"] for r in held["routers"].values()] == [["r1", "r2"]] * len(
        held["routers"]
    )
    q = CliRunner().invoke(ttlctl_app, ["bundle", "query", str(out), "--as", "vllm-router"])
    assert q.exit_code == 2 and "tuned on the placement its trace recorded" in q.output


def test_a_fallback_bundle_never_records_a_router_that_lost(tune_inputs: dict[str, Any]) -> None:
    """The router the shipped bundle records: the tuned one with the tuned policy; with the
    never-pin fallback, the study's router it was judged behind, unless never-pin lost to
    stock vLLM too: then stock's (cache-aware with its defaults), which `bundle query --as
    vllm-router` then prints. Regression: that bundle carried the study's router (there
    consistent-hash), which lost to stock, and the query printed it."""
    study = FleetSpec(2, RouterSettings("consistent-hash"))
    tuned = FleetSpec(2, RouterSettings("sticky-least-loaded"))
    ctx = replace(tune_inputs["ctx"], fleet=study)
    assert shipped_router({"shipped": "tuned"}, ctx, tuned) == tuned
    fallback = {"shipped": "never-pin", "never_pin_beats_vllm": True}
    assert shipped_router(fallback, ctx, tuned) == study
    lost = {"shipped": "never-pin", "never_pin_beats_vllm": False}
    assert shipped_router(lost, ctx, tuned) == FleetSpec(2, RouterSettings("cache-aware"))
    live = {"shipped": "never-pin", "never_pin_beats_vllm": None}  # live: stock not measured
    assert shipped_router(live, ctx, tuned) == study
    placed = {("p000", 0): "r1", ("p001", 0): "r2"}
    logged = replace(ctx, fleet=FleetSpec(2, RouterSettings("as-logged"), placed))
    assert shipped_router(lost, logged, tuned) == logged.fleet  # stock's placement: the log's
    assert shipped_router(lost, tune_inputs["ctx"], None) is None  # one engine
