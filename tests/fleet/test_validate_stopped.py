"""A fleet validation stopped by a failed fleet in a later repeat keeps the whole repeats
before it: the bookkeeping, on recorded runs.

Each fleet's live run is one recorded as validate records it (the same runs as
tests/fleet/test_resimulate.py: arrivals files, figures, URLs), handed back in place of
starting a fleet; one of them fails as a dead router makes it fail (a ServerError). The
real fleet, and the router killed mid-run, are tests/live/test_fleet.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import replay.validation.fleet as fleet_mod
from profiles import shipped
from replay.validation.error import ValidateError
from replay.validation.fleet import validate_fleet
from replay.validation.servers import Sources
from replay.workload import load
from tests.fleet.test_resimulate import _live_run, _measured
from tests.live.server_info import server_info
from tests.live.traces import agent_trace
from ttlctl.cli import app
from ttlctl.server.client import ServerError

ROUTERS = ["consistent_hash", "round_robin"]
DIED = "vllm-router (round_robin) exited with code -9 (log: router.log)"


def _fleets(fail_at: tuple[int, str], error: Exception) -> tuple[Callable[..., Any], list[Any]]:
    """A ``live_run`` that hands back recorded runs, and fails at ``fail_at`` (repeat, router)."""
    asked: list[tuple[int, str]] = []

    def live_run(
        fleets: Any, rep: int, name: str, policy: str, *, info: Any, measure: bool, say: Any
    ) -> tuple[Any, Any, Any]:
        asked.append((rep, policy))
        if (rep, policy) == fail_at:
            raise error
        port = 8100 + 10 * rep + 100 * ROUTERS.index(policy)
        run = _live_run(fleets.work_dir, fleets.work, rep, policy, port)
        return run, info or server_info(), _measured(rep + 1) if measure else None

    return live_run, asked


def _validate(tmp_path: Path, profile_given: bool) -> dict[str, Any]:
    trace = agent_trace(tmp_path / "t.parquet", programs=5, calls=3, first=200, growth=64)
    told: list[tuple[int, int]] = []
    doc = validate_fleet(
        load(trace),
        Sources(base_cmd=["vllm", "serve", "m"]),
        replicas=2,
        routers=ROUTERS,
        repeats=3,
        timing_draws=0,
        max_programs=4,
        idle_gap_cap_s=0.5,
        profile=shipped.resolve("tiny-cpu")[0] if profile_given else None,
        work_dir=tmp_path / "work",
        runs_done=lambda done, total: told.append((done, total)),
    )
    return {"doc": doc, "told": told, "trace": trace}


@pytest.mark.parametrize("profile_given", [False, True])
@pytest.mark.parametrize(
    "fail_at", [(1, "consistent_hash"), (1, "round_robin"), (2, "round_robin")]
)
def test_the_whole_repeats_before_the_failure_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile_given: bool, fail_at: tuple[int, str]
) -> None:
    fake, asked = _fleets(fail_at, ServerError(DIED))
    monkeypatch.setattr(fleet_mod, "live_run", fake)
    got = _validate(tmp_path, profile_given)
    doc, kept = got["doc"], fail_at[0]
    assert asked[-1] == fail_at  # nothing started after the failed fleet
    assert doc["repeats"] == kept
    assert doc["stopped"] == {
        "run": f"vllm behind {fail_at[1]}, run {fail_at[0] + 1}",
        "error": DIED,
        "repeats_asked": 3,
    }
    for router in ROUTERS:  # the failed repeat's runs that had ended (consistent_hash's) dropped
        runs = doc["live"]["vllm"][router]
        assert (len(runs) if kept > 1 else 1) == kept and isinstance(runs, list) == (kept > 1)
    measurements = doc["profile"]["measurements"]
    assert [m["repeat"] for m in measurements] == (
        [] if profile_given else list(range(1, kept + 1))
    )
    # the live runs done were told as each ended, never the runs that did not run
    done = [d for d, _ in got["told"]]
    assert done == list(range(len(asked))) and all(t == 6 for _, t in got["told"])
    # re-simulated, the document reads back whole and the command succeeds
    doc["trace"] = str(got["trace"])
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(doc, default=str))
    again = tmp_path / "again.json"
    res = CliRunner().invoke(app, ["validate", "--resimulate", str(recorded), "--json", str(again)])
    assert res.exit_code == 0, res.output
    assert json.loads(again.read_text())["repeats"] == kept


def test_a_failure_in_the_first_repeat_is_the_error_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, _ = _fleets((0, "round_robin"), ServerError(DIED))
    monkeypatch.setattr(fleet_mod, "live_run", fake)
    with pytest.raises(ServerError, match="exited with code -9"):
        _validate(tmp_path, profile_given=True)


def test_a_failure_that_is_not_a_fleets_process_is_not_survived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, _ = _fleets((1, "round_robin"), ValidateError("a refusal of the arguments"))
    monkeypatch.setattr(fleet_mod, "live_run", fake)
    with pytest.raises(ValidateError, match="refusal"):
        _validate(tmp_path, profile_given=True)
