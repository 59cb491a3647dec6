"""What replay says about the calls it rejects, and --truncate, which clips every call to fit
(none is then rejected for its length). One engine and a fleet alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import make_trace
from ttlctl.cli import app


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # every call has 100 output tokens: a 96-token cache cannot hold one even clipped
    return make_trace(tmp_path_factory.mktemp("trace") / "trace.parquet", programs=6)


def _rejected_line(trace: Path, *extra: str) -> str:
    args = ["replay", str(trace), "--policy", "vllm", "--kv-tokens", "96", *extra]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if "rejected" in line]
    assert len(lines) == 1, res.output
    return lines[0]


@pytest.mark.parametrize("fleet", [[], ["--replicas", "2"]], ids=["one engine", "fleet"])
def test_rejected_calls_suggest_truncate_only_without_it(trace: Path, fleet: list[str]) -> None:
    line = _rejected_line(trace, *fleet)
    assert line.endswith("their programs stop there; --truncate clips them instead"), line


@pytest.mark.parametrize("fleet", [[], ["--replicas", "2"]], ids=["one engine", "fleet"])
def test_with_truncate_no_call_is_rejected_for_its_length(
    tmp_path: Path, trace: Path, fleet: list[str]
) -> None:
    """--truncate clips each call as a live run's client does (replay.clip): an output that
    alone does not fit is halved, the prompt takes the rest. Regression: such a call was
    refused ("the output alone is longer …"), where the live client sends it halved, and
    where without --truncate the replay now serves a prompt that fits with its output cut."""
    out = tmp_path / "r.json"
    args = ["replay", str(trace), "--policy", "vllm", "--kv-tokens", "96", "--truncate"]
    res = CliRunner().invoke(app, [*args, *fleet, "--no-timing", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "rejected" not in res.output
    (result,) = json.loads(out.read_text())["results"]
    assert result["rejected_calls"] == 0 and result["truncated_calls"] == result["llm_calls"] > 0
