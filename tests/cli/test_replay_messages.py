"""What replay says about the calls it rejects: --truncate is suggested only when it is not
given; given, the line says why calls are still rejected (their output alone does not fit,
and --truncate clips only prompts). One engine and a fleet alike."""

from __future__ import annotations

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
def test_with_truncate_the_line_says_why_calls_are_still_rejected(
    trace: Path, fleet: list[str]
) -> None:
    line = _rejected_line(trace, "--truncate", *fleet)
    assert "clips them instead" not in line, line
    assert "the output alone is longer than the model or the KV cache" in line, line
    assert "--truncate clips only prompts" in line, line
