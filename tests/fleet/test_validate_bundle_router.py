"""``validate --replicas N --router bundle``: the router a bundle was tuned behind, started
live with the flags ``bundle query --as vllm-router`` prints and simulated with the same
settings (the live fleets here are recorded runs handed back in place of starting one, as in
tests/fleet/test_validate_stopped.py; a real fleet is tests/live/test_fleet.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import replay.validation.fleet as fleet_mod
import replay.validation.fleet_live as fleet_live
from profiles import shipped
from profiles.router_calibration import calibrate
from replay.validation.error import ValidateError
from replay.validation.fleet import validate_fleet
from replay.validation.fleet_live import LiveFleets, live_run
from replay.validation.fleet_routers import BUNDLE, bundle_router, router_setup, sim_settings
from replay.validation.resimulate import resimulate
from replay.validation.servers import Sources
from replay.workload import load
from tests.fleet.test_resimulate import _live_run
from tests.live.server_info import server_info
from tests.live.traces import agent_trace
from ttlctl import bundle, bundle_doc, bundle_make, router_flags
from ttlctl.bundle_doc import Bundle
from ttlctl.cli import app
from ttlctl.server.client import ServerError

PROFILE = shipped.resolve("tiny-cpu")[0]
CACHE_AWARE = {
    "name": "cache-aware",
    "settings": {"balance_abs_threshold": 12, "balance_rel_threshold": 1.3, "cache_threshold": 0.4},
    "replicas": 2,
}


def _bundle(tmp_path: Path, router: dict[str, Any] | None) -> tuple[Path, Bundle]:
    """A cold-start bundle of the tiny CPU profile, with ``router`` as its router section."""
    doc = bundle_make.cold_start(PROFILE.to_json(), "test")
    if router is not None:
        doc = bundle_doc.seal({**doc, "router": router})
    path = tmp_path / "bundle.json"
    bundle_make.write(doc, path)
    return path, bundle.read(path)


def test_the_bundles_router_starts_with_the_printed_flags_and_is_simulated_alike(
    tmp_path: Path,
) -> None:
    """Live: the ``--policy`` and flags `bundle query --as vllm-router` prints; simulated:
    the same router model on the same settings (12, 1.3, 0.4, where the defaults are 64,
    1.5, 0.3)."""
    path, doc = _bundle(tmp_path, CACHE_AWARE)
    printed = router_flags.vllm_router_args(CACHE_AWARE, PROFILE)
    tuned = bundle_router(doc, path)
    policy, scheduling, flags = router_setup(BUNDLE, None, None, tuned)
    assert ["--policy", policy, *flags] == printed and scheduling is None
    assert flags  # the tuned values reach the router, not its defaults
    settings = sim_settings(["cache_aware", BUNDLE], None, None, tuned)
    assert list(settings) == [BUNDLE]  # cache_aware stays on its defaults
    assert settings[BUNDLE].name == "cache-aware"
    assert settings[BUNDLE].resolved() == CACHE_AWARE["settings"]


def test_a_bundle_tuned_behind_program_scheduling_runs_it_over_consistent_hash(
    tmp_path: Path,
) -> None:
    router = {
        "name": "program-scheduling",
        "settings": {"token_capacity_per_target": 60_000, "calibration": "profile"},
        "replicas": 2,
    }
    path, doc = _bundle(tmp_path, router)
    printed = router_flags.vllm_router_args(router, PROFILE)
    policy, scheduling, flags = router_setup(BUNDLE, None, None, bundle_router(doc, path))
    # validate's pairing, as --router program_scheduling has it
    assert (policy, flags) == ("consistent_hash", ())
    assert scheduling == printed[printed.index("--program-scheduling-config-json") + 1]
    settings = bundle_router(doc, path).settings
    config, calibration = settings.program_scheduling()
    assert config.token_capacity_per_target == 60_000
    assert calibration == calibrate(PROFILE).to_json()  # the bundle profile's, as live
    assert settings.resolved()["calibration"] == "profile"
    # a section that leaves the enable key out: every call with an X-Session-ID opts in, as
    # the model assumes (vllm-router's own default would opt in none of them)
    assert json.loads(scheduling)["program_scheduling_enable_key"] == "auto"
    assert config.program_scheduling_enable_key == "auto"


@pytest.mark.parametrize(
    ("router", "message"),
    [
        (None, "records no router"),
        ({"name": "pin-aware", "settings": {"pin_queue_bound": 8}, "replicas": 2},
         "pin-aware is ttlctl's own router"),
    ],
)  # fmt: skip
def test_a_bundle_whose_router_vllm_router_cannot_run_is_refused_naming_the_file(
    tmp_path: Path, router: dict[str, Any] | None, message: str
) -> None:
    path, doc = _bundle(tmp_path, router)
    with pytest.raises(ValidateError, match=message) as caught:
        bundle_router(doc, path)
    assert str(caught.value).startswith(f"--router bundle: {path}")
    assert "--as vllm-router" not in str(caught.value)  # bundle query's flag, not validate's


def test_a_bundle_profile_the_router_cannot_be_calibrated_from_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    """Regression: a Program-scheduling bundle whose profile has no decode step (which the
    bundle's checks take) escaped as "profile tiny-cpu: decode.step_s is 0.0; …", naming
    neither the bundle nor --router bundle."""
    profile = PROFILE.to_json()
    profile["decode"] = {**profile["decode"], "step_s": 0.0}
    doc = bundle_make.cold_start(profile, "test")
    router = {"name": "program-scheduling", "settings": {}, "replicas": 2}
    path = tmp_path / "bundle.json"
    bundle_make.write(bundle_doc.seal({**doc, "router": router}), path)
    with pytest.raises(ValidateError, match=r"decode\.step_s is 0\.0; vllm-router") as caught:
        bundle_router(bundle.read(path), path)
    said = f"--router bundle: {path}: the bundle's profile tiny-cpu: decode.step_s is 0.0"
    assert str(caught.value).startswith(said)
    # bundle query names its flag and whose profile it is
    res = CliRunner().invoke(app, ["bundle", "query", str(path), "--as", "vllm-router"])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: --as vllm-router: the bundle's profile tiny-cpu: ")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"binding_strategy": "least_loaded"}, ": binding_strategy takes consistent_hash"),
        ({"calibration": "Profile"}, "calibration takes profile or reference, not 'Profile'"),
        ({"no_such_field": 1}, "no_such_field"),
    ],
)
def test_a_program_scheduling_setting_the_router_refuses_is_refused_naming_the_file(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """Regression: such a section (which `bundle verify` takes: vllm-router reads the JSON
    itself) was refused naming --program-scheduling-config-json or
    --program-scheduling-calibration, flags validate does not have, and not the file."""
    router = {"name": "program-scheduling", "settings": settings, "replicas": 2}
    path, doc = _bundle(tmp_path, router)
    with pytest.raises(ValidateError, match=message) as caught:
        bundle_router(doc, path)
    said = str(caught.value)
    assert said.startswith(f"--router bundle: {path}: ") and "--program-scheduling" not in said


def test_a_null_calibration_is_the_profiles_on_both_sides(tmp_path: Path) -> None:
    """null in the section is the default (the bundle profile's calibration), live and
    simulated alike (it read as the text 'None' and was refused)."""
    router = {"name": "program-scheduling", "settings": {"calibration": None}, "replicas": 2}
    path, doc = _bundle(tmp_path, router)
    tuned = bundle_router(doc, path)
    assert tuned.scheduling is not None
    assert (
        json.loads(tuned.scheduling)["prefill_cost_model"]
        == calibrate(PROFILE).to_json()["prefill_cost_model"]
    )
    assert tuned.settings.resolved()["calibration"] == "profile"


def _trace(tmp_path: Path) -> Path:
    return agent_trace(tmp_path / "t.parquet", programs=5, calls=3, first=200, growth=64)


def _validated(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bundle_path: Path,
    routers: list[str],
) -> tuple[dict[str, Any], list[tuple[str, Any]], list[str], Path]:
    """``validate_fleet`` of continuum behind ``routers`` on 2 replicas, each live run a
    recorded one handed back: the document, each fleet's router setup as started, the
    warnings, and the trace."""
    started: list[tuple[str, Any]] = []

    def recorded(
        fleets: Any, rep: int, name: str, policy: str, *, info: Any, measure: bool, say: Any
    ) -> tuple[Any, Any, Any]:
        started.append((policy, router_setup(policy, None, None, fleets.tuned)))
        port = 8100 + 10 * routers.index(policy)
        run = _live_run(fleets.work_dir, fleets.work, rep, policy, port)
        return replace(run, policy=name), info or server_info(), None

    monkeypatch.setattr(fleet_mod, "live_run", recorded)
    trace = _trace(tmp_path)
    warned: list[str] = []
    doc = validate_fleet(
        load(trace),
        Sources(base_cmd=["vllm", "serve", "m"]),
        replicas=2,
        routers=routers,
        policies=["continuum"],
        bundle=bundle_path,
        timing_draws=0,
        max_programs=4,
        idle_gap_cap_s=0.5,
        profile=PROFILE,
        work_dir=tmp_path / "work",
        warn=warned.append,
    )
    return doc, started, warned, trace


def test_validate_runs_the_bundles_router_beside_the_stock_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each live fleet behind ``bundle`` is started with the bundle's router (the fleets'
    shared setup carries it), and its simulated twin runs that router's model on the
    bundle's settings; the document records them for ``--resimulate``."""
    path, _ = _bundle(tmp_path, CACHE_AWARE)
    doc, started, warned, trace = _validated(tmp_path, monkeypatch, path, ["cache_aware", BUNDLE])
    assert warned == []  # tuned for the 2 replicas it runs on
    printed = router_flags.vllm_router_args(CACHE_AWARE, PROFILE)
    assert started == [
        ("cache_aware", ("cache_aware", None, ())),
        (BUNDLE, ("cache_aware", None, tuple(printed[2:]))),
    ]
    stored = doc["simulation"]["router_settings"][BUNDLE]
    assert stored == {"name": "cache-aware", **CACHE_AWARE["settings"]}
    simulated = doc["sim"]["continuum"]
    assert simulated[BUNDLE]["router"]["name"] == "cache-aware"
    assert simulated[BUNDLE]["router"]["settings"] == CACHE_AWARE["settings"]
    assert simulated["cache_aware"]["router"]["settings"]["balance_abs_threshold"] == 64
    # --resimulate reads the bundle's router back from the document: the same figures
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps({**doc, "trace": str(trace)}))
    again = json.loads(json.dumps(resimulate(recorded)))
    assert again["sim"] == json.loads(json.dumps(doc["sim"]))


def test_the_live_fleet_is_given_the_bundles_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:func:`live_run` hands the bundle router's ``--policy`` and flags to the fleet it
    starts, after any flags every router is given."""
    path, doc = _bundle(tmp_path, CACHE_AWARE)
    asked: dict[str, Any] = {}

    def policy_fleet(*args: Any, **kwargs: Any) -> Any:
        asked.update(kwargs)
        raise ServerError("not started here")

    monkeypatch.setattr(fleet_live, "policy_fleet", policy_fleet)
    fleets = LiveFleets(
        sources=Sources(base_cmd=["vllm", "serve", "m"]),
        bundle=path,
        work_dir=tmp_path,
        replicas=2,
        repeats=1,
        calibration=None,
        program_scheduling_json=None,
        router_extra=("--request-timeout-secs", "60"),
        cpu_sets=None,
        gpu_sets=None,
        work=load(_trace(tmp_path)),
        timing=None,
        seed=0,
        timeout_s=60.0,
        vocab_size=None,
        model_config=None,
        measuring=False,
        kv_tokens=None,
        warn=None,
        tuned=bundle_router(doc, path),
    )
    with pytest.raises(ServerError, match="not started here"):
        live_run(fleets, 0, "continuum", BUNDLE, info=None, measure=False, say=lambda m: None)
    printed = router_flags.vllm_router_args(CACHE_AWARE, PROFILE)
    assert asked["router_policy"] == "cache_aware"
    assert asked["router_extra"] == ("--request-timeout-secs", "60", *printed[2:])
    assert asked["program_scheduling_json"] is None


def test_router_bundle_without_a_bundle_is_one_line_and_exit_2(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "bundle", "--profile",
         "tiny-cpu", "--model", "m"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "--router bundle is the router --bundle was tuned behind: give --bundle" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    path, _ = _bundle(tmp_path, None)
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "bundle", "--bundle", str(path),
         "--policy", "continuum", "--profile", "tiny-cpu", "--model", "m"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert f"--router bundle: {path} records no router" in res.stderr


def test_a_bundle_tuned_for_another_replica_count_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _bundle(tmp_path, {**CACHE_AWARE, "replicas": 4})
    _, _, warned, _ = _validated(tmp_path, monkeypatch, path, [BUNDLE])
    assert warned == [f"--router bundle: {path} was tuned for 4 replicas; this fleet has 2"]


def test_a_bundle_tuned_behind_kv_aware_runs_with_its_replicas_events(tmp_path: Path) -> None:
    """`--router bundle` of a kv-aware bundle is kv_aware live: validate wires the replicas'
    KV events, so an engine command that publishes its own is refused, before anything
    starts."""
    kv = {"name": "kv-aware", "settings": {"kv_aware_session_affinity_ttl_secs": 60}, "replicas": 2}
    path, doc = _bundle(tmp_path, kv)
    assert router_setup(BUNDLE, None, None, bundle_router(doc, path))[0] == "kv_aware"
    trace = _trace(tmp_path)
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "bundle", "--bundle", str(path),
         "--policy", "continuum", "--profile", "tiny-cpu", "--model", "m", "--work-dir",
         str(tmp_path / "w"), "--", "--kv-events-config", "{}"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: --kv-events-config is set by validate behind kv_aware")
    assert not (tmp_path / "w").exists()
