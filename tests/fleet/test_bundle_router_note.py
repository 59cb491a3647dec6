"""A bundle tuned behind one router, replayed on a fleet behind another: replay says so
(its --router defaults to cache-aware, whatever the bundle was tuned behind), and says
nothing when the router and its settings are the bundle's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fitting.policy_params import PolicyParams
from profiles.shipped import resolve
from replay.fleet.asked import tuned_elsewhere
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec
from replay.synth import synth
from ttlctl import bundle_make
from ttlctl.bundle import tuned_prefix_credit
from ttlctl.cli import app

KV_AWARE = {"kv_aware_session_affinity_ttl_secs": 42, "router_temperature": 0.0}


def _bundle(router: Any) -> Any:
    profile = resolve("llama-3.1-8b-h100")[0].to_json()
    return bundle_make.assemble(bundle_make.empty_fit(), profile, PolicyParams(), {}, router)


def test_the_note_names_both_routers_and_what_to_give() -> None:
    tuned = _bundle({"name": "kv-aware", "settings": KV_AWARE, "replicas": 2})
    said = tuned_elsewhere(tuned, FleetSpec(2))
    assert said == (
        "tuned behind kv-aware (kv_aware_session_affinity_ttl_secs 42, router_temperature 0.0), "
        "replayed behind cache-aware (cache_threshold 0.3, balance_abs_threshold 64, "
        "balance_rel_threshold 1.5): give --router kv-aware and its settings to replay it as "
        "tuned"
    )
    asked = FleetSpec(2, RouterSettings("kv-aware", kv_aware_session_affinity_ttl_secs=42))
    assert tuned_elsewhere(tuned, asked) is None
    # other settings of the same router: the one that differs, with both values
    other_ttl = FleetSpec(2, RouterSettings("kv-aware", kv_aware_session_affinity_ttl_secs=60))
    assert tuned_elsewhere(tuned, other_ttl) == (
        "tuned behind kv-aware with kv_aware_session_affinity_ttl_secs 42, replayed with "
        "kv_aware_session_affinity_ttl_secs 60: give --router kv-aware and its settings to "
        "replay it as tuned"
    )
    # no session affinity (the router's default) reads "off", as the fleet table says
    plain = tuned_elsewhere(tuned, FleetSpec(2, RouterSettings("kv-aware")))
    assert plain is not None and "replayed with kv_aware_session_affinity_ttl_secs off" in plain
    assert tuned_elsewhere(_bundle(None), FleetSpec(2)) is None  # the bundle names none
    # Program scheduling's settings run to hundreds of characters: the note names those
    # off the router's defaults
    ps = tuned_elsewhere(tuned, FleetSpec(2, RouterSettings("program-scheduling")))
    assert ps is not None
    assert "replayed behind program-scheduling (all at the router's defaults): give" in ps


def test_behind_the_same_program_scheduling_the_setting_that_differs_is_named() -> None:
    """Regression: both configs were cut at 160 characters, the same defaults in two
    orders, and the one setting that differed was never shown (nor booleans as JSON)."""
    tuned_settings = RouterSettings(
        "program-scheduling", program_scheduling_config_json='{"max_acting_ttl_seconds": 10}'
    )
    tuned = _bundle(
        {"name": "program-scheduling", "settings": tuned_settings.resolved(), "replicas": 2}
    )
    asked = RouterSettings(
        "program-scheduling", program_scheduling_config_json='{"max_acting_ttl_seconds": 20}'
    )
    said = tuned_elsewhere(tuned, FleetSpec(2, asked))
    assert said == (
        "tuned behind program-scheduling with max_acting_ttl_seconds 10, replayed with "
        "max_acting_ttl_seconds 20: give --router program-scheduling and its settings to "
        "replay it as tuned"
    )
    other = _bundle({"name": "program-scheduling", "settings": asked.resolved(), "replicas": 2})
    away = tuned_elsewhere(other, FleetSpec(2))
    assert away is not None and "tuned behind program-scheduling (max_acting_ttl_seconds 20" in away
    assert "the rest at the router's defaults), replayed behind cache-aware" in away
    assert "False" not in away and "None" not in away


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("note")
    trace = root / "swe.parquet"
    synth("swe-bench", 6, 2).write_parquet(trace)
    bundle = root / "bundle.json"
    bundle_make.write(_bundle({"name": "kv-aware", "settings": KV_AWARE, "replicas": 2}), bundle)
    return trace, bundle


def _warnings(files: tuple[Path, Path], *args: str) -> list[str]:
    trace, bundle = files
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "continuum", "--bundle", str(bundle),
         "--concurrency", "4", "--kv-tokens", "200000", "--no-timing", *args],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return [line for line in res.stderr.splitlines() if ": tuned " in line]


def test_replay_warns_once_behind_another_router(files: tuple[Path, Path]) -> None:
    (line,) = _warnings(files, "--replicas", "2")
    assert line.startswith(f"warning: --bundle {files[1]}: tuned behind kv-aware"), line
    same = ["--router", "kv-aware", "--kv-aware-session-affinity-ttl-secs", "42"]
    assert _warnings(files, "--replicas", "2", *same) == []
    # another replica count, or one engine: said too (nothing was said before)
    (line,) = _warnings(files, "--replicas", "3", *same)
    assert line.endswith(
        "tuned on 2 replicas, replayed on 3: give --replicas 2 to replay it as tuned"
    )
    (line,) = _warnings(files)
    assert "tuned for 2 replicas behind kv-aware (kv_aware_session_affinity_ttl_secs 42" in line
    assert line.endswith(
        "replayed on one engine: give --replicas 2 --router kv-aware and its settings to "
        "replay it as tuned"
    )


def test_another_router_on_another_count_names_both() -> None:
    tuned = _bundle({"name": "kv-aware", "settings": KV_AWARE, "replicas": 2})
    said = tuned_elsewhere(tuned, FleetSpec(4))
    assert said is not None
    assert said.startswith("tuned behind kv-aware (kv_aware_session_affinity_ttl_secs 42, ")
    assert "router_temperature 0.0) on 2, replayed behind cache-aware (" in said
    assert said.endswith(
        "balance_rel_threshold 1.5) on 4: give --replicas 2 --router kv-aware and its settings "
        "to replay it as tuned"
    )
    other = FleetSpec(4, RouterSettings("kv-aware", kv_aware_session_affinity_ttl_secs=60))
    assert tuned_elsewhere(tuned, other) == (
        "tuned behind kv-aware with kv_aware_session_affinity_ttl_secs 42 on 2, replayed with "
        "kv_aware_session_affinity_ttl_secs 60 on 4: give --replicas 2 --router kv-aware and "
        "its settings to replay it as tuned"
    )


def test_the_same_router_in_either_spelling_or_at_its_defaults_is_no_other_router() -> None:
    """Regression: a section naming ``kv_aware`` (vllm-router's spelling, which the bundle
    takes), or leaving settings at their defaults, read as another router, its missing
    settings as "off"."""
    spelled = _bundle({"name": "kv_aware", "settings": KV_AWARE, "replicas": 2})
    asked = FleetSpec(2, RouterSettings("kv-aware", kv_aware_session_affinity_ttl_secs=42))
    assert tuned_elsewhere(spelled, asked) is None
    assert tuned_elsewhere(spelled, replace(asked, replicas=3)) == (
        "tuned on 2 replicas, replayed on 3: give --replicas 2 to replay it as tuned"
    )
    partial = _bundle(
        {"name": "cache-aware", "settings": {"balance_abs_threshold": 12}, "replicas": 2}
    )
    twelve = FleetSpec(2, RouterSettings("cache-aware", balance_abs_threshold=12))
    assert tuned_elsewhere(partial, twelve) is None
    said = tuned_elsewhere(partial, FleetSpec(2))
    assert said == (
        "tuned behind cache-aware with balance_abs_threshold 12, replayed with "
        "balance_abs_threshold 64: give --router cache-aware and its settings to replay it "
        "as tuned"
    )
    ps = _bundle({"name": "program-scheduling", "settings": {"stats_window_size": 9},
                  "replicas": 2})  # fmt: skip
    other = RouterSettings(
        "program-scheduling", program_scheduling_config_json='{"stats_window_size": 10}'
    )
    assert tuned_elsewhere(ps, FleetSpec(2, other)) == (
        "tuned behind program-scheduling with stats_window_size 9, replayed with "
        "stats_window_size 10: give --router program-scheduling and its settings to replay it "
        "as tuned"
    )


def test_a_live_replay_says_nothing_of_the_fleet(files: tuple[Path, Path]) -> None:
    """--live may point at a router in front of a fleet, and --replicas does not go with
    it: no note that advises it."""
    trace, bundle = files
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--live", "http://127.0.0.1:9", "--policy", "continuum",
         "--bundle", str(bundle), "--no-timing"],
    )  # fmt: skip
    assert "tuned for 2 replicas" not in res.output + res.stderr


def _tuned(router: dict[str, Any], shipped: dict[str, Any] | None) -> Any:
    """A bundle whose router section is ``router`` and whose tuning record shipped behind
    ``shipped`` (None: no tuning record, as a built bundle)."""
    doc = _bundle(router)
    if shipped is not None:
        doc["provenance"]["tuning"] = {"shipped": {"router": shipped}}
    return doc


def test_a_study_without_the_credit_is_replayed_as_tuned_only_without_it() -> None:
    """The credit is recorded with the tuning, not in the router section: a bundle tuned with
    --no-prefix-credit replayed with the credit (or the reverse) is said to differ there,
    and the flags to give name it."""
    section = {"name": "kv-aware", "settings": KV_AWARE, "replicas": 2}
    uncredited = _tuned(section, {**section, "prefix_credit": False})
    same = RouterSettings("kv-aware", kv_aware_session_affinity_ttl_secs=42)
    assert tuned_elsewhere(uncredited, FleetSpec(2, same, prefix_credit=False)) is None
    assert tuned_elsewhere(uncredited, FleetSpec(2, same)) == (
        "tuned behind kv-aware with prefix_credit false, replayed with prefix_credit true: "
        "give --router kv-aware --no-prefix-credit and its settings to replay it as tuned"
    )
    away = tuned_elsewhere(uncredited, None)
    assert away is not None and away.endswith(
        "give --replicas 2 --router kv-aware --no-prefix-credit and its settings to replay it "
        "as tuned"
    )
    other = tuned_elsewhere(uncredited, FleetSpec(2))  # behind cache-aware: the flag named
    assert other is not None and "--router kv-aware --no-prefix-credit and its" in other
    credited = _tuned(section, section)
    assert tuned_elsewhere(credited, FleetSpec(2, same)) is None
    assert tuned_elsewhere(credited, FleetSpec(2, same, prefix_credit=False)) == (
        "tuned behind kv-aware with prefix_credit true, replayed with prefix_credit false: "
        "give --router kv-aware and its settings to replay it as tuned"
    )
    # no tuning record (a built bundle, or one from before the flag): nothing to compare
    assert tuned_elsewhere(_tuned(section, None), FleetSpec(2, same, prefix_credit=False)) is None


@pytest.mark.parametrize(
    ("tuning", "credit"),
    [
        (None, None),
        ({}, None),
        ({"shipped": None}, None),
        ({"shipped": {"router": None}}, None),
        ({"shipped": {"router": "kv-aware"}}, None),
        ({"shipped": {"router": {"name": "cache-aware", "prefix_credit": False}}}, None),
        ({"shipped": {"router": {"name": "kv-aware"}}}, True),
        ({"shipped": {"router": {"name": "kv_aware", "prefix_credit": False}}}, False),
    ],
)
def test_the_tuned_credit_is_read_from_any_provenance(tuning: Any, credit: bool | None) -> None:
    doc = _bundle(None)
    if tuning is not None:
        doc["provenance"]["tuning"] = tuning
    assert tuned_prefix_credit(doc) is credit
