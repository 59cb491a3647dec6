"""A refused command, as every refusal must look: exit 2, no traceback, one line on stderr
starting with ``starts``, and no output file."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ttlctl.cli import app


def refused(args: list[str], out: Path, starts: str) -> str:
    """Run ``ttlctl args``, check it was refused so, and return its one line."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), res.stderr
    assert not out.exists()
    return lines[0]
