"""``ttlctl validate --resimulate RECORDED.json`` (replay/validation/resimulate.py): a fleet
validation's recorded live runs priced again, nothing started live.

The recorded document here is written by the product's own document code
(:func:`~replay.validation.fleet_doc.fleet_document`) from live runs made by hand (each
replica's arrivals file written as the middleware writes it, the replicas' figures, two
measurements' raw timings): re-simulated with the same code it gives its own rows, ranking
and goal back; ``--profile`` prices every run by that profile; and every input it cannot
trust is refused in one line. The same round trip on a real live fleet's document is in
tests/live/test_fleet.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from profiles.engine_fit import fit_samples
from profiles.shipped import resolve
from replay.live import cap_pauses, first_programs
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.validation.error import ValidateError
from replay.validation.fleet_doc import fleet_document
from replay.validation.fleet_profile import Measured, by_repeat, pooled
from replay.validation.fleet_rows import LiveRun
from replay.validation.resimulate import resimulate
from replay.validation.sim_side import SimSide
from replay.validation.timings import Timings
from replay.workload import load
from tests.live.traces import agent_trace
from tests.profiles.engine_samples import samples
from tests.resimulated import refused, rewritten, slower
from ttlctl.server import arrivals

ROUTERS = ("consistent_hash", "round_robin")
REPEATS = 2
CAP_S = 0.5
#: what each live replica's /metrics gave over a run (engine_metrics.engine_delta)
ENGINE = {
    "engine_steps": 40,
    "requests": 6,
    "ttft_mean_s": 0.3,
    "queue_mean_s": 0.05,
    "prefill_mean_s": 0.2,
    "decode_mean_s": 0.3,
}


def _live_run(work_dir: Path, work: Any, rep: int, router: str, port: int) -> LiveRun:
    """One live run as validate records it: each replica's arrivals file (the warm-up's
    calls without a session, then each program's calls), its figures, the fleet's URLs."""
    urls = [f"http://127.0.0.1:{port + i}" for i in (1, 2)]
    files = {
        f"r{i + 1}": work_dir / f"vllm-{router}-{rep + 1}-r{i + 1}-arrivals.jsonl" for i in (0, 1)
    }
    lines: dict[str, list[str]] = {name: [] for name in files}
    t = 1000.0
    for name in files:
        lines[name].append(json.dumps({"t": t, "session": None, "path": "/v1/completions"}))
    for k, program in enumerate(work.programs):
        for turn in range(len(program.calls)):
            t += 0.5
            # round_robin alternates; consistent_hash keeps a program on one replica
            pick = (k + turn + rep) % 2 if router == "round_robin" else (k + rep) % 2
            line = {"t": t, "session": program.program_id, "path": "/v1/completions"}
            lines[f"r{pick + 1}"].append(json.dumps(line))
    for name, file in files.items():
        file.write_text("\n".join(lines[name]) + "\n")
    jct = 6.0 + rep + (2.0 if router == "round_robin" else 0.0)
    result = {"jct_mean_s": jct, "ttft_mean_s": 0.3, "server": {"client_hit_rate": 0.5}}
    fleet = {
        "url": f"http://127.0.0.1:{port}",
        "worker_order": urls[::-1],
        "replicas": {
            name: {"url": url, "arrivals": str(file), "engine": ENGINE}
            for (name, file), url in zip(files.items(), urls, strict=True)
        },
    }
    return LiveRun(rep, "vllm", router, result, arrivals.read(files), fleet)


def _measured(repeat: int) -> Measured:
    taken = samples(repeat, f"2026-12-02T03:{10 + repeat}:00+00:00", scale=1 + 0.3 * repeat)
    return Measured(
        repeat, f"measured in repeat {repeat}", 10 + repeat, taken, fit_samples([taken])
    )


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A 2-router, 2-repeat fleet validation's document, each repeat with its measurement."""
    trace = agent_trace(tmp_path / "trace.parquet", programs=5, calls=3, first=200, growth=64)
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    work = cap_pauses(first_programs(load(trace), 4), CAP_S)
    runs = [
        _live_run(work_dir, work, rep, router, 8100 + 10 * rep + 100 * i)
        for rep in range(REPEATS)
        for i, router in enumerate(ROUTERS)
    ]
    measured = [_measured(k) for k in (1, 2)]
    profile, source = pooled(measured)
    side = SimSide(
        replicas=2,
        profile=profile,
        engine=SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048),
        timing=Load(seed=0),
    )
    doc = fleet_document(
        runs,
        work,
        side,
        by_repeat(measured, REPEATS),
        Timings(draws=2, seed=0),
        policies=["vllm"],
        routers=ROUTERS,
        repeats=REPEATS,
        profile_source=source,
        measured=measured,
        server_info={"model": "tiny"},
        bundle=None,
        cpu_sets=None,
        work_dir=work_dir,
        idle_gap_cap_s=CAP_S,
    )
    doc["trace"] = str(trace)
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps(doc))
    return path


JUDGED = ("rows", "ranking", "goal", "sim", "sim_notes", "profile", "live", "fleets")


def _jct(row: dict[str, Any], key: str = "compare") -> float:
    return float(next(c["sim"] for c in row[key] if c["metric"] == "jct_mean_s"))


def test_the_same_code_gives_the_recorded_rows_ranking_and_goal_back(recorded: Path) -> None:
    doc = json.loads(recorded.read_text())
    told: list[tuple[int, int]] = []
    again = json.loads(json.dumps(resimulate(recorded, runs_done=lambda *n: told.append(n))))
    for key in JUDGED:
        assert again[key] == doc[key], key
    # the bar's count: each recorded live run re-simulated, of all of them
    runs = REPEATS * len(ROUTERS)
    assert told == [(done, runs) for done in range(runs + 1)]
    # per repeat, with the pooled profile beside it: a real second pricing was redone
    assert doc["profile"]["pricing"] == "per repeat" and doc["timing_draws"] == 2
    assert doc["goal"]["vllm"]["pooled_profile"] is not None
    assert again["resimulated"]["from"] == str(recorded.resolve())
    assert again["resimulated"]["profile"] == "recorded"
    assert again["resimulated"]["pricing"].startswith("as recorded: each repeat's runs")
    # the command: the same table's document, written
    out = recorded.parent / "again.json"
    written, printed = rewritten(recorded, out)
    assert all(written[key] == doc[key] for key in JUDGED)
    assert "consistent_hash" in printed and "re-simulated from" in printed


def test_a_replica_no_call_reached_is_0_in_the_document_and_absent_from_its_arrivals(
    recorded: Path, tmp_path: Path
) -> None:
    """validate records a replica no session call reached at 0 (as the simulated counts
    do); its arrivals files name no call of it. Regression (a second reader's find): the
    check that the files are the document's read the two as different counts."""
    doc = json.loads(recorded.read_text())
    runs = [run for row in doc["rows"]["vllm"].values() for run in row["runs"]]
    assert len(runs) == REPEATS * len(ROUTERS)
    for run in runs:
        run["calls_per_replica"] = {**run["calls_per_replica"], "r9": 0}
    edited = tmp_path / "zeros.json"
    edited.write_text(json.dumps(doc))
    again = resimulate(edited)
    assert again["rows"].keys() == doc["rows"].keys()
    for run in runs:  # a count that differs is still refused
        run["calls_per_replica"]["r9"] = 1
    edited.write_text(json.dumps(doc))
    with pytest.raises(ValidateError, match="arrivals files give calls per replica"):
        resimulate(edited)


def test_a_profile_given_prices_every_run(recorded: Path, tmp_path: Path) -> None:
    doc = json.loads(recorded.read_text())
    fast = resolve("tiny-cpu")[0]
    slow_file = tmp_path / "slow.json"
    slow_file.write_text(json.dumps(slower(fast, 3.0).to_json()))
    by_fast = resimulate(recorded, profile=fast, profile_name="tiny-cpu")
    by_slow = resimulate(recorded, profile=slower(fast, 3.0), profile_name=str(slow_file))
    for again, name in ((by_fast, "tiny-cpu"), (by_slow, str(slow_file))):
        # one profile for every run, as validate --profile prices: no second pricing
        assert again["profile"]["pricing"] == "one" and again["profile"]["source"] == "given"
        assert again["profile"]["measurements"] == []
        assert again["goal"]["vllm"]["pooled_profile"] is None
        assert again["resimulated"]["profile"] == name
        # the live side is the recorded one
        assert again["live"] == doc["live"] and again["fleets"] == doc["fleets"]
    assert by_fast["profile"]["doc"] == fast.to_json()
    for router in ROUTERS:
        fast_runs = by_fast["rows"]["vllm"][router]["runs"]
        slow_runs = by_slow["rows"]["vllm"][router]["runs"]
        recorded_runs = doc["rows"]["vllm"][router]["runs"]
        for k in range(REPEATS):
            assert "compare_pooled" not in fast_runs[k]
            # three times the price of every step: every run's calls take longer
            assert _jct(slow_runs[k]) > _jct(fast_runs[k])
            assert _jct(slow_runs[k], "compare_as_routed") > _jct(fast_runs[k], "compare_as_routed")
            assert _jct(fast_runs[k]) != _jct(recorded_runs[k])
    # through the command: --profile with --resimulate
    out = tmp_path / "slow-again.json"
    assert rewritten(recorded, out, "--profile", str(slow_file))[0]["rows"] == json.loads(
        json.dumps(by_slow["rows"])
    )
    # the re-simulated document is a recorded one too: priced as it was, by the profile
    twice = resimulate(out)
    assert json.loads(json.dumps(twice["rows"])) == json.loads(out.read_text())["rows"]


def test_what_cannot_be_resimulated_is_refused_in_one_line(recorded: Path, tmp_path: Path) -> None:
    doc = json.loads(recorded.read_text())
    assert "give TRACE" in refused(["--replicas", "2"])  # no trace, nothing to re-simulate
    missing = tmp_path / "none.json"
    assert str(missing) in refused(["--resimulate", str(missing)])
    broken = tmp_path / "broken.json"
    broken.write_text('{"replicas": 2, ')
    assert "line 1 column 17: not valid JSON" in refused(["--resimulate", str(broken)])
    neither = tmp_path / "neither.json"  # neither a fleet's nor a single server's
    neither.write_text(json.dumps({"policies": ["vllm"], "trace": doc["trace"]}))
    assert "not a validate document" in refused(["--resimulate", str(neither)])
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in doc.items() if k != "simulation"}))
    assert "lacks simulation," in refused(["--resimulate", str(old)])
    capless = tmp_path / "capless.json"
    sim = {k: v for k, v in doc["simulation"].items() if k != "idle_gap_cap_s"}
    capless.write_text(json.dumps({**doc, "simulation": sim}))
    assert "lacks simulation.idle_gap_cap_s" in refused(["--resimulate", str(capless)])
    # options of a live run: the document says how its runs went
    for extra, flag in (
        (["--replicas", "2"], "--replicas"),
        (["--router", "round_robin"], "--router"),
        (["--trace-idle-gap-cap-seconds", "5"], "--trace-idle-gap-cap-seconds"),
        (["--timing-draws", "4"], "--timing-draws"),
        (["--async-scheduling"], "--async-scheduling"),
        (["--work-dir", str(tmp_path / "w")], "--work-dir"),
        (["--model", "m", "--", "--dtype", "float32"], "--model"),
        (["--", "--dtype", "float32"], "vLLM arguments after `--`"),
    ):
        text = refused(["--resimulate", str(recorded), *extra])
        verb = "do" if flag.startswith("vLLM arguments") else "does"
        assert text.split(": ", 1)[1].startswith(f"{flag} {verb} not go with --resimulate"), text
    # a trace that is not the one replayed
    other = agent_trace(tmp_path / "other.parquet", programs=5, calls=4, first=200, growth=64)
    text = refused([str(other), "--resimulate", str(recorded)])
    assert str(other) in text and "16 calls against 12 recorded" in text
    reseeded = agent_trace(tmp_path / "reseeded.parquet", programs=5, calls=3, seed=7)
    assert "pauses differ" in refused([str(reseeded), "--resimulate", str(recorded)])
    # a replica's arrivals file gone, or overwritten by another run
    first = doc["fleets"]["vllm"]["round_robin"][1]["replicas"]["r2"]["arrivals"]
    Path(first).rename(tmp_path / "moved.jsonl")
    text = refused(["--resimulate", str(recorded)])
    assert f"arrivals file {first} is missing" in text
    lines = (tmp_path / "moved.jsonl").read_text().splitlines()
    Path(first).write_text("\n".join(lines[:-1]) + "\n")
    assert "files overwritten by a later run?" in refused(["--resimulate", str(recorded)])
    with pytest.raises(ValidateError, match="give TRACE"):
        no_trace = tmp_path / "no-trace.json"
        no_trace.write_text(json.dumps({k: v for k, v in doc.items() if k != "trace"}))
        resimulate(no_trace)


def test_an_output_that_is_an_input_is_refused_and_left_as_it_was(
    recorded: Path, tmp_path: Path
) -> None:
    """`--json` naming the recorded document, or the trace it names (given as TRACE or
    not), would replace it with the new document: refused in one line, nothing written (the
    trace not given, its Parquet name is refused first, as any --json named for another
    format is)."""
    trace = Path(json.loads(recorded.read_text())["trace"])
    before = {p: p.read_bytes() for p in (recorded, trace)}
    for args, said in (
        (["--resimulate", str(recorded), "--json", str(recorded)], "is an input of this command"),
        (
            [str(trace), "--resimulate", str(recorded), "--json", str(trace)],
            "is an input of this command",
        ),
        (["--resimulate", str(recorded), "--json", str(trace)], "its name says Parquet"),
    ):
        text = refused(args)
        assert said in text, (args, text)
        assert {p: p.read_bytes() for p in (recorded, trace)} == before, args


def test_the_trace_a_recorded_document_names_is_no_output(recorded: Path, tmp_path: Path) -> None:
    """The trace not given as TRACE but named by the recorded document, under a name of no
    format ttlctl knows (so the --json name check lets it by): `--json` naming it is still
    refused as an input, and it is left as it was."""
    doc = json.loads(recorded.read_text())
    trace = tmp_path / "trace.data"
    trace.write_bytes(Path(doc["trace"]).read_bytes())
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(doc | {"trace": str(trace)}))
    before = trace.read_bytes()
    text = refused(["--resimulate", str(moved), "--json", str(trace)])
    assert "is an input of this command" in text, text
    assert trace.read_bytes() == before


def test_one_repeats_document_keeps_each_run_as_it_is_and_resimulates(tmp_path: Path) -> None:
    """--repeats 1: the document's live runs, simulations and fleets are each run's own,
    not lists of one, one profile priced them, and the document re-simulates to itself."""
    trace = agent_trace(tmp_path / "trace.parquet", programs=2, calls=3, first=200, growth=64)
    work = first_programs(load(trace), 2)
    run = _live_run(tmp_path, work, 0, "round_robin", 8100)
    side = SimSide(
        replicas=2,
        profile=resolve("tiny-cpu")[0],
        engine=SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048),
        timing=Load(seed=0),
    )
    doc = fleet_document(
        [run], work, side, {}, Timings(draws=0), policies=["vllm"], routers=["round_robin"],
        repeats=1, profile_source="given", measured=[], server_info={"model": "tiny"},
        bundle=None, cpu_sets=None, work_dir=tmp_path, idle_gap_cap_s=None,
    )  # fmt: skip
    assert doc["live"] == {"vllm": {"round_robin": run.result}}
    assert doc["fleets"] == {"vllm": {"round_robin": run.fleet}}
    assert isinstance(doc["sim"]["vllm"]["round_robin"], dict)
    assert doc["profile"]["pricing"] == "one"
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps({**doc, "trace": str(trace)}))
    again = json.loads(json.dumps(resimulate(recorded)))
    for key in JUDGED:
        assert again[key] == json.loads(json.dumps(doc[key])), key
