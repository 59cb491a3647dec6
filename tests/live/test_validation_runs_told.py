"""validate tells its live runs done of all of them (replay/progress.py ``each_told``), for
the CLI's bar: one server per policy and a fleet per (policy, router), counted without a
server; the bar draws the count on a terminal, and the JSON is the same without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profiles.shipped import resolve
from replay.progress import each_told
from replay.validation import crosscheck
from replay.validation.error import ValidateError
from replay.validation.fleet import fleet_runs
from replay.validation.live_session import LiveSession
from replay.validation.servers import Sources
from replay.workload import AgentProgram, Call, Workload
from tests.live.server_info import server_info
from tests.terminal_env import cli_env


class _Stop(Exception):
    """Raised by a stand-in live run, where a server would have failed."""


def test_each_told_counts_runs_as_they_end_and_not_one_that_raises() -> None:
    told: list[tuple[int, int]] = []
    seen = []
    for run in each_told("abc", lambda done, total: told.append((done, total))):
        seen.append(run)
    assert seen == ["a", "b", "c"] and told == [(0, 3), (1, 3), (2, 3), (3, 3)]
    told.clear()
    with pytest.raises(_Stop):
        for run in each_told("abc", lambda done, total: told.append((done, total))):
            if run == "b":
                raise _Stop
    assert told == [(0, 3), (1, 3)]  # b failed: not done
    assert list(each_told("ab", None)) == ["a", "b"]


def test_validate_tells_each_live_run_done(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two policies, two repeats: four live runs, told as each ends (the third fails here,
    as a server that stops answering would)."""
    ran: list[tuple[str, int]] = []

    def run(self: LiveSession, name: str, rep: int) -> None:
        ran.append((name, rep))
        if len(ran) == 3:
            raise _Stop

    monkeypatch.setattr(LiveSession, "run", run)
    calls = (Call(10, 1, 0, "bash", 1.0), Call(20, 1, 11, None, 0.0))
    work = Workload((AgentProgram("p0", 0.0, calls),))
    urls = {"vllm": "http://127.0.0.1:1", "continuum": "http://127.0.0.1:2"}
    told: list[tuple[int, int]] = []
    with pytest.raises(_Stop):
        crosscheck.validate(
            work,
            Sources(urls=urls),
            repeats=2,
            work_dir=tmp_path,
            runs_done=lambda done, total: told.append((done, total)),
        )
    assert ran == [("vllm", 0), ("vllm", 1), ("continuum", 0)]
    assert told == [(0, 4), (1, 4), (2, 4)]


_TWO = {"vllm": "http://127.0.0.1:1", "continuum": "http://127.0.0.1:2"}
_ONE_PROGRAM = Workload(
    (AgentProgram("p0", 0.0, (Call(10, 1, 0, "bash", 1.0), Call(20, 1, 11, None, 0.0))),)
)


@pytest.mark.parametrize(
    ("urls", "asked", "message"),
    [
        (_TWO, {"repeats": 0}, "repeats must be at least 1, not 0"),
        (
            {"vllm": _TWO["vllm"]},
            {"policies": ["vllm", "continuum"]},
            r"no server for continuum: give --url continuum=URL",
        ),
    ],
)
def test_validate_refuses_before_any_live_run(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    urls: dict[str, str],
    asked: dict[str, Any],
    message: str,
) -> None:
    ran: list[tuple[str, int]] = []
    monkeypatch.setattr(LiveSession, "run", lambda self, name, rep: ran.append((name, rep)))
    with pytest.raises(ValidateError, match=message):
        crosscheck.validate(_ONE_PROGRAM, Sources(urls=urls), work_dir=tmp_path, **asked)
    assert ran == []


def test_validate_runs_the_policies_in_its_own_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """vllm before continuum however they are asked (continuum's cold-start bundle needs
    the profile measured after the first policy's runs)."""
    ran: list[tuple[str, int]] = []

    def run(self: LiveSession, name: str, rep: int) -> None:
        ran.append((name, rep))
        raise _Stop

    monkeypatch.setattr(LiveSession, "run", run)
    with pytest.raises(_Stop):
        crosscheck.validate(
            _ONE_PROGRAM, Sources(urls=_TWO), policies=["continuum", "vllm"], work_dir=tmp_path
        )
    assert ran == [("vllm", 0)]


def test_a_validation_on_given_servers_records_its_settings_and_charges_no_new_size(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Servers given by URL are not warmed by validate and may have served for long: the
    simulated engine charges no step size as new (no ``sizes_run``, docs/validate.md); the
    document's config keeps the pause cap asked."""

    def run(self: LiveSession, name: str, rep: int) -> None:
        self.infos[name] = server_info()
        self.runs.setdefault(name, []).append({"jct_mean_s": 1.0, "prefix_hit_rate": 0.5})

    monkeypatch.setattr(LiveSession, "run", run)
    doc = crosscheck.validate(
        _ONE_PROGRAM,
        Sources(urls=_TWO),
        policies=["vllm"],
        profile=resolve("tiny-cpu")[0],
        idle_gap_cap_s=0.5,
        work_dir=tmp_path,
    )
    assert "sizes_run" not in doc["engine"]
    assert doc["config"]["idle_gap_cap_s"] == 0.5
    assert doc["simulation"]["idle_gap_cap_s"] == 0.5


def test_a_fleets_live_runs_in_order() -> None:
    """Run k of every (policy, router) before run k + 1 of any; one count over them all."""
    runs = fleet_runs(2, ["vllm", "continuum"], ["round_robin", "cache_aware"])
    assert len(runs) == 2 * 2 * 2
    assert runs[:4] == [
        (0, "vllm", "round_robin"),
        (0, "vllm", "cache_aware"),
        (0, "continuum", "round_robin"),
        (0, "continuum", "cache_aware"),
    ]
    assert {rep for rep, _, _ in runs[4:]} == {1}


_FAKE = """
import sys
from replay.validation import setup

def validation_doc(req, *, progress=None, runs_done=None, warn=None):
    for done in range(3):
        runs_done(done, 3)
        progress(f"vllm (run {done + 1} of 3): live replay")
    runs_done(3, 3)
    progress("vllm: simulating")
    return {"trace": str(req.trace), "rows": {"vllm": [1.5, 2.5]}}

setup.validation_doc = validation_doc
from ttlctl.cli import app
app(sys.argv[1:], prog_name="ttlctl")
"""


def _validate(trace: Path, terminal: bool) -> subprocess.CompletedProcess[str]:
    env = cli_env(terminal=terminal, columns=200)  # wide enough for the step's description
    cmd = [sys.executable, "-c", _FAKE, "validate", str(trace), "--url", "vllm=http://h:1"]
    return subprocess.run([*cmd, "--json", "-"], env=env, capture_output=True, text=True)


def test_the_validate_bar_counts_live_runs_on_a_terminal_only(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    trace.write_bytes(b"")
    piped, shown = _validate(trace, terminal=False), _validate(trace, terminal=True)
    assert piped.returncode == shown.returncode == 0, piped.stderr + shown.stderr
    assert piped.stderr == ""  # off a terminal: no bar, and no blank line either
    assert shown.stdout == piped.stdout
    doc: dict[str, Any] = json.loads(piped.stdout)
    assert doc["rows"] == {"vllm": [1.5, 2.5]}
    assert "validating" in shown.stderr and "3/3" in shown.stderr, shown.stderr
    assert "vllm (run 2 of 3): live replay" in shown.stderr
