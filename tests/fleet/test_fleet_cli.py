"""`ttlctl replay --replicas N --router R` end to end, and its refusals (one line, exit 2,
naming the flag)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from replay.figures import ReplayDoc
from replay.fleet.records import replica_labels
from replay.fleet.routers.consistent_hash import HashRing, worker_urls
from replay.synth import synth
from replay.workload import load
from tests.documents import conforms
from ttlctl.cli import app
from ttlctl.errors import ConfigError
from ttlctl.report import build_report
from ttlctl.trace import io as trace_io


def per_replica_rows(output: str) -> list[tuple[str, str, str]]:
    """The per-replica table's (policy, replica, calls) rows as printed, the policy carried
    down its rows."""
    lines = output.splitlines()
    start = lines.index("per replica")
    rows, policy = [], ""
    for line in lines[start + 4 :]:
        if line.startswith("└"):
            break
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        policy = cells[0] or policy
        rows.append((policy, cells[1], cells[2]))
    return rows


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "swe.parquet"
    synth("swe-bench", 12, 2).write_parquet(path)
    return path


def test_replay_a_fleet(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "vllm", "--policy", "continuum",
            "--replicas", "3", "--router", "cache-aware", "--cache-threshold", "0.5",
            "--concurrency", "6", "--kv-tokens", "200000", "--json", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    conforms(doc, ReplayDoc)
    # a row per policy and replica, with the replica's calls
    assert per_replica_rows(res.output) == [
        (r["policy"], str(p["replica"]), f"{p['llm_calls']:,}")
        for r in doc["results"]
        for p in r["per_replica"]
    ]
    assert doc["fleet"] == {
        "name": "cache-aware",
        "settings": {
            "cache_threshold": 0.5,
            "balance_abs_threshold": 64,
            "balance_rel_threshold": 1.5,
        },
        "replicas": 3,
    }
    for r in doc["results"]:
        assert r["router"] == doc["fleet"] and len(r["per_replica"]) == 3
        assert set(r["miss_reasons"]) == {
            "routed_elsewhere", "never_pinned", "expired", "released_by_valve", "evicted",
        }  # fmt: skip
        assert r["pins_wasted"] >= 0


def test_replay_an_async_fleet(trace: Path, tmp_path: Path) -> None:
    docs = []
    for flags in ([], ["--async-scheduling"]):
        out = tmp_path / f"r{len(flags)}.json"
        res = CliRunner().invoke(
            app,
            [
                "replay", str(trace), "--policy", "continuum", "--replicas", "3",
                "--router", "kv-aware", "--concurrency", "6", "--kv-tokens", "200000",
                "--check", "--json", str(out), *flags,
            ],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        docs.append(json.loads(out.read_text()))
    sync, fleet = docs
    conforms(fleet, ReplayDoc)
    assert (sync["async_scheduling"], fleet["async_scheduling"]) == (False, True)
    assert fleet["fleet"]["replicas"] == 3
    result = fleet["results"][0]
    assert sum(r["llm_calls"] for r in result["per_replica"]) == fleet["trace"]["calls"]
    assert result["jct_mean_s"] != sync["results"][0]["jct_mean_s"]


KV_TTL = "--kv-aware-session-affinity-ttl-secs"
PROGRAM_SCHEDULING = [
    "--replicas", "2", "--router", "program-scheduling", "--program-scheduling-config-json",
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replicas", "0"], "--replicas must be at least 1"),
        # far more than one process holds: an OverflowError or MemoryError traceback before
        (["--replicas", "99999999999999999999"], "--replicas must be at most 100,000"),
        (["--replicas", "100001"], "--replicas must be at most 100,000 (one process"),
        (["--replicas", "2", "--router", "nope"], "--router: unknown router 'nope'"),
        # an empty name is refused as tune refuses it, not taken for the default router
        (["--replicas", "2", "--router", ""], "--router: unknown router ''"),
        (["--replicas", "2", "--router", "as-logged"], "has no 'replica' column"),
        (["--router", "pin-aware"], "error: --router pin-aware needs --replicas N"),
        # a router flag alone is not taken for cache-aware's (the default router) and
        # refused as such: what is missing is --replicas, and the flag given is named
        (
            ["--pin-queue-bound", "3"],
            "error: --pin-queue-bound is a router setting: it needs --replicas N",
        ),
        (
            ["--cache-threshold", "0.4"],
            "error: --cache-threshold is a router setting: it needs --replicas N",
        ),
        (
            ["--router", "round-robin", "--cache-threshold", "0.5"],
            "error: --router round-robin needs --replicas N",
        ),
        (
            ["--replicas", "2", "--router", "round-robin", "--cache-threshold", "0.5"],
            "--cache-threshold: the round-robin router does not take it (it takes no router "
            "setting)",
        ),
        (
            ["--replicas", "2", "--router", "kv-aware", "--pin-queue-bound", "3"],
            "--pin-queue-bound: the kv-aware router does not take it",
        ),
        # a value vllm-router's flag refuses (ttlctl.router_doc's table)
        (
            ["--replicas", "2", "--router", "cache-aware", "--cache-threshold", "1.5"],
            "--cache-threshold: 1.5 is out of range (0..1)",
        ),
        (
            ["--replicas", "2", "--router", "kv-aware", KV_TTL, "0"],
            "--kv-aware-session-affinity-ttl-secs: 0 is out of range (1..31536000)",
        ),
        (
            ["--replicas", "2", "--kv-tokens", "8"],
            "error: --kv-tokens must hold at least one block (--block-size tokens): "
            "--kv-tokens 8 with --block-size 16",
        ),
        (
            ["--replicas", "2", "--backend", "vllm", "--policy", "oracle"],
            "policy oracle does not map onto vLLM's scheduler",
        ),
        (["--worker-urls", "http://a:1"], "--worker-urls needs --replicas N"),
        (["--no-prefix-credit"], "error: --no-prefix-credit needs --replicas N"),
        # only kv-aware's placement depends on whether the request is credited: the
        # default router (cache-aware) refuses it as a router refuses a flag it lacks
        (
            ["--replicas", "2", "--no-prefix-credit"],
            "--no-prefix-credit: the cache-aware router does not take it (only kv-aware places "
            "a request by whether it credits its cached prefix); give --router kv-aware",
        ),
        (
            ["--replicas", "2", "--router", "pin-aware", "--no-prefix-credit"],
            "--no-prefix-credit: the pin-aware router does not take it",
        ),
        # replay takes one router (tune searches over several): a second is refused
        (
            ["--replicas", "2", "--router", "kv-aware", "--router", "cache-aware"],
            "--router: replay takes one router, got 2 (kv-aware, cache-aware)",
        ),
        # the calibration's objects are checked as the config's other fields are: a field
        # vllm-router does not have is named (not a Python TypeError), a negative refused
        (
            [*PROGRAM_SCHEDULING, '{"prefill_cost_model": {"bogus": 1}}'],
            "unknown field 'prefill_cost_model.bogus'",
        ),
        (
            [*PROGRAM_SCHEDULING, '{"prefill_cost_model": 5}'],
            "prefill_cost_model takes a JSON object",
        ),
        (
            [*PROGRAM_SCHEDULING, '{"hash_virtual_nodes": 3.5}'],
            "hash_virtual_nodes must be a whole number from 1 to 4294967295, got 3.5",
        ),
        # Python's JSON reader takes NaN and Infinity (and reads 1e400 as infinity); JSON
        # and vllm-router do not, and the replay's --json would have carried them
        (
            [*PROGRAM_SCHEDULING, '{"paused_retention_ttl_seconds": NaN}'],
            "--program-scheduling-config-json: not JSON (NaN is not a JSON number)",
        ),
        (
            [*PROGRAM_SCHEDULING, '{"cross_rank_headroom_ratio": Infinity}'],
            "--program-scheduling-config-json: not JSON (Infinity is not a JSON number)",
        ),
        (
            [*PROGRAM_SCHEDULING, '{"max_acting_ttl_seconds": 1e400}'],
            "--program-scheduling-config-json: 1e400 is out of range for a number",
        ),
        (  # an integer longer than Python reads (4,300 digits): refused, not a traceback
            [*PROGRAM_SCHEDULING, '{"hash_virtual_nodes": 1' + "0" * 5000 + "}"],
            "--program-scheduling-config-json: 100000000000000000000000… (5,001 digits) is out "
            "of range for a number",
        ),
        (
            [*PROGRAM_SCHEDULING, '{"decode_throughput_model": {"fixed_step_seconds": -1}}'],
            "decode_throughput_model.fixed_step_seconds must be a number > 0, got -1",
        ),
        # fields the model does not act on are still held to vllm-router's ranges: it
        # refuses these at start (the 0.1.17 binary, validate_program_scheduling)
        (
            [*PROGRAM_SCHEDULING, '{"cross_rank_headroom_ratio": -5}'],
            "--program-scheduling-config-json: cross_rank_headroom_ratio must be ≥ 1, got -5",
        ),
        (
            [*PROGRAM_SCHEDULING, '{"paused_retention_ttl_seconds": -1}'],
            "--program-scheduling-config-json: paused_retention_ttl_seconds must be > 0, got -1",
        ),
        (
            ["--replicas", "2", "--router", "consistent-hash", "--worker-urls", "http://a:1"],
            "--worker-urls: 1 URL given for 2 replicas",
        ),
        # what vllm-router would not take as a worker URL (it was hashed into a placement)
        (
            [
                "--replicas",
                "2",
                "--router",
                "consistent-hash",
                "--worker-urls",
                "notaurl",
                "--worker-urls",
                "http://b:2",
            ],
            "--worker-urls: 'notaurl' is not a worker URL",
        ),
        (
            ["--replicas", "2", "--worker-urls", "", "--worker-urls", "http://b:2"],
            "--worker-urls: '' is not a worker URL",
        ),
    ],
)
def test_bad_fleet_arguments(trace: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["replay", str(trace), "--policy", "vllm", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_report_shows_the_fleet(trace: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "continuum", "--replicas", "2",
            "--router", "round-robin", "--concurrency", "6", "--kv-tokens", "200000",
            "--json", str(run / "replay.json"),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    page = build_report(run)
    assert "behind <code>round-robin</code>" in page
    assert "routed elsewhere" in page and "continuum: per replica" in page
    assert 'alt="each replica&#x27;s load and why follow-up calls missed the cache"' in page


def test_replay_a_fleet_placed_by_the_routers_worker_urls(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    urls = ["http://127.0.0.1:41001", "http://127.0.0.1:41002"]
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--replicas", "2", "--router",
         "consistent-hash", "--worker-urls", urls[0], "--worker-urls", urls[1],
         "--json", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # the summary line says the URLs placed the programs (it said "no settings")
    assert "behind consistent-hash (2 worker URLs from --worker-urls)" in " ".join(
        res.output.split()
    )
    doc = json.loads(out.read_text())
    assert doc["fleet"]["worker_urls"] == urls
    ring = HashRing(tuple(urls))
    programs = load(trace).programs
    calls = [0, 0]
    for p in programs:
        calls[ring.owner(p.program_id)] += len(p.calls)
    per = {r["replica"]: r["llm_calls"] for r in doc["results"][0]["per_replica"]}
    assert [per[0], per[1]] == calls


def test_replay_behind_kv_aware_without_the_prefix_credit(trace: Path, tmp_path: Path) -> None:
    """--no-prefix-credit: kv-aware places every call as if no replica cached any of it (as
    vllm-router does a request whose body it does not model), so fewer calls return to
    the replica that holds their prefix; the JSON and the fleet's table say so, and the
    note that the credit is on is said only where it is."""
    runs = {}
    for credit in ("", "--no-prefix-credit"):
        (tmp_path / (credit or "on")).mkdir()
        out = tmp_path / (credit or "on") / "replay.json"
        res = CliRunner().invoke(
            app,
            [
                "replay", str(trace), "--policy", "continuum", "--replicas", "2",
                "--router", "kv_aware", "--concurrency", "6", "--kv-tokens", "200000",
                "--no-timing", "--json", str(out), *([credit] if credit else []),
            ],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        runs[credit] = (" ".join(res.output.split()), json.loads(out.read_text()))
    (on_text, on), (off_text, off) = runs[""], runs["--no-prefix-credit"]
    conforms(off, ReplayDoc)
    assert "prefix_credit" not in on["fleet"]
    assert off["fleet"]["prefix_credit"] is False
    assert off["results"][0]["router"] == off["fleet"]
    assert "no call credited with its cached prefix)" in off_text
    assert "no call credited" not in on_text
    note = "warning: --router kv-aware: every call is credited with the prefix its replica caches"
    assert note in on_text and "give --no-prefix-credit for clients it does not credit" in on_text
    assert note not in off_text
    page = build_report(tmp_path / "--no-prefix-credit")
    assert "; no call credited with its cached prefix (<code>--no-prefix-credit</code>)" in page
    assert "no call credited" not in build_report(tmp_path / "on")
    credited, uncredited = on["results"][0], off["results"][0]
    assert uncredited["returned_share"] < credited["returned_share"]
    assert uncredited["prefix_hit_rate"] < credited["prefix_hit_rate"]


def test_an_as_logged_fleet_is_shown_by_the_traces_replica_names(tmp_path: Path) -> None:
    """--router as-logged: the tables and the JSON name each replica as the trace's
    ``replica`` column does (beside its index), a replica beyond the names by its index."""
    frame = synth("swe-bench", 6, 2)
    # whole programs on one replica each, named out of sorted order: west's first
    frame = frame.with_columns(
        pl.when(pl.col("program_id").is_in(["swe-000000", "swe-000002", "swe-000003"]))
        .then(pl.lit("west"))
        .otherwise(pl.lit("east"))
        .alias("replica")
    )
    trace = tmp_path / "logged.parquet"
    frame.write_parquet(trace)
    run = tmp_path / "run"
    run.mkdir()
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "vllm", "--replicas", "3", "--router",
            "as-logged", "--concurrency", "6", "--kv-tokens", "200000",
            "--json", str(run / "replay.json"),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # the unnamed replica by its index, marked as one (a name may be a number)
    assert [row[1] for row in per_replica_rows(res.output)] == ["east", "west", "#2"]
    doc = json.loads((run / "replay.json").read_text())
    conforms(doc, ReplayDoc)
    assert doc["fleet"]["replica_names"] == ["east", "west", None]
    per = doc["results"][0]["per_replica"]
    # every replica carries its name, null for the idle one beyond the names (as replica_names)
    assert [(p["replica"], p["name"]) for p in per] == [(0, "east"), (1, "west"), (2, None)]
    logged = frame.group_by("replica").len()
    calls = dict(zip(logged["replica"], logged["len"], strict=True))
    # each name's figures are the calls the trace logged on it
    assert {p["name"]: p["llm_calls"] for p in per[:2]} == calls and per[2]["llm_calls"] == 0
    page = build_report(run)
    assert "<td>east</td>" in page and "<td>west</td>" in page and "<td>#2</td>" in page


def test_replica_names_that_are_numbers_stay_apart_from_indices() -> None:
    """Names 1 and 2 are replicas 0 and 1: a third, unnamed replica is #2, not a second 2;
    a fleet without names is shown by its indices alone."""
    named = [{"replica": 0, "name": "1"}, {"replica": 1, "name": "2"}, {"replica": 2, "name": None}]
    assert replica_labels(named) == ["1", "2", "#2"]
    assert replica_labels([*named[:2], {"replica": 2}]) == ["1", "2", "#2"]  # an older file's
    assert replica_labels([{"replica": 0}, {"replica": 1}]) == ["0", "1"]


def test_a_fleet_without_names_keeps_its_indices(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "vllm", "--replicas", "2", "--router",
            "round-robin", "--concurrency", "6", "--kv-tokens", "200000", "--json", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert [row[1] for row in per_replica_rows(res.output)] == ["0", "1"]
    doc = json.loads(out.read_text())
    assert "replica_names" not in doc["fleet"]
    assert all("name" not in p for p in doc["results"][0]["per_replica"])


def logged_trace(tmp_path: Path, names: list[str | None], **write: object) -> Path:
    """A trace whose ``replica`` column cycles through ``names`` by program."""
    frame = synth("swe-bench", 6, 2)
    ids = sorted(set(frame["program_id"]))
    named = {pid: names[i % len(names)] for i, pid in enumerate(ids)}
    frame = frame.with_columns(
        pl.col("program_id").replace_strict(named, return_dtype=pl.String).alias("replica")
    )
    path = tmp_path / "logged.parquet"
    trace_io.write(frame.lazy(), path, **write)  # type: ignore[arg-type]
    return path


def test_as_logged_on_a_replica_column_that_names_none(tmp_path: Path) -> None:
    trace = logged_trace(tmp_path, [None])
    res = CliRunner().invoke(
        app, ["replay", str(trace), "--policy", "vllm", "--replicas", "2", "--router", "as-logged"]
    )
    assert res.exit_code == 2, res.output
    assert "'replica' column names no replica" in res.output
    assert "has no 'replica' column" not in res.output


def test_a_fleets_trace_replayed_without_replicas_says_it_is_one_engine(tmp_path: Path) -> None:
    """A trace whose calls ran on several replicas, replayed without --replicas, is replayed
    on one engine: a warning says so and names the flags that replay it where it ran (tune
    says the same); a trace of one named replica, or with --replicas, gets no such line."""
    fleet = logged_trace(tmp_path, ["a", None, "b", "c"])
    res = CliRunner().invoke(app, ["replay", str(fleet), "--policy", "vllm"])
    assert res.exit_code == 0, res.output
    assert (
        "the trace's calls ran on 3 replicas: replay replays one engine; "
        "--replicas 3 --router as-logged replays each call where it ran"
    ) in res.output
    as_logged = ["--replicas", "3", "--router", "as-logged"]
    res = CliRunner().invoke(app, ["replay", str(fleet), "--policy", "vllm", *as_logged])
    assert res.exit_code == 0, res.output
    assert "calls ran on" not in res.output
    two = logged_trace(tmp_path / "two", ["a", "b"])
    res = CliRunner().invoke(app, ["replay", str(two), "--policy", "vllm"])
    assert res.exit_code == 0, res.output
    assert "the trace's calls ran on 2 replicas" in res.output
    one = logged_trace(tmp_path / "one", ["a"])
    res = CliRunner().invoke(app, ["replay", str(one), "--policy", "vllm"])
    assert res.exit_code == 0, res.output
    assert "calls ran on" not in res.output


def test_as_logged_refuses_worker_urls(tmp_path: Path) -> None:
    trace = logged_trace(tmp_path, ["a", "b"])
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--replicas", "2", "--router", "as-logged",
         "--worker-urls", "http://a:1", "--worker-urls", "http://b:2"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "--worker-urls: the as-logged router does not take it" in res.output


def test_as_logged_with_too_few_replicas_prints_only_its_error(tmp_path: Path) -> None:
    """The replica count is checked before the engine records' sizing warning: a refused
    run says only why."""
    engines = [{"replica": n, "kv_tokens": 300_000, "calls": 1} for n in ("a", "b", "c")]
    trace = logged_trace(tmp_path, ["a", "b", "c"], engines=engines)
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--replicas", "2", "--router", "as-logged",
         "--kv-tokens", "300000"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "--replicas 2: the trace's replica column names 3 replicas" in res.output
    assert "give --replicas 3" in res.output  # what to do, not only what is wrong
    assert "warning" not in res.output


def test_as_logged_counts_the_replicas_the_engine_records_size(tmp_path: Path) -> None:
    """A replica restarted at another size has two engine records: the warning counts
    replicas (3), not records (4)."""
    engines = [{"replica": n, "kv_tokens": 300_000, "calls": 1} for n in ("a", "b", "c")]
    engines.append({"replica": "a", "kv_tokens": 200_000, "calls": 1})
    trace = logged_trace(tmp_path, ["a", "b", "c"], engines=engines)
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--replicas", "3", "--router", "as-logged",
         "--concurrency", "3"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "the trace's engine records size 3 replica(s)" in res.output


def test_the_fleet_line_says_off_for_an_unset_setting(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--replicas", "2", "--router", "kv-aware",
         "--kv-tokens", "200000", "--json", str(out)],
        env={"COLUMNS": "400"},
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "kv_aware_session_affinity_ttl_secs=off" in res.output
    assert "None" not in res.output
    settings = json.loads(out.read_text())["fleet"]["settings"]
    assert settings["kv_aware_session_affinity_ttl_secs"] is None  # the JSON keeps null


def test_replay_help_names_the_default_router() -> None:
    res = CliRunner().invoke(app, ["replay", "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert "cache-aware (the default with --replicas" in res.output


def test_worker_urls_take_the_schemes_vllm_router_takes() -> None:
    """vllm-router takes http://, https:// and grpc:// workers: a gRPC fleet is placed by
    its own URLs; any other scheme is refused."""
    grpc = ("grpc://a:1", "grpc://b:2")
    assert worker_urls(2, grpc) == grpc
    with pytest.raises(ConfigError, match=r"^--worker-urls: 'ftp://a:1' is not a worker URL"):
        worker_urls(2, ("ftp://a:1", "http://b:2"))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://a:99999", "its port is not a number from 0 to 65535"),
        ("http://a:abc", "its port is not a number from 0 to 65535"),
        ("http://:8000", "no host"),
        ("http://a b:1", "a character a host name cannot hold"),
        ("http://a<b:1", "a character a host name cannot hold"),
        ("http://[::1", "its host is no valid IPv6 address in brackets"),
        ("http://[abc]:80", "its host is no valid IPv6 address in brackets"),
    ],
)
def test_worker_urls_refuse_what_vllm_routers_url_parser_refuses(url: str, why: str) -> None:
    """vllm-router 0.1.17 stops at start on each of these ("Invalid URL format: invalid port
    number", "empty host", "invalid international domain name"); a placement hashed from
    one would be no fleet's. The URLs it starts with are taken as given."""
    said = rf"^--worker-urls: {re.escape(repr(url))} is not a worker URL \({re.escape(why)}\)"
    with pytest.raises(ConfigError, match=said):
        worker_urls(2, (url, "http://b:2"))
    taken = ("http://a:0", "http://[::1]:65535", "https://user@a:1/v1")
    assert worker_urls(3, taken) == taken


def test_worker_urls_of_one_kind() -> None:
    """vllm-router refuses grpc:// and http:// workers in one pool ("mixed worker schemes
    are not supported"); http:// beside https:// it takes."""
    with pytest.raises(ConfigError, match=r"^--worker-urls: grpc:// and http\(s\):// workers"):
        worker_urls(2, ("http://a:1", "grpc://b:2"))
    assert worker_urls(2, ("http://a:1", "https://b:2")) == ("http://a:1", "https://b:2")


@pytest.mark.parametrize("command", ["replay", "tune"])
def test_as_logged_without_replicas_names_the_traces_count(tmp_path: Path, command: str) -> None:
    """--router as-logged without --replicas: the trace's replica column says how many
    replicas to give, as the line for a --replicas that is too small does."""
    trace = logged_trace(tmp_path, ["a", "b", "c"])
    args = ["replay", str(trace), "--policy", "vllm"]
    if command == "tune":
        args = ["tune", str(trace), "--fit", str(tmp_path / "fit.json"),
                "--profile", "llama-3.1-8b-h100", "-o", str(tmp_path / "bundle.json")]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--router", "as-logged"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "error: --router as-logged: the trace's replica column names 3 replicas; give --replicas 3"
    )
