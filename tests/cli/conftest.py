"""Fixtures the command-line tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import make_trace
from ttlctl.cli import app


@pytest.fixture(scope="session")
def small_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 12-program trace and its fit (5 bootstrap draws): enough for a command to start."""
    root = tmp_path_factory.mktemp("small")
    trace = make_trace(root / "trace.parquet", programs=12)
    fit = root / "fit.json"
    res = CliRunner().invoke(app, ["fit", str(trace), "-o", str(fit), "--bootstrap", "5"])
    assert res.exit_code == 0, res.output
    return {"trace": trace, "fit": fit}
