"""Fit's η line prints its interval in the value's digits, so the value is never outside it.

On the shared TraceLab trace (two programs) η's bootstrap interval starts at η itself,
0.97945…, and fit printed "η = 0.979 (95% CI 0.98 … 1.00)": a value below its own interval.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from tests.conftest import make_trace
from ttlctl.cli import app
from ttlctl.cli.render.fit_view import fit_table


def test_the_eta_line_holds_its_value_inside_its_interval(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "trace.parquet", programs=12)
    out = tmp_path / "fit.json"
    res = CliRunner().invoke(app, ["fit", str(trace), "-o", str(out), "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    fit = json.loads(out.read_text())
    value = 0.9794520547945206  # η and its interval's low bound on the TraceLab trace
    fit["eta"].update(value=value, ci_low=value, ci_high=1.0)
    console = Console(file=io.StringIO(), width=200, record=True)
    fit_table(console, fit)
    line = next(x for x in console.export_text().splitlines() if x.startswith("η = "))
    assert line.startswith("η = 0.979 (95% CI 0.979 … 1.000) over 12 programs"), line
    shown, low, high = (float(x) for x in re.findall(r"-?\d+\.\d+", line)[:3])
    assert low <= shown <= high, line
