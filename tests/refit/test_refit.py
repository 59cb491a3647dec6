"""`ttlctl refit` end to end: real ingest, fit, bundle and simulator, no mocks.

The served bundle was fitted on last month's log, when the tools ran 20 times faster; today's
log (the same kind of programs, read while some are still running) has the pauses as they are
now. Refitting on it must win in replay and replace the bundle; refitting a bundle on the very
log it was fitted from changes nothing and keeps it.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from fitting.policy_params import PolicyParams
from replay.policy_runs import Load
from replay.refit import RefitError, refit
from replay.refit_changes import tool_changes
from replay.refit_replay import engines_doc, plan
from replay.refit_settings import (
    HELD_BACK_FROM,
    RefitSettings,
    checked_settings,
    default_load,
    fit_config,
    replay_settings,
)
from replay.sim import ReplayConfig
from replay.workload import from_frame
from tests.documents import conforms
from tests.refit.logs import cut, engine_lines, swe_trace, write_log
from ttlctl import bundle, bundle_doc, bundle_history, bundle_make
from ttlctl.cli import app, render
from ttlctl.cli.kit import out
from ttlctl.errors import ConfigError
from ttlctl.ingest import pipeline
from ttlctl.jsonio import file_sha256
from ttlctl.trace import io as trace_io

PROGRAMS = 60
#: last month's tools were this much faster than today's
STALE = 0.05
#: a contended load, given on the command line
LOAD = ["--concurrency", "12", "--kv-tokens", "300000", "--truncate"]
PROFILE = "llama-3.1-8b-h100"
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "engine-log" / "engine.jsonl"


def run(*args: str) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def served_from(log: Path, folder: Path, *build: str) -> Path:
    """The bundle in service, made the user's way: ingest, fit, bundle build."""
    folder.mkdir(parents=True, exist_ok=True)
    trace, fit, out = folder / "trace.parquet", folder / "fit.json", folder / "bundle.json"
    for args in (
        ("ingest", log, "-o", trace),
        ("fit", trace, "-o", fit),
        ("bundle", "build", "--fit", fit, "--profile", PROFILE, "-o", out, *build),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("refit")
    now = swe_trace(PROGRAMS, seed=1)
    stale = now.with_columns(pl.col("tool_s") * STALE, pl.col("gap_s") * STALE)
    last_month = write_log(root / "last-month.jsonl", engine_lines(stale))
    lines = engine_lines(now)
    # read while the last programs still run: cut 30 s before the last call finishes
    today = write_log(root / "today.jsonl", cut(lines, lines[-1]["finish_unix_s"] - 30.0))
    stale_bundle = served_from(last_month, root / "stale", "--valve", "stall-only")
    fresh_bundle = served_from(today, root / "fresh", "--valve", "stall-only")
    return {"root": root, "today": today, "stale": stale_bundle, "fresh": fresh_bundle}


def copy_of(path: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(path, folder / "bundle.json"))


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_better_fit_replaces_the_served_bundle_atomically(
    world: dict[str, Path], tmp_path: Path
) -> None:
    served = copy_of(world["stale"], tmp_path / "srv")
    old = bundle.read(served)
    old_bytes = served.read_bytes()
    before = os.stat(served)
    with served.open("rb") as reader:  # a reader that has the file open keeps the old bytes
        result = run("refit", world["today"], "--bundle", served, *LOAD, "--json", "-")
        assert result.exit_code == 0, result.output
        assert reader.read() == old_bytes
    report = json.loads(result.stdout)
    assert report["action"] == "replaced" and report["guard"]["shipped"] == "new"
    jct = report["jct"]
    assert jct["new"]["mean_s"] < 0.95 * jct["old"]["mean_s"]  # clearly better
    assert jct["new"]["mean_s"] < jct["vllm"]["mean_s"]
    held = report["held_back"]
    assert jct == {
        name: {"mean_s": held[f"{name}_jct_mean_s"], "p95_s": held[f"{name}_jct_p95_s"]}
        for name in ("old", "new", "vllm")
    }
    # the η the kept policy serves with (the served bundle's), beside each fit's own
    assert report["fit"]["policy_eta"] == old["policy"]["eta"] != report["fit"]["new"]["eta"]
    # replaced by a rename (a new inode), nothing left beside it but what it replaced
    assert os.stat(served).st_ino != before.st_ino
    assert sorted(p.name for p in served.parent.iterdir()) == ["bundle.json", "bundle.json.history"]
    (kept,) = bundle_history.entries(served)
    assert kept.path.read_bytes() == old_bytes and report["previous_kept"] == str(kept.path)
    verified = run("bundle", "verify", served)
    assert verified.exit_code == 0 and "ok" in verified.output
    new = bundle.read(served)
    conforms(new, bundle_doc.Bundle)
    assert new["sha256"] == report["new_bundle_sha256"] != old["sha256"]
    assert new["policy"] == old["policy"] and new["profile"] == old["profile"]
    assert new["fit"]["config"] == old["fit"]["config"]  # the served fit's settings
    assert new["fit"] != old["fit"]
    refit_doc = new["provenance"]["refit"]
    assert refit_doc["previous_bundle"] == {"path": str(served), "sha256": old["sha256"]}
    assert refit_doc["logs"] == [
        {"path": str(world["today"]), "sha256": file_sha256(world["today"])}
    ]
    assert new["fit"]["input"]["sha256"] == file_sha256(world["today"])
    assert refit_doc["guard"]["shipped"] == "new"
    # the log was read while programs ran: they are counted, not rejected
    ingest = report["ingest"]
    assert ingest["in_flight"] > 0 and ingest["rejected"] == 0
    assert ingest["calls"] == len(world["today"].read_text().splitlines())
    # what changed: today's pauses are 20x last month's
    rows = {row["tool"]: row for row in report["tools"]}
    bash = rows["bash"]
    assert bash["new"]["p50_s"] == pytest.approx(bash["old"]["p50_s"] / STALE, rel=0.25)
    assert len(bash["new"]["tau_s"]) == len(report["contexts"]) == 4
    assert bash["new"]["tau_s"] != bash["old"]["tau_s"]
    assert rows[None]["new"]["n"] == new["fit"]["global"]["n"]


def test_the_served_bundle_is_kept_when_the_new_one_is_no_better(
    world: dict[str, Path], tmp_path: Path
) -> None:
    # the served bundle was fitted on this very log: the refit changes no decision (a tie)
    served = copy_of(world["fresh"], tmp_path / "srv")
    before = listing(served.parent)
    result = run("refit", world["today"], "--bundle", served, *LOAD)
    assert result.exit_code == 0, result.output
    assert listing(served.parent) == before  # byte-identical, nothing beside it
    assert "a tie" in result.stdout and "the bundle in service is kept" in result.stdout
    assert f"kept: {served} is unchanged" in result.stdout
    for title in ("pause after each call", "τ* by context length", "replayed JCT"):
        assert title in result.stdout
    as_json = json.loads(
        run("refit", world["today"], "--bundle", served, *LOAD, "--json", "-").stdout
    )
    assert as_json["action"] == "kept" and not as_json["guard"]["beats_baseline"]
    assert as_json["jct"]["new"]["mean_s"] == as_json["jct"]["old"]["mean_s"]
    assert listing(served.parent) == before


def test_dry_run_and_output_elsewhere(world: dict[str, Path], tmp_path: Path) -> None:
    served = copy_of(world["stale"], tmp_path / "srv")
    elsewhere = tmp_path / "staged" / "next.json"
    before = listing(served.parent)
    for extra, action in (((), "would replace"), (("-o", elsewhere), "would write")):
        result = run("refit", world["today"], "--bundle", served, *LOAD, "--dry-run", *extra)
        assert result.exit_code == 0, result.output
        assert f"dry run: {action}" in result.stdout and "nothing written" in result.stdout
        assert listing(served.parent) == before and not elsewhere.parent.exists()
    result = run("refit", world["today"], "--bundle", served, *LOAD, "-o", elsewhere, "--json", "-")
    assert json.loads(result.stdout)["action"] == "written"
    assert listing(served.parent) == before  # -o: the served bundle is left alone
    written = bundle.read(elsewhere)
    assert written["provenance"]["refit"]["previous_bundle"]["path"] == str(served)


def test_a_damaged_served_bundle_is_one_line_and_exit_2(
    world: dict[str, Path], tmp_path: Path
) -> None:
    served = copy_of(world["stale"], tmp_path / "srv")
    doc = json.loads(served.read_text())
    doc["policy"]["eta"] = 0.5  # edited by hand: the checksum no longer holds
    served.write_text(json.dumps(doc))
    before = served.read_bytes()
    result = run("refit", world["today"], "--bundle", served)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(served) in lines[0] and "checksum mismatch" in lines[0]
    assert served.read_bytes() == before
    missing = run("refit", world["today"], "--bundle", tmp_path / "none.json")
    assert missing.exit_code == 2 and "none.json: no such file" in missing.stderr


def test_a_bad_log_is_one_line_naming_file_and_line(world: dict[str, Path], tmp_path: Path) -> None:
    served = copy_of(world["stale"], tmp_path / "srv")
    lines = world["today"].read_text().splitlines()
    record = json.loads(lines[6])
    record["prompt_tokens"] = "lots"
    lines[6] = json.dumps(record)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    before = listing(served.parent)
    result = run("refit", bad, "--bundle", served, *LOAD)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: {bad}: line 7: non-numeric prompt_tokens: 'lots'"
    ]
    assert listing(served.parent) == before
    lines.insert(10, "{not json")
    bad.write_text("\n".join(lines) + "\n")
    # --skip-bad: the bad records (and the rest of line 7's program) are left out, counted
    skipped = run("refit", bad, "--bundle", served, *LOAD, "--skip-bad", "--dry-run", "--json", "-")
    assert skipped.exit_code == 0, skipped.output
    ingest = json.loads(skipped.stdout)["ingest"]
    assert ingest["rejected"] > 2 and ingest["rejected_by_reason"]["malformed JSON"] == 1
    assert ingest["records"] == ingest["calls"] + ingest["rejected"] == len(lines)
    assert ingest["rejects_shown"] and all(r["file"] == str(bad) for r in ingest["rejects_shown"])
    assert ingest["rejects_path"] is None  # a dry run writes no file: counts and examples only
    assert listing(served.parent) == before
    # not a dry run: every reject is kept beside the served bundle
    kept_run = run("refit", bad, "--bundle", served, *LOAD, "--skip-bad", "--json", "-")
    assert kept_run.exit_code == 0, kept_run.output
    beside = served.with_name("bundle.json.rejects.jsonl")
    assert json.loads(kept_run.stdout)["ingest"]["rejects_path"] == str(beside)
    assert len(beside.read_text().splitlines()) == ingest["rejected"]
    # --trace keeps the ingested trace and, beside it, every reject
    kept = tmp_path / "kept" / "trace.parquet"
    with_trace = run(
        "refit", bad, "--bundle", served, *LOAD, "--skip-bad", "--dry-run", "--trace", kept
    )
    assert with_trace.exit_code == 0, with_trace.output
    rejects = kept.with_name("trace.parquet.rejects.jsonl")
    assert kept.is_file() and f"all rejects: {rejects}" in with_trace.stdout
    assert len(rejects.read_text().splitlines()) == ingest["rejected"]
    # the report shows the first five of them, in the order they were rejected
    first = [json.loads(x) for x in rejects.read_text().splitlines()[:5]]
    assert ingest["rejected"] > 5
    assert ingest["rejects_shown"] == [
        {k: r[k] for k in ("file", "record", "reason")} for r in first
    ]


def test_refit_on_the_shipped_engine_log_sample(tmp_path: Path) -> None:
    served = served_from(SAMPLE, tmp_path / "srv")
    before = listing(served.parent)
    result = run("refit", SAMPLE, "--bundle", served)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "log: 19 records → 5 programs, 19 calls" in text
    assert "the log's mean concurrency" in text and "served bundle" in text
    report = json.loads(run("refit", SAMPLE, "--bundle", served, "--json", "-").stdout)
    assert report["action"] == "kept" and listing(served.parent) == before
    assert report["ingest"]["in_flight"] == 0
    rows = {row["tool"]: row for row in report["tools"]}
    assert set(rows) == {"bash", "grep", "pytest", None}
    assert rows["bash"]["new"]["n"] == rows["bash"]["old"]["n"] == 6
    assert report["replay"]["loads"] == [{"concurrency": 2}]  # 1.57 programs running at once
    assert report["replay"]["settings_from"] == "defaults"
    # the sample predates the engine's facts in the log: one warning naming the flags
    warned = [x for x in result.stderr.splitlines() if "does not state its engine's size" in x]
    assert len(warned) == 1 and "--kv-tokens, --block-size, --max-num-seqs" in warned[0]
    assert report["replay"]["engines"][0]["sized_from_log"] is False


def test_calls_the_replayed_engine_rejects_are_said(tmp_path: Path) -> None:
    """Regression: an engine too small for the log's longest calls cut their programs short
    in every replay, and refit judged what was left without a word (replay says it)."""
    served = served_from(SAMPLE, tmp_path / "srv")
    args = ["refit", SAMPLE, "--bundle", served, "--dry-run", "--kv-tokens", "2400"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(run(*args, "--json", "-").stdout)
    held = report["held_back"]
    assert held["rejected_calls"] > 0 and held["programs_cut_short"] > 0
    line = f"held-back replays: {held['rejected_calls']} of 19 calls rejected (a prompt that"
    assert line in " ".join(result.stdout.split())
    whole = json.loads(run("refit", SAMPLE, "--bundle", served, "--dry-run", "--json", "-").stdout)
    assert (whole["held_back"]["rejected_calls"], whole["held_back"]["programs_cut_short"]) == (
        0,
        0,
    )
    assert "rejected" not in run("refit", SAMPLE, "--bundle", served, "--dry-run").stdout


def _with_facts(log: Path, to: Path, **facts: Any) -> Path:
    """The log as a plugin that states its engine's facts writes it."""
    head = {"schema": "ttlctl.engine-log/1", "kind": "engine", "at_unix_s": 0.0}
    to.write_text(json.dumps(head | facts) + "\n" + log.read_text())
    return to


def test_the_replay_is_sized_as_the_log_states_and_a_flag_wins(
    world: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 22: the served engine's size comes from the log by default (one line says so);
    a flag given wins, and one that disagrees with the log is reported."""
    facts = {"block_size": 32, "kv_blocks": 2000, "kv_tokens": 64_000, "max_num_seqs": 48,
             "max_num_batched_tokens": 4096, "max_model_len": 65_536, "async_scheduling": True,
             "replica": None}  # fmt: skip
    log = _with_facts(world["today"], tmp_path / "today.jsonl", **facts)
    served = copy_of(world["stale"], tmp_path / "srv")
    base = ["refit", log, "--bundle", served, "--dry-run", "--seeds", "1", "--concurrency", "8"]
    result = run(*base)
    assert result.exit_code == 0, result.output
    line = "replay sized from the engine log: 64,000 KV tokens in blocks of 32, max_num_seqs 48"
    assert line in result.stdout
    assert "async scheduling" in result.stderr  # the fast simulator is synchronous
    report = json.loads(run(*base, "--json", "-").stdout)
    engine = report["replay"]["engine"]
    assert (engine["kv_tokens"], engine["block_size"], engine["max_num_seqs"]) == (64_000, 32, 48)
    assert (engine["max_num_batched_tokens"], engine["max_model_len"]) == (4096, 65_536)
    given = run(*base, "--kv-tokens", "300000", "--max-num-seqs", "48", "--json", "-")
    assert given.exit_code == 0, given.output
    engine = json.loads(given.stdout)["replay"]["engine"]
    assert (engine["kv_tokens"], engine["max_num_seqs"], engine["block_size"]) == (300_000, 48, 32)
    disagree = [x for x in given.stderr.splitlines() if "disagrees" in x]
    assert len(disagree) == 1 and "--kv-tokens 300,000" in disagree[0] and "64,000" in disagree[0]


def test_the_engines_batch_cap_sizes_the_replay_and_unmodelled_settings_are_said(
    world: dict[str, Path], tmp_path: Path
) -> None:
    """A log whose engine capped its running batch (``--max-num-active-seqs``) and its
    prefill chunks (``--long-prefill-token-threshold``) is replayed with both; a scheduler
    setting the simulator does not model is warned of by its flag."""
    facts = {"block_size": 32, "kv_blocks": 2000, "max_num_seqs": 48, "max_num_active_seqs": 12,
             "max_num_batched_tokens": 4096, "max_model_len": 65_536, "replica": None,
             "long_prefill_token_threshold": 512, "prefill_schedule_interval": 4}  # fmt: skip
    log = _with_facts(world["today"], tmp_path / "today.jsonl", **facts)
    served = copy_of(world["stale"], tmp_path / "srv")
    base = ["refit", log, "--bundle", served, "--dry-run", "--seeds", "1", "--concurrency", "8"]
    result = run(*base, "--json", "-")
    assert result.exit_code == 0, result.output
    engine = json.loads(result.stdout)["replay"]["engine"]
    assert (engine["max_num_seqs"], engine["long_prefill_token_threshold"]) == (12, 512)
    said = [x for x in result.stderr.splitlines() if "does not model" in x]
    assert len(said) == 1 and "ran --prefill-schedule-interval 4" in said[0], result.stderr
    assert "admitted at most 12 requests" in result.stderr
    given = run(*base, "--long-prefill-token-threshold", "128", "--json", "-")
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["replay"]["engine"]["long_prefill_token_threshold"] == 128
    assert "--long-prefill-token-threshold 128 disagrees with the log's engine (512)" in (
        given.stderr
    )


def test_many_tools_are_cut_short_on_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = served_from(SAMPLE, tmp_path / "srv")
    report = json.loads(run("refit", SAMPLE, "--bundle", served, "--json", "-").stdout)
    one = report["tools"][0]
    report["tools"] = [dict(one, tool=f"tool-{i:02d}") for i in range(30)] + report["tools"][-1:]
    render.refit_report(out, report)
    text = capsys.readouterr().out
    assert "tool-19" in text and "tool-20" not in text and "(any other tool)" in text
    assert "10 more tool(s) with fewer pauses: --json lists them all" in text


def test_the_served_file_changing_during_the_refit_writes_nothing(
    world: dict[str, Path], tmp_path: Path
) -> None:
    served = copy_of(world["stale"], tmp_path / "srv")
    other = world["fresh"].read_bytes()

    def meanwhile(text: str) -> None:
        if text.startswith("replaying"):
            served.write_bytes(other)  # another writer (a tune, a second refit) got there

    settings = RefitSettings(
        loads=(Load(concurrency=12),), kv_tokens=300_000, truncate=True, seeds=(1000,)
    )
    with pytest.raises(RefitError, match="changed while the refit ran; nothing written"):
        refit([world["today"]], served, settings, stage=meanwhile)
    assert served.read_bytes() == other


def test_settings_come_from_the_served_bundle(world: dict[str, Path]) -> None:
    doc = bundle.read(world["stale"])
    assert fit_config(doc).min_samples == doc["fit"]["config"]["min_samples"]
    tuned = dict(doc)
    tuned["provenance"] = {
        "tuning": {"objective": {"engine": {"kv_tokens": 123_456}, "truncate": True}}
    }
    config, source = replay_settings(tuned, RefitSettings())
    assert (config.engine.kv_tokens, config.truncate, source) == (
        123_456,
        True,
        "the bundle's tuning",
    )
    config, _ = replay_settings(tuned, RefitSettings(kv_tokens=50_000, truncate=False))
    assert (config.engine.kv_tokens, config.truncate) == (50_000, False)
    assert config.client_tags == "full"  # a bundle tuned before the tags were recorded
    # the clients the bundle was tuned for: refit's replays tag as they do (they replayed
    # with every tag, whatever tune had replayed with)
    objective = tuned["provenance"]["tuning"]["objective"] | {"client_tags": "none"}
    tagged = dict(tuned, provenance={"tuning": {"objective": objective}})
    assert replay_settings(tagged, RefitSettings())[0].client_tags == "none"
    cold = dict(doc, fit=bundle_make.empty_fit(), policy=dict(doc["policy"], k=7))
    assert fit_config(cold).min_samples == 7


def test_refit_options_out_of_range_are_config_errors_naming_them() -> None:
    for kwargs, name in (
        ({"seeds": 0}, "--seeds"),
        # as tune's --seeds (it overflowed, or built a list until memory gave out)
        ({"seeds": 10**20}, "--seeds must be at most 10,000"),
        ({"kv_tokens": 0}, "--kv-tokens"),
        ({"offload_tokens": -1}, "--offload-tokens"),
        ({"queue_delay_s": float("nan")}, "--queue-delay-seconds"),
        ({"jps": [0.0]}, "--jps"),
        ({"watermark": 1.0}, "--watermark"),
        ({"watermark": -0.5}, "--watermark"),
    ):
        with pytest.raises(ConfigError, match=f"^{name}"):
            checked_settings(**kwargs)  # type: ignore[arg-type]
    settings = checked_settings(seeds=2, concurrency=[4])
    assert settings.seeds == (HELD_BACK_FROM, HELD_BACK_FROM + 1) and len(settings.loads) == 1


def test_refit_reads_a_gzipped_log_as_the_plain_one(tmp_path: Path) -> None:
    """A rotated, gzipped engine log refits as the plain log does; a truncated one is one
    line naming it, exit 2, nothing written."""
    served = served_from(SAMPLE, tmp_path / "srv")
    packed = tmp_path / "logs" / f"{SAMPLE.name}.1.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    plain = json.loads(run("refit", SAMPLE, "--bundle", served, "--dry-run", "--json", "-").stdout)
    got = run("refit", packed, "--bundle", served, "--dry-run", "--json", "-")
    assert got.exit_code == 0, got.output
    report = json.loads(got.stdout)
    for key in ("tools", "replay", "action"):
        assert report[key] == plain[key], key
    before = listing(served.parent)
    packed.write_bytes(packed.read_bytes()[:-40])
    bad = run("refit", packed, "--bundle", served)
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        f"error: {packed}: truncated gzip data: the stream ends early"
    ]
    assert listing(served.parent) == before


def test_the_tau_table_prices_a_miss_in_the_replayed_engines_budget(tmp_path: Path) -> None:
    """The report's τ* of the served bundle is what the plugin on the replayed engine
    decides: B in steps of that engine's ``--max-num-batched-tokens``, not the profile's."""
    served = served_from(SAMPLE, tmp_path / "srv")
    doc = bundle.read(served)
    taus = {}
    for budget in (64, 8192):
        got = run("refit", SAMPLE, "--bundle", served, "--dry-run", "--json", "-",
                  "--max-num-batched-tokens", str(budget))  # fmt: skip
        assert got.exit_code == 0, got.output
        report = json.loads(got.stdout)
        assert report["replay"]["engine"]["max_num_batched_tokens"] == budget
        policy = bundle.policy_from(doc, budget)
        for row in report["tools"]:
            want = [
                policy.decide(row["tool"], c, offload=False, queue_delay_s=report["queue_delay_s"])
                for c in report["contexts"]
            ]
            assert row["old"]["tau_s"] == [d.ttl_s for d in want], row["tool"]
        taus[budget] = [row["old"]["tau_s"] for row in report["tools"]]
    assert taus[64] != taus[8192]


def _served_as(
    doc: dict[str, Any],
    path: Path,
    provenance: dict[str, Any],
    router: bundle_doc.RouterDoc | None = None,
) -> Path:
    """``doc``'s fit, profile and policy rebuilt as a bundle with ``provenance`` (and the
    ``router`` it was tuned behind), written to ``path`` (its folder made): the served one."""
    path.parent.mkdir(parents=True)
    rebuilt = bundle_make.build(
        doc["fit"],
        doc["profile"],
        PolicyParams.from_json(doc["policy"]),
        created=doc["created"],
        ttlctl_version=doc["ttlctl_version"],
        provenance=provenance,
        router=router,
    )
    path.write_text(json.dumps(rebuilt))
    return path


def test_the_router_the_policy_was_tuned_behind_is_kept(
    world: dict[str, Path], tmp_path: Path
) -> None:
    """A bundle tuned for a fleet records its router (``tune --replicas``); a refit keeps
    the policy it was tuned with, so it keeps the router too: the router restarted with
    ``bundle query --as vllm-router`` after a refit gets the same flags."""
    stale = bundle.read(world["stale"])
    router: bundle_doc.RouterDoc = {
        "name": "cache-aware",
        "settings": {
            "balance_abs_threshold": 12,
            "balance_rel_threshold": 1.3,
            "cache_threshold": 0.3,
        },
        "replicas": 2,
    }
    served = _served_as(stale, tmp_path / "srv" / "bundle.json", stale["provenance"], router)
    flags = run("bundle", "query", served, "--as", "vllm-router")
    assert flags.exit_code == 0, flags.output
    result = run("refit", world["today"], "--bundle", served, *LOAD, "--json", "-")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["action"] == "replaced"
    assert bundle.read(served).get("router") == router
    after = run("bundle", "query", served, "--as", "vllm-router")
    assert after.exit_code == 0 and after.stdout == flags.stdout, after.output


def test_force_with_output_elsewhere_says_what_it_writes(
    world: dict[str, Path], tmp_path: Path
) -> None:
    """Regression: `refit --force -o NEW` said "replacing it anyway, as asked" while it
    wrote NEW and left the served bundle alone; the verdict names the file it writes."""
    served = copy_of(world["fresh"], tmp_path / "srv")  # a tie: the new one does not beat it
    elsewhere = tmp_path / "staged" / "next.json"
    before = listing(served.parent)

    def message(*extra: str | Path) -> str:
        result = run("refit", world["today"], "--bundle", served, *LOAD, *extra, "--json", "-")
        assert result.exit_code == 0, result.output
        return str(json.loads(result.stdout)["guard"]["message"])

    kept = message("-o", elsewhere)
    assert kept.endswith(
        f"kept and nothing is written; pass --force to write it to {elsewhere} anyway"
    )
    assert not elsewhere.exists()
    forced = message("-o", elsewhere, "--force")
    assert "replacing it" not in forced
    assert forced.endswith(
        f"writing it to {elsewhere} anyway, as asked (--force); the bundle in service is left "
        "as it is"
    )
    assert elsewhere.is_file() and listing(served.parent) == before
    # over the served bundle the words were true, and stay
    assert message("--force").endswith("replacing it anyway, as asked (--force)")


def test_replicas_of_different_block_sizes_are_named_with_theirs(tmp_path: Path) -> None:
    """Two replicas' logs that state different block sizes: refit cannot replay them as one
    fleet, and says which replica states which (it printed the sizes alone)."""
    served = served_from(SAMPLE, tmp_path / "srv")
    lines = SAMPLE.read_text().splitlines(keepends=True)
    logs = []
    for i, (name, block) in enumerate((("alpha", 16), ("zeta", 32))):
        part = tmp_path / f"{name}.part"
        part.write_text("".join(lines[i::2]))
        facts = {"block_size": block, "kv_blocks": 4000, "replica": name}
        logs.append(_with_facts(part, tmp_path / f"{name}.jsonl", **facts))
    result = run("refit", *logs, "--bundle", served, "--dry-run")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: the replicas' engines have different block sizes (alpha 16, zeta 32): "
        "give --block-size to replay them as one fleet"
    )
    given = run("refit", *logs, "--bundle", served, "--dry-run", "--block-size", "16")
    assert given.exit_code == 0, given.output
    # a log that states no block size (an older plugin's): its size is said to be the
    # default, not the log's (it was blamed for a 16 it never stated)
    quiet = tmp_path / "quiet.jsonl"
    quiet.write_text("".join(lines[0::2]))
    result = run("refit", logs[1], quiet, "--bundle", served, "--dry-run")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: the replicas' engines have different block sizes ({quiet} 16 (its log "
        "states none: defaults), zeta 32): give --block-size to replay them as one fleet"
    )
    # --kv-tokens below a block: checked against the block size the replica has, and
    # named with where it came from (it named a --block-size 16 nobody gave)
    result = run("refit", logs[1], "--bundle", served, "--dry-run", "--kv-tokens", "20")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: --kv-tokens must hold at least one block: --kv-tokens 20 with a block size "
        "of 32 (the log's engine (replica zeta))"
    )
    fits = run("refit", logs[1], "--bundle", served, "--dry-run", "--kv-tokens", "20",
               "--block-size", "16")  # fmt: skip
    # past the check: the replay itself runs (and finds 20 tokens too few for any call)
    assert fits.exit_code == 2 and "no program finished in the replay" in fits.output


def test_a_refit_of_several_logs_keeps_the_served_records_and_names_every_log(
    world: dict[str, Path], tmp_path: Path
) -> None:
    """The new bundle carries the served bundle's ``tuning`` and ``profile`` records; its fit's
    input names each log and the SHA-256 of their SHA-256s (hex, in the order read); ``-o``
    naming the served file by another path replaces it, and the verdict says so."""
    fresh = bundle.read(world["fresh"])
    tuning = {"study": "nightly", "trials": 40}
    profile = {"path": "/srv/profile.json", "sha256": "ab" * 32}
    made = {"tuning": tuning, "profile": profile, "made_by": "a test"}
    served = _served_as(fresh, tmp_path / "srv" / "bundle.json", made)
    records = [json.loads(x) for x in world["today"].read_text().splitlines()]
    early = sorted({r["program_id"] for r in records})[: PROGRAMS // 2]
    parts = [
        write_log(tmp_path / name, [r for r in records if (r["program_id"] in early) == first])
        for name, first in (("a.jsonl", True), ("b.jsonl", False))
    ]
    same = served.parent / ".." / "srv" / "bundle.json"  # the served file, spelled otherwise
    result = run("refit", *parts, "--bundle", served, *LOAD, "--force", "-o", same, "--json", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["action"] == "replaced"
    assert report["guard"]["message"].endswith("replacing it anyway, as asked (--force)")
    new = bundle.read(served)
    assert new["provenance"].get("tuning") == tuning
    assert new["provenance"].get("profile") == profile
    assert "made_by" not in new["provenance"]
    shas = [file_sha256(p) for p in parts]
    assert new["fit"]["input"]["path"] == f"{parts[0]}, {parts[1]}"
    assert new["fit"]["input"]["sha256"] == hashlib.sha256("".join(shas).encode()).hexdigest()


def test_the_last_refits_record_comes_before_the_tuning_and_a_flag_of_0_is_given(
    world: dict[str, Path],
) -> None:
    """The engine, offload tier and truncation of the replays: a flag given (0 and
    ``--no-truncate`` too), else the served bundle's last refit, else its tuning."""
    doc = bundle.read(world["stale"])
    last = {"engine": {"kv_tokens": 111_000}, "offload_tokens": 5_000, "truncate": True}
    tuned = {"engine": {"kv_tokens": 222_000}, "offload_tokens": 7_000, "truncate": False}
    both = dict(doc, provenance={"refit": {"replay": last}, "tuning": {"objective": tuned}})
    config, source = replay_settings(both, RefitSettings())
    assert (config.engine.kv_tokens, config.offload_tokens, config.truncate) == (
        111_000,
        5_000,
        True,
    )
    assert source == "the bundle's last refit"
    config, _ = replay_settings(both, RefitSettings(offload_tokens=0, truncate=False))
    assert (config.offload_tokens, config.truncate) == (0, False)
    settings = checked_settings(long_prefill_token_threshold=0, offload_tokens=0)
    assert (settings.long_prefill_token_threshold, settings.offload_tokens) == (0, 0)
    with pytest.raises(ConfigError, match=r"^--long-prefill-token-threshold must be >= 0"):
        checked_settings(long_prefill_token_threshold=-1)


def test_the_tools_table_is_each_fits_pauses_and_tau_at_the_delay_given(tmp_path: Path) -> None:
    """Each row: the fit's pause count, p50 and p90 and the policy's τ* at 1k, 8k, 32k and
    128k tokens with T = ``--queue-delay-seconds``; the tools with most pauses in the new
    fit first (then in the served one)."""
    served = served_from(SAMPLE, tmp_path / "srv")
    doc = bundle.read(served)
    args = ["refit", SAMPLE, "--bundle", served, "--dry-run", "--json", "-"]
    got = run(*args, "--queue-delay-seconds", "20")
    assert got.exit_code == 0, got.output
    report = json.loads(got.stdout)
    assert report["contexts"] == [1_000, 8_000, 32_000, 128_000]
    assert report["queue_delay_s"] == 20.0
    policy = bundle.policy_from(doc, report["replay"]["engine"]["max_num_batched_tokens"])
    fit = doc["fit"]
    for row in report["tools"]:
        entry = fit["global"] if row["tool"] is None else fit["tools"][row["tool"]]
        shown = (row["old"]["n"], row["old"]["p50_s"], row["old"]["p90_s"])
        assert shown == (entry["n"], entry["p50_s"], entry["p90_s"]), row["tool"]
        want = [
            policy.decide(row["tool"], c, offload=False, queue_delay_s=20.0)
            for c in report["contexts"]
        ]
        assert row["old"]["tau_s"] == [d.ttl_s for d in want], row["tool"]
    at_0 = json.loads(run(*args).stdout)["tools"]
    assert [r["old"]["tau_s"] for r in at_0] != [r["old"]["tau_s"] for r in report["tools"]]
    # the order: most pauses in the new fit first, the served fit's counts breaking ties
    fewest = report["tools"][-2]["tool"]
    more = copy.deepcopy(fit)
    more["tools"][fewest]["n"] = 1_000
    rows = tool_changes(doc, dict(doc, fit=more))  # type: ignore[arg-type]
    assert [r["tool"] for r in rows][:1] == [fewest]


def test_the_replay_keeps_the_offload_tier_and_counts_the_logs_calls(tmp_path: Path) -> None:
    """One engine's replay: the offload tier and truncation of the settings it was given,
    the log's programs and calls; its default load is at least one program, however sparse
    the log."""
    served = bundle.read(served_from(SAMPLE, tmp_path / "srv"))
    trace = tmp_path / "trace.parquet"
    report = pipeline.ingest([SAMPLE], trace)
    frame = trace_io.read(trace)
    base = ReplayConfig(offload_tokens=4_096, truncate=True)
    part = plan(frame, report.engines, RefitSettings(), base, "x", served["fit"], served["profile"])
    assert (part.ctx.config.offload_tokens, part.ctx.config.truncate) == (4_096, True)
    (engine,) = engines_doc(part)
    assert (engine["programs"], engine["calls"]) == (5, 19)
    # a day between programs: on average almost none runs, and the replay still runs one
    day = (pl.col("program_id").rank("dense") * 86_400.0).cast(pl.Float64)
    sparse = frame.with_columns(pl.col("arrival_s") + day)
    loads, note = default_load(sparse, from_frame(sparse))
    assert loads == [Load(concurrency=1)]
    assert note == "the log's mean concurrency, 0.00 programs running at once"


def test_a_dry_runs_json_over_the_served_bundle_is_refused(tmp_path: Path) -> None:
    """The served bundle is read, and replaced only by the new bundle: ``--json`` naming it
    is refused (exit 2), dry run or not, and the bundle is left as it was."""
    served = served_from(SAMPLE, tmp_path / "srv")
    before = listing(served.parent)
    for extra in (("--dry-run",), ()):
        result = run("refit", SAMPLE, "--bundle", served, *extra, "--json", served)
        assert result.exit_code == 2, result.output
        assert listing(served.parent) == before
