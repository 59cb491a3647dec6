"""What every format's bad-input tests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ttlctl.ingest.ingest_report import IngestReport
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

#: name -> (bad file, expected reason text, expected record locator or None)
Cases = dict[str, tuple[Path, str, str | None]]


def assert_strict_errors(cases: Cases, fmt: str, out_dir: Path) -> None:
    """Without --skip-bad each bad file stops the run with one error naming file and record."""
    for name, (path, reason, record) in cases.items():
        with pytest.raises(IngestError) as err:
            ingest([path], out_dir / "strict.parquet", fmt=fmt)
        message = str(err.value)
        assert str(path) in message, name
        assert reason in message, (name, message)
        if record is not None:
            assert err.value.record == record, (name, message)


def read_rejects(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    with Path(path).open() as fh:
        return [json.loads(line) for line in fh]


def assert_strict_error(
    paths: list[Path], bad: Path, fmt: str, out: Path, record: str | None, reason: str
) -> None:
    """Strict ingest of ``paths`` fails on ``bad`` with the record and reason, writing nothing."""
    with pytest.raises(IngestError) as info:
        ingest(paths, out, fmt=fmt)
    assert info.value.file == str(bad)
    if record is not None:
        assert info.value.record == record
    assert reason in info.value.reason
    assert not out.exists()


def ingest_skipping_bad(
    paths: list[Path], out: Path, fmt: str, label: str = ""
) -> tuple[IngestReport, pl.DataFrame, list[dict[str, Any]]]:
    """--skip-bad ingest with what every format must show: something rejected, every
    record either written or rejected, and the rejects file accounting for each
    rejected record. Returns the report, the trace written and the rejects."""
    report = ingest(paths, out, fmt=fmt, skip_bad=True)
    assert report.rejected >= 1, label
    assert report.records == report.rows + report.rejected, label
    rejects = read_rejects(report.rejects_path)
    assert sum(r["records"] for r in rejects) == report.rejected, label
    return report, trace_io.read(out), rejects


def assert_cli_error_line(path: Path, fmt: str, out: Path, record: str, reason: str) -> None:
    """``ttlctl ingest`` (no --skip-bad) stops on ``path`` with exit code 2 and one line,
    ``error: FILE: RECORD: REASON…``, writing nothing."""
    from typer.testing import CliRunner

    from ttlctl.cli import app

    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(out), "--format", fmt])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {path}: {record}: {reason}"), lines[0]
    assert not out.exists()
