"""How many perturbed timings each simulated fleet run is averaged over
(``validate --replicas N --timing-draws D``, replay/validation/timings.py): bad settings
are refused when built, and on the command line before anything starts."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from replay.validation.error import ValidateError
from replay.validation.fleet import TIMING_DRAWS
from replay.validation.fleet_sim import compare_fleet, router_ranking
from replay.validation.setup import validation_doc
from replay.validation.timings import Timings
from replay.validation.validate_request import ValidateRequest
from tests.live.traces import agent_trace
from ttlctl.cli import app
from ttlctl.cli.render import fleet_table
from ttlctl.errors import TtlctlError


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"draws": -1}, "--timing-draws must be a whole number at least 0, not -1"),
        ({"draws": 2.5}, "--timing-draws must be a whole number at least 0, not 2.5"),
        ({"draws": True}, "--timing-draws must be a whole number"),
        ({"pause_rel": -0.01}, "pause_rel must be at least 0 and below 1, not -0.01"),
        ({"pause_rel": 1.0}, "pause_rel must be at least 0 and below 1, not 1.0"),
        ({"pause_rel": math.nan}, "pause_rel must be at least 0 and below 1, not nan"),
        ({"start_s": -0.001}, "start_s must be a finite number of seconds at least 0"),
        ({"start_s": math.inf}, "start_s must be a finite number of seconds at least 0"),
        ({"start_s": "0.01"}, "start_s must be a finite number of seconds at least 0"),
        ({"seed": 1.5}, "--seed must be a whole number, not 1.5"),
    ],
)
def test_bad_timings_are_refused_when_built(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidateError, match=re.escape(message)) as refused:
        Timings(**bad)
    assert isinstance(refused.value, TtlctlError)
    assert "\n" not in str(refused.value)


def test_the_bounds_themselves_are_timings() -> None:
    assert Timings(draws=0).draws == 0  # none drawn: the trace's own timing alone
    assert Timings(pause_rel=0.0, start_s=0.0, seed=-3).pause_rel == 0.0
    assert Timings(pause_rel=0.999).pause_rel == 0.999


def test_timing_draws_on_the_command_line(tmp_path: Path) -> None:
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    base = ["validate", str(trace), "--model", str(tmp_path), "--work-dir", str(tmp_path / "w")]
    fleet = ["--replicas", "2", "--router", "round_robin"]
    for value, says in (("-1", "greater than or equal to 0"), ("x", "valid integer")):
        res = CliRunner().invoke(app, [*base, *fleet, "--timing-draws", value])
        assert res.exit_code == 2, res.output
        assert "--timing-draws" in res.stderr and says in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    res = CliRunner().invoke(app, [*base, "--timing-draws", "4"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == "error: --timing-draws needs --replicas N (it averages each " \
        "simulated fleet run)"  # fmt: skip
    assert not (tmp_path / "w").exists()  # refused before anything was made
    # the help's default is the library's (the help's table borders and wrapping taken out)
    shown = " ".join(
        CliRunner().invoke(app, ["validate", "--help"]).stdout.replace("│", " ").split()
    )
    assert "--timing-draws" in shown and f"default: {TIMING_DRAWS})" in shown


def test_the_requested_draws_reach_the_fleet_and_are_refused_before_it_starts(
    tmp_path: Path,
) -> None:
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    req = ValidateRequest(
        trace=trace,
        model=str(tmp_path),
        replicas=2,
        routers=["round_robin"],
        timing_draws=-2,
        work_dir=tmp_path / "w",
    )
    with pytest.raises(ValidateError, match="--timing-draws must be a whole number at least 0"):
        validation_doc(req)
    assert not (tmp_path / "w").exists()


def test_the_table_says_when_the_trace_timing_alone_was_simulated() -> None:
    live = {"jct_mean_s": 10.0, "ttft_mean_s": 1.0, "hit_rate": 0.5, "returned_share": 1.0}
    sim = {"jct_mean_s": 11.0, "ttft_mean_s": 1.0, "prefix_hit_rate": 0.5, "returned_share": 1.0}
    row = {**live, "compare": compare_fleet(sim, live), "calls_per_replica": {"r1": 4}}
    doc: dict[str, Any] = {
        "programs": 2,
        "calls": 4,
        "replicas": 1,
        "rows": {"vllm": {"round_robin": row}},
        "ranking": {"vllm": router_ranking({"round_robin": sim}, {"round_robin": live})},
    }
    for draws, said in ((0, True), (TIMING_DRAWS, False)):
        console = Console(record=True, width=200)
        fleet_table(console, {**doc, "timing_draws": draws})
        text = console.export_text()
        assert ("simulated: on the trace's own timing alone (--timing-draws 0)" in text) is said
        assert "arrival timings" not in text  # no row drew any
