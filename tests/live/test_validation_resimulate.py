"""``ttlctl validate --resimulate RECORDED.json`` on a single-server validation
(replay/validation/resimulate.py): each policy simulated again beside its recorded live
runs, nothing started live.

The recorded document here is written by the product's own document code
(:func:`~replay.validation.server_doc.server_document`, validate's own last step) from live
runs made by hand (two runs a policy, merged as validate merges them; two measurements' raw
timings; a continuum bundle): re-simulated with the same code it gives its own rows,
ranking and goals back; ``--profile`` prices the simulated side by that profile and leaves
the live side as it was; and every input it cannot trust is refused in one line. The same
round trip on a real live validation's document is in tests/live/test_servers.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profiles.engine_fit import fit_samples
from profiles.shipped import resolve
from replay.live import cap_pauses, first_programs
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured, pooled
from replay.validation.resimulate import resimulate
from replay.validation.server_doc import measured_on, server_document
from replay.validation.sim_record import workload_fingerprint
from replay.validation.sim_side import SimSide
from replay.validation.stats import merge_runs, ranking
from replay.workload import load, retimed
from tests.bundles import write_bundle
from tests.live.traces import agent_trace
from tests.profiles.engine_samples import samples
from tests.resimulated import refused, rewritten, slower
from tests.terminal_env import cli_env
from ttlctl import bundle as bundle_mod

POLICIES = ["vllm", "continuum"]
CAP_S = 0.5
#: the keys validate judges (a re-simulation makes them again)
JUDGED = ("rows", "sim", "ranking", "goals", "profile")


def _live_run(policy: str, rep: int) -> dict[str, Any]:
    """One live run's figures as validate's live replay reports them."""
    slower = 1.0 if policy == "vllm" else 0.8
    return {
        "policy": policy,
        "programs": 4,
        "jct_mean_s": (5.0 + rep) * slower,
        "jct_p95_s": None,
        "ttft_mean_s": 0.25 + 0.01 * rep,
        "prefix_hit_rate": 0.4 + 0.02 * rep,
        "preemptions": rep,
    }


def _measured(repeat: int) -> Measured:
    taken = samples(repeat, f"2026-12-02T05:{10 + repeat}:00+00:00", scale=1 + 0.3 * repeat)
    return Measured(
        repeat, "measured from vllm at http://127.0.0.1:8101", 0, taken, fit_samples([taken])
    )


def _recorded(
    tmp_path: Path,
    *,
    async_scheduling: bool = False,
    backend: str = "fast",
    client_tags: str = "full",
) -> Path:
    """A two-policy, two-repeat validation's document, its profile measured twice on the
    vllm server and pooled, continuum run with a bundle."""
    trace = agent_trace(tmp_path / "trace.parquet", programs=5, calls=3, first=200, growth=64)
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    bundle = write_bundle(work_dir / "bundle.json", cold_start_ttl_s=30.0)
    work = cap_pauses(first_programs(load(trace), 4), CAP_S)
    measured = [_measured(k) for k in (1, 2)]
    profile, source = pooled(measured, measured_on(POLICIES[0]))
    timing = Load(jps=4.0, seed=3)
    side = SimSide(
        replicas=1,
        profile=profile,
        engine=SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048),
        timing=timing,
        bundle=bundle_mod.read(bundle),
        async_scheduling=async_scheduling,
        client_tags=client_tags,
    )
    live = {p: merge_runs([_live_run(p, rep) for rep in (0, 1)]) for p in POLICIES}
    doc = server_document(
        work,
        side,
        live,
        policies=POLICIES,
        backend=backend,
        profile_source=source,
        measured=measured,
        bundle=bundle,
        servers={p: {"url": f"http://127.0.0.1:{8101 + i}"} for i, p in enumerate(POLICIES)},
        server_info={"vllm": {"model": "tiny"}},
        work_dir=work_dir,
        config={
            "jps": timing.jps,
            "concurrency": timing.concurrency,
            "seed": timing.seed,
            "max_programs": 4,
            "idle_gap_cap_s": CAP_S,
            "repeats": 2,
            "backend": backend,
            "async_scheduling": async_scheduling,
            "client_tags": client_tags,
        },
        say=lambda message: None,
    )
    doc["trace"] = str(trace)
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    return _recorded(tmp_path)


def _sim(doc: dict[str, Any], policy: str, metric: str = "jct_mean_s") -> float:
    return float(next(r["sim"] for r in doc["rows"][policy] if r["metric"] == metric))


def _lives(doc: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        p: [(r["metric"], r["live"], r["live_range"]) for r in doc["rows"][p]] for p in POLICIES
    }


NO_VLLM = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="--backend vllm needs vLLM installed"
)


@pytest.mark.parametrize(
    ("async_scheduling", "backend"),
    [(False, "fast"), (True, "fast"), pytest.param(False, "vllm", marks=NO_VLLM)],
)
def test_the_same_code_gives_the_recorded_rows_ranking_and_goals_back(
    tmp_path: Path, async_scheduling: bool, backend: str
) -> None:
    recorded = _recorded(tmp_path, async_scheduling=async_scheduling, backend=backend)
    doc = json.loads(recorded.read_text())
    # simulated by the backend validate was told, and untimed: a wall time is no figure
    assert all(doc["sim"][p].get("backend", "fast") == backend for p in POLICIES)
    assert all(doc["sim"][p]["wall_s"] is None for p in POLICIES)
    assert doc["simulation"]["workload"]["calls"] == 12
    assert doc["simulation"]["load"] == {"jps": 4.0, "concurrency": None, "seed": 3}
    told: list[tuple[int, int]] = []
    again = json.loads(json.dumps(resimulate(recorded, runs_done=lambda *n: told.append(n))))
    for key in JUDGED:
        assert again[key] == doc[key], key
    # the bar's count: each policy re-simulated, of all of them
    assert told == [(done, len(POLICIES)) for done in range(len(POLICIES) + 1)]
    # the recorded rest as it was, the judged part said to be re-simulated
    assert {k: v for k, v in again.items() if k != "resimulated"} == doc
    assert again["resimulated"]["from"] == str(recorded.resolve())
    assert again["resimulated"]["profile"] == "recorded"
    assert again["resimulated"]["pricing"] == "as recorded: every run by the 2 measurements pooled"
    # the command: the validate table and the same document, written
    out = tmp_path / "again.json"
    written, printed = rewritten(recorded, out)
    assert all(written[key] == doc[key] for key in JUDGED)
    assert "validate: simulator vs live" in printed and "re-simulated from" in printed


def _resimulated(recorded: Path, terminal: bool) -> subprocess.CompletedProcess[str]:
    env = cli_env(terminal=terminal, columns=200)  # wide enough for the step's description
    cmd = [sys.executable, "-m", "ttlctl.cli", "validate", "--resimulate", str(recorded)]
    return subprocess.run([*cmd, "--json", "-"], env=env, capture_output=True, text=True)


def test_the_resimulate_bar_counts_the_policies_on_a_terminal_only(recorded: Path) -> None:
    """Not ``0/?`` throughout: the policies re-simulated of all, as validate's live runs."""
    piped, shown = _resimulated(recorded, terminal=False), _resimulated(recorded, terminal=True)
    assert piped.returncode == shown.returncode == 0, piped.stderr + shown.stderr
    assert piped.stderr == ""  # off a terminal: no bar, and no blank line either
    assert shown.stdout == piped.stdout
    done = len(POLICIES)
    assert "re-simulating" in shown.stderr and f"{done}/{done}" in shown.stderr, shown.stderr
    assert f"1/{done}" in shown.stderr and "continuum: simulating" in shown.stderr


def test_a_profile_given_prices_the_simulated_side_alone(recorded: Path, tmp_path: Path) -> None:
    doc = json.loads(recorded.read_text())
    fast = resolve("tiny-cpu")[0]
    slow_file = tmp_path / "slow.json"
    slow_file.write_text(json.dumps(slower(fast, 3.0).to_json()))
    by_fast = json.loads(json.dumps(resimulate(recorded, profile=fast, profile_name="tiny-cpu")))
    out = tmp_path / "slow-again.json"
    by_slow = rewritten(recorded, out, "--profile", str(slow_file))[0]
    for again, name in ((by_fast, "tiny-cpu"), (by_slow, str(slow_file))):
        # one profile, as validate --profile prices: given, no measurements
        assert again["profile"]["source"] == "given" and again["profile"]["measurements"] == []
        assert again["resimulated"]["profile"] == name
        assert again["resimulated"]["pricing"] == f"every run by the profile given ({name})"
        # the live side is the recorded one, row by row
        assert again["live"] == doc["live"] and _lives(again) == _lives(doc)
        assert again["ranking"]["live"] == doc["ranking"]["live"]
    assert by_fast["profile"]["doc"] == fast.to_json()
    for policy in POLICIES:
        # three times the price of every step: every policy's calls take longer
        assert _sim(by_slow, policy) > _sim(by_fast, policy)
        assert _sim(by_slow, policy, "ttft_mean_s") > _sim(by_fast, policy, "ttft_mean_s")
        assert _sim(by_fast, policy) != _sim(doc, policy)
        assert by_slow["sim"][policy] != by_fast["sim"][policy]
    # the re-simulated document is a recorded one too: priced as it was, by the profile
    twice = json.loads(json.dumps(resimulate(out)))
    assert all(twice[key] == by_slow[key] for key in JUDGED)
    assert (
        twice["resimulated"]["pricing"]
        == "as recorded: every run by the profile validate was given"
    )


def _variant(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("part", "key", "value", "said"),
    [
        ("config", "idle_gap_cap_s", float("nan"), "config.idle_gap_cap_s is NaN, which validate"),
        ("config", "backend", "bogus", 'config.backend is "bogus", not one of fast, vllm'),
        ("config", "client_tags", "all", 'config.client_tags is "all", not one of full, tool, '),
        ("engine", "kv_tokens", "abc", 'engine.kv_tokens is "abc"; a size, a whole number'),
        ("engine", "kv_tokens", -5, "engine.kv_tokens must hold at least one block (engine.bl"),
        ("simulation", "idle_gap_cap_s", -1, "simulation.idle_gap_cap_s is -1, not seconds"),
        ("config", "idle_gap_cap_s", float("-inf"), "config.idle_gap_cap_s is -Infinity, whi"),
        ("config", "async_scheduling", 1, "damaged single-server document (ValueError: async_sc"),
    ],
)
def test_a_damaged_field_is_refused_naming_the_file_and_the_field(
    recorded: Path, tmp_path: Path, part: str, key: str, value: Any, said: str
) -> None:
    """Regression: a NaN config.idle_gap_cap_s re-simulated without a word, and with
    ``--json`` ended in a traceback (NaN is not JSON); config.backend "bogus" read "--backend
    must be one of fast, vllm" (no --backend was given, and the file went unnamed); engine
    kv_tokens "abc" read "damaged single-server document (TypeError: '<' not supported …)"
    and -5 "--kv-tokens must hold at least one block", naming no field."""
    doc = json.loads(recorded.read_text())
    bad = _variant(tmp_path, "bad", {**doc, part: {**doc[part], key: value}})
    out = tmp_path / "out.json"
    text = refused(["--resimulate", str(bad), "--json", str(out)])
    assert text.startswith(f"error: {bad}: {said}"), text
    assert not out.exists()


def test_the_recorded_client_tags_are_the_simulated_clients(tmp_path: Path) -> None:
    """A validation whose clients tagged nothing is re-simulated with clients that tag
    nothing (its own rows back, which full tags would not give); a document from before
    validate recorded the tags is read as full, the only tagging there was."""
    full = json.loads(_recorded(tmp_path / "full").read_text())
    recorded = _recorded(tmp_path / "none", client_tags="none")
    doc = json.loads(recorded.read_text())
    assert doc["config"]["client_tags"] == "none"
    assert doc["sim"]["continuum"]["pins"] != full["sim"]["continuum"]["pins"]
    again = resimulate(recorded)
    assert all(again[key] == doc[key] for key in JUDGED)
    older = {**full, "config": {k: v for k, v in full["config"].items() if k != "client_tags"}}
    path = _variant(tmp_path, "older", older)
    assert all(resimulate(path)[key] == full[key] for key in JUDGED)


def test_a_pause_cap_of_zero_is_read(recorded: Path, tmp_path: Path) -> None:
    """Regression: --trace-idle-gap-cap-seconds takes 0 (every pause set to 0) and validate
    records it as given, but re-simulating refused such a document ("not seconds above 0").
    Edited in here, the cap is read; what then refuses it is the recorded workload's
    fingerprint (its runs were made with another cap), as for any edit of the load."""
    doc = json.loads(recorded.read_text())
    sim = {**doc["simulation"], "idle_gap_cap_s": 0}
    text = refused(["--resimulate", str(_variant(tmp_path, "zero", {**doc, "simulation": sim}))])
    assert "pauses capped at 0 s are not those" in text and "idle_gap_cap_s" not in text, text
    sim["idle_gap_cap_s"] = -0.5
    text = refused(["--resimulate", str(_variant(tmp_path, "neg", {**doc, "simulation": sim}))])
    assert "simulation.idle_gap_cap_s is -0.5, not seconds (0 or more) nor null" in text, text


def test_what_cannot_be_resimulated_is_refused_in_one_line(recorded: Path, tmp_path: Path) -> None:
    doc = json.loads(recorded.read_text())
    # a document written before validate recorded its simulation
    old = _variant(tmp_path, "old", {k: v for k, v in doc.items() if k != "simulation"})
    text = refused(["--resimulate", str(old)])
    assert text.startswith(f"error: {old}: lacks simulation, which re-simulating needs"), text
    older = _variant(
        tmp_path, "older", {k: v for k, v in doc.items() if k not in ("simulation", "live")}
    )
    assert f"{older}: lacks simulation, live, which" in refused(["--resimulate", str(older)])
    assert "written before validate recorded them cannot be re-simulated" in text
    config = {k: v for k, v in doc["config"].items() if k != "backend"}
    backendless = _variant(tmp_path, "backendless", {**doc, "config": config})
    assert "lacks config.backend," in refused(["--resimulate", str(backendless)])
    sim = {k: v for k, v in doc["simulation"].items() if k != "workload"}
    printless = _variant(tmp_path, "printless", {**doc, "simulation": sim})
    assert "lacks simulation.workload," in refused(["--resimulate", str(printless)])
    # a bundle whose checksum is not recorded cannot be checked: not taken on trust
    sim = {k: v for k, v in doc["simulation"].items() if k != "bundle_sha256"}
    unsummed = _variant(tmp_path, "unsummed", {**doc, "simulation": sim})
    assert "lacks simulation.bundle_sha256," in refused(["--resimulate", str(unsummed)])
    nulled = _variant(tmp_path, "nulled", {**doc, "simulation": {**sim, "bundle_sha256": None}})
    text = refused(["--resimulate", str(nulled)])
    assert f"{nulled}: damaged document (its bundle {doc['bundle']} has no SHA-256" in text
    damaged = _variant(tmp_path, "damaged", {**doc, "engine": {**doc["engine"], "no_such": 1}})
    text = refused(["--resimulate", str(damaged)])
    assert f"{damaged}: engine.no_such is 1; not a setting of the simulated engine" in text
    liveless = _variant(tmp_path, "liveless", {**doc, "live": {"vllm": doc["live"]["vllm"]}})
    text = refused(["--resimulate", str(liveless)])
    assert f"{liveless}: damaged single-server document (no live runs of continuum)" in text
    listed = _variant(tmp_path, "listed", {**doc, "live": {**doc["live"], "vllm": []}})
    text = refused(["--resimulate", str(listed)])
    assert f"{listed}: damaged single-server document (no live runs of vllm)" in text
    # options of a live run: the document says how its runs went
    for extra, flag in (
        (["--url", "vllm=http://127.0.0.1:1"], "--url"),
        (["--policy", "vllm"], "--policy"),
        (["--repeats", "3"], "--repeats"),
        (["--backend", "vllm"], "--backend"),
        (["--jps", "2"], "--jps"),
    ):
        text = refused(["--resimulate", str(recorded), *extra])
        assert text.split(": ", 1)[1].startswith(f"{flag} does not go with --resimulate"), text
    # a trace that is not the one replayed
    other = agent_trace(tmp_path / "other.parquet", programs=5, calls=4, first=200, growth=64)
    text = refused([str(other), "--resimulate", str(recorded)])
    assert str(other) in text and "16 calls against 12 recorded" in text
    # the bundle continuum ran with: changed since, or gone
    bundle = Path(doc["bundle"])
    assert bundle.is_absolute()
    kept = bundle.read_bytes()
    write_bundle(bundle, cold_start_ttl_s=5.0)
    assert f"{bundle}: not the bundle {recorded} ran with" in refused(
        ["--resimulate", str(recorded)]
    )
    bundle.unlink()
    assert f"its bundle {bundle} is missing" in refused(["--resimulate", str(recorded)])
    bundle.write_bytes(kept)
    assert resimulate(recorded)["rows"] == doc["rows"]


def test_each_side_is_ranked_by_its_own_figures(recorded: Path) -> None:
    """The document's sim ranking is the simulated runs', its live ranking the live runs'
    (here the simulator ties the policies where live continuum is faster)."""
    doc = json.loads(recorded.read_text())
    assert doc["ranking"]["sim"] == ranking(doc["sim"]) == [["continuum", "vllm"]]
    assert doc["ranking"]["live"] == ranking(doc["live"]) == [["continuum"], ["vllm"]]


def test_the_fingerprint_holds_each_programs_start(tmp_path: Path) -> None:
    """A trace whose programs start at other times is not the one replayed."""
    trace = agent_trace(tmp_path / "trace.parquet", programs=2, calls=3, first=200, growth=64)
    work = first_programs(load(trace), 2)
    moved = retimed(work, [p.start_s + 1.0 for p in work.programs])
    assert workload_fingerprint(moved)["sha256"] != workload_fingerprint(work)["sha256"]


def test_the_document_counts_the_programs_and_calls_replayed(recorded: Path) -> None:
    doc = json.loads(recorded.read_text())
    assert (doc["programs"], doc["calls"]) == (4, 12)  # the trace's first 4, 3 calls each


def test_a_relative_trace_given_is_recorded_absolute(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(recorded.read_text())
    monkeypatch.chdir(Path(doc["trace"]).parent)
    again = resimulate(recorded, trace=Path(Path(doc["trace"]).name))
    assert again["resimulated"]["trace"] == str(Path(doc["trace"]).resolve())


def test_a_trace_given_that_is_no_file_is_refused(recorded: Path, tmp_path: Path) -> None:
    with pytest.raises(ValidateError) as refusal:
        resimulate(recorded, trace=tmp_path)  # a folder
    assert str(refusal.value) == f"{tmp_path}: no such trace (named by {recorded})"
