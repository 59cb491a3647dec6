"""A binary file given where JSON belongs is named for what it is (a trace in Parquet as a
fit, a profile or a validate document), not called damaged."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.filekind import binary_kind


def test_binary_kind_by_leading_bytes() -> None:
    assert binary_kind(b"PAR1\x15\x04") == "a Parquet file (a trace?)"
    assert binary_kind(gzip.compress(b"{}")[:16]) == "a gzip-compressed file"
    assert binary_kind(b"SQLite format 3\x00") == "an SQLite database (an Optuna study?)"
    assert binary_kind(b'{"schema": 1}') is None
    assert binary_kind(b"") is None


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    path = tmp_path / "trace.parquet"
    pl.DataFrame({"program_id": ["a"], "turn": [0]}).write_parquet(path)
    return path


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["bundle", "build", "--fit", "P", "--profile", "tiny-cpu", "-o", "OUT"], "not JSON"),
        (["replay", "P", "--profile", "P", "--policy", "vllm"], "not a profile's JSON"),
        (["validate", "--resimulate", "P"], "not a validate document (JSON)"),
    ],
)
def test_a_parquet_file_given_as_json_is_named(
    parquet: Path, tmp_path: Path, args: list[str], what: str
) -> None:
    """Regression: `--fit trace.parquet` read 'line 1: not UTF-8 text (byte 7); damaged?'."""
    args = [{"P": str(parquet), "OUT": str(tmp_path / "b.json")}.get(a, a) for a in args]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert f"{parquet}: a Parquet file (a trace?), {what}" in line, line
    assert "damaged" not in line and "Traceback" not in res.output
