"""``examples/fleet``: two replicas' real engine logs (and the bundle they served) read as one
fleet. What the files say, counted here from the raw lines, is what the trace and an
``as-logged`` replay say: each call on the replica whose log holds it, the programs the router
moved between replicas counted once each as a program, and the share of follow-up calls that
returned to their previous call's replica."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from profiles.models import PRESETS
from ttlctl.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet"
LOGS = [EXAMPLE / "r1-engine.jsonl", EXAMPLE / "r2-engine.jsonl"]


def _calls() -> list[dict[str, object]]:
    """Every call line of both logs, with the replica its file's facts line names."""
    calls = []
    for log in LOGS:
        replica = None
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "engine":
                replica = rec["replica"]
            else:
                calls.append({**rec, "replica": replica})
    return calls


def test_the_fleet_example_reads_as_one_fleet_and_replays_as_logged(tmp_path: Path) -> None:
    calls = _calls()
    by_replica: dict[object, int] = {}
    for c in calls:
        by_replica[c["replica"]] = by_replica.get(c["replica"], 0) + 1
    # each program's calls in arrival order: a follow-up returned if on the previous replica
    order: dict[object, list[object]] = {}
    for c in sorted(calls, key=lambda c: float(c["arrival_unix_s"])):  # type: ignore[arg-type]
        order.setdefault(c["program_id"], []).append(c["replica"])
    follow_ups = sum(len(r) - 1 for r in order.values())
    returned = sum(a == b for r in order.values() for a, b in pairwise(r))
    assert set(by_replica) == {"r1", "r2"} and returned < follow_ups  # the router moved some

    trace = tmp_path / "fleet.parquet"
    res = CliRunner().invoke(app, ["ingest", *map(str, LOGS), "-o", str(trace)])
    assert res.exit_code == 0, res.output
    frame = pl.read_parquet(trace)
    assert frame.height == len(calls) and frame["program_id"].n_unique() == len(order)
    assert dict(frame["replica"].value_counts().iter_rows()) == by_replica

    out = tmp_path / "replay.json"
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "continuum", "--bundle", str(EXAMPLE / "bundle.json"),
         "--replicas", "2", "--router", "as-logged", "--kv-tokens", "8160", "--block-size", "32",
         "--profile", "tiny-cpu", "--json", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (result,) = json.loads(out.read_text())["results"]
    assert {p["name"]: p["llm_calls"] for p in result["per_replica"]} == by_replica
    assert result["returned_share"] == returned / follow_ups
    assert result["miss_reasons"]["routed_elsewhere"] <= follow_ups - returned


def test_the_examples_validate_command_names_a_model_vllm_can_load() -> None:
    """``validate --model`` goes to vLLM as its ``--model``: a folder or a Hugging Face name.
    A ``ttlctl profile`` preset name there (``tiny``) sends vLLM looking for a model of that
    name online, and the fleet fails to start; the README names the folder and how it is
    written."""
    readme = (EXAMPLE / "README.md").read_text()
    command = re.search(r"^ttlctl validate .*?(?=^\S|^```)", readme, flags=re.M | re.S)
    assert command is not None
    model = re.search(r"--model (\S+)", command.group(0))
    assert model is not None
    assert model.group(1) not in PRESETS, model.group(1)
    assert f"build_tiny_model({model.group(1)})" in readme
